// RegistryClient: a synchronous client of the OCI distribution API (v2) for one registry.
// HTTP and HTTPS over net/http_client.h (server certificate verified against ca_file or the
// system store), basic auth from a docker config.json, and the bearer token flow (401
// WWW-Authenticate -> token endpoint) with a per-scope token cache. Retries 5xx, 429 and connection
// errors with exponential backoff and jitter. Credentials never appear in a Status message or a log
// line.
//
// Thread-safety: thread-safe; one instance per registry may be shared by many worker threads.
// Each call opens its own connection; only the auth state (token cache) is shared, under a
// mutex. Calls block the calling thread (each I/O step has a timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/http_client.h"

namespace kiln {

struct RegistryEndpoint {
  std::string url;                       // http(s)://host[:port]
  std::optional<std::string> auth_file;  // docker config.json with auths[<host:port>].auth
  std::optional<std::string> ca_file;    // PEM CA bundle for https; else system default paths
};

// --- Issue 19: every wait bounded ---
/// While alive, every request this thread sends through any RegistryClient ends by `deadline`:
/// each I/O step waits at most the time left, no retry starts after it, and a request that runs
/// out of time fails Unavailable "registry <host> did not answer within <what>" (`what` names
/// the bound in the caller's terms, e.g. "the build's timeout (build.timeout_s = 600 s)").
/// Nested scopes: the inner one applies until it ends. Per thread; not shared.
/// A thread's deadline as a value, to carry into the threads it starts: take
/// CurrentRegistryDeadline() on the starting thread and open a RegistryDeadlineScope with it
/// inside the new one (a deadline is per thread: std::async work would not see it otherwise).
struct RegistryDeadline {
  std::optional<std::chrono::steady_clock::time_point> at;  // unset: no deadline
  std::string what;
};
RegistryDeadline CurrentRegistryDeadline();

class RegistryDeadlineScope {
 public:
  RegistryDeadlineScope(std::chrono::steady_clock::time_point deadline, std::string what);
  /// The carried deadline; when it has none, this thread's stays as it was.
  explicit RegistryDeadlineScope(const RegistryDeadline& carried);
  ~RegistryDeadlineScope();
  RegistryDeadlineScope(const RegistryDeadlineScope&) = delete;
  RegistryDeadlineScope& operator=(const RegistryDeadlineScope&) = delete;

