// Authenticator: maps `Authorization: Bearer <token>` to a principal (a domain or the
// operator) and checks the Origin/Host headers against DNS-rebinding and cross-site requests.
//
// Token check: SHA-256 of the presented token is compared in constant time against EVERY
// configured hash (all domains and operator hashes, no early exit), so timing does not reveal
// which domain or how many hashes matched. Tokens are never logged or echoed.
//
// Origin policy (decided for kiln):
//   - no Origin header (CLI tools, SDK clients, git): allowed;
//   - Origin exactly equal (case-insensitive) to an entry of server.allowed_origins: allowed;
//   - Origin http(s)://localhost, 127.0.0.1 or [::1] with any port: allowed (a page served
//     from this machine; it still needs the bearer token);
//   - anything else, including "null": 403.
// Host policy: when the server listens on a loopback address, the Host header must name a
// loopback host (localhost, 127.0.0.1, [::1], any port), else 403 (DNS rebinding). A server
// listening on a non-loopback address does not check Host (it is reached by service names).
//
// Ownership: copies what it needs from the Config. Thread-safety: immutable after
// construction; all methods are const and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace kiln {

struct Principal {
  enum class Kind { kDomain, kOperator };
  Kind kind = Kind::kDomain;
  std::string domain;  // set for kDomain
};

/// Outcome of an authentication or origin check. ok() when status == 0.
struct AuthDecision {
  int status = 0;                // 0 = allowed; else the HTTP status to answer (401/403)
  std::string www_authenticate;  // value of WWW-Authenticate for 401
  std::string message;           // human-readable reason (never contains the token)
  std::optional<Principal> principal;
  bool ok() const { return status == 0; }
};

class Authenticator {
 public:
  /// `check_host`: enforce the loopback Host policy (set when listening on loopback).
  Authenticator(const Config& config, bool check_host);

  /// Checks Origin and Host. Returns status 403 with a message when refused.
  AuthDecision CheckOrigin(std::string_view origin, bool has_origin, std::string_view host) const;

  /// Resolves the Authorization header value. Returns status 401 (with WWW-Authenticate
  /// `Bearer`, plus `error="invalid_token"` when a token was given but is unknown) on failure.
  AuthDecision Authenticate(std::string_view authorization) const;

  /// True when `host` (a Host header value or URL authority) names a loopback host.
  static bool IsLoopbackHost(std::string_view host);

  /// True when `origin` is http(s)://<loopback host>[:port].
  static bool IsLoopbackOrigin(std::string_view origin);

 private:
  struct Entry {
    std::string sha256;
    Principal principal;
  };
  std::vector<Entry> entries_;
  std::vector<std::string> allowed_origins_;  // lowercased
  const bool check_host_;
};

}  // namespace kiln