 private:
  std::optional<std::chrono::steady_clock::time_point> prev_deadline_;
  std::string prev_what_;
};
/// Time left under this thread's RegistryDeadlineScope (nullopt: none; may be <= 0).
std::optional<std::chrono::milliseconds> RegistryDeadlineLeft();
// --- end issue 19 ---

struct RegistryClientOptions {
  int attempts = 3;                             // tries per request (5xx, 429, conn errors)
  std::chrono::milliseconds backoff_base{100};  // doubled each retry, plus jitter
  std::chrono::milliseconds io_timeout{30000};  // per connect/handshake/write/read
  size_t max_manifest_bytes = 4 << 20;
  size_t max_blob_bytes = size_t{1} << 30;
};

// Media types.
inline constexpr char kOciManifestType[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kOciIndexType[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kDockerManifestType[] =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kDockerManifestListType[] =
    "application/vnd.docker.distribution.manifest.list.v2+json";

class RegistryClient {
 public:
  /// Never fails; a bad url, auth file or CA file is reported by every later call.
  explicit RegistryClient(RegistryEndpoint ep, RegistryClientOptions opts = {});
  ~RegistryClient();
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  /// "host:port" of the registry (as used in messages and auth file keys).
  const std::string& host() const { return hostport_; }

  /// GET /v2/. Ok when the registry answers 200 or 401; Unavailable when unreachable or on
  /// another status; FailedPrecondition for a TLS verification failure.
  Status Ping();

  /// HEAD /v2/<repo>/blobs/<digest>. Sets *exists. PermissionDenied on 401/403, Unavailable
  /// when unreachable, InvalidArgument for a bad repo or digest.
  Status BlobExists(const std::string& repo, const std::string& digest, bool* exists);

  /// Monolithic upload (POST then PUT ?digest=). InvalidArgument when sha256(data) != digest;
  /// PermissionDenied, Unavailable or Internal (unexpected status) otherwise. `verify` false
  /// skips kiln's own hash of `data` (the registry still checks the digest; issue 18: for bytes
  /// kiln hashed itself as it made them, e.g. the layered builder's layer). `data` is moved into
  /// the request: pass an rvalue to upload megabytes without a copy.
  Status PutBlob(const std::string& repo, const std::string& digest, std::string data,
                 bool verify = true);

  /// Cross-repository mount. *mounted is true on 201, false on 202 (the registry opened an
  /// upload instead; it is abandoned). Errors as PutBlob.
  Status MountBlob(const std::string& repo, const std::string& digest, const std::string& from_repo,
                   bool* mounted);

  /// GET a manifest by tag or digest (Accept: OCI and docker v2 manifests and indexes).
  /// NotFound "manifest unknown (404)"; ResourceExhausted over max_manifest_bytes; Internal
  /// when the body does not match a digest reference or the Docker-Content-Digest header.
  Status GetManifest(const std::string& repo, const std::string& reference, std::string* body,
                     std::string* media_type, std::string* digest);

  /// GET a blob; verifies its sha256. NotFound "blob unknown (404)"; Internal on mismatch.
  Status GetBlob(const std::string& repo, const std::string& digest, std::string* data);

  /// PUT a manifest under a tag or digest; *digest gets "sha256:<hex>" of body. Errors as
  /// PutBlob; InvalidArgument when the reference is a digest that does not match body.
  Status PutManifest(const std::string& repo, const std::string& reference,
                     const std::string& media_type, const std::string& body, std::string* digest);

  /// Implementation types (Request and Response are defined in the .cc).
  using Origin = HttpOrigin;
  struct Request;
  struct Response;

 private:
  struct Token {
    std::string value;
    std::chrono::steady_clock::time_point expires;
  };
  struct BearerInfo {
    std::string realm, service;
  };

  Status init_status_;
  const RegistryClientOptions opts_;
  std::unique_ptr<Origin> origin_;
  std::string hostport_;
  std::string basic_;                      // "user:pass" base64, empty when none; never logged
  std::shared_ptr<const TlsContext> tls_;  // https only; immutable after construction

  std::mutex mu_;
  std::map<std::string, Token> tokens_;  // guarded by mu_; key: joined scopes
  std::optional<BearerInfo> bearer_;     // guarded by mu_
  bool basic_mode_ = false;              // guarded by mu_

  Status Check(const std::string& repo) const;
  // One HTTP exchange with retries on 5xx/429/connection errors.
  Status Send(const Origin& origin, Request& req, Response* resp);
  // Send() with registry auth: cached token/basic, then one retry after a 401 challenge.
  Status SendAuthed(Request req, const std::vector<std::string>& scopes, const std::string& repo,
                    Response* resp);
  Status FetchToken(const BearerInfo& info, const std::vector<std::string>& scopes,
                    const std::string& repo, std::string* token);
  std::string AuthHeader(const std::vector<std::string>& scopes);
  // Maps a non-success status to a Status; kind: "manifest", "blob", ...; ref may be "".
  Status ErrorFor(const Response& resp, const std::string& kind, const std::string& ref,
                  const std::string& repo) const;
};

/// RegistryClients: one RegistryClient per endpoint — URL, auth file and CA together, so two
/// config entries for one registry with different credentials never share a client or its
/// token cache — created on first use and kept for the process.
/// Thread-safe. The returned clients live as long as this object.
class RegistryClients {
 public:
  RegistryClient* Get(const RegistryEndpoint& endpoint);

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<RegistryClient>> clients_;  // guarded by mu_
};

}  // namespace kiln
