#include "transport/auth.h"

#include <algorithm>
#include <cctype>

#include "common/sha256.h"

namespace kiln {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Strips an optional ":port" (all digits) from an authority and returns the host part,
// or nullopt when the port is malformed.
std::optional<std::string> HostOfAuthority(std::string_view authority) {
  std::string a = Lower(authority);
  if (!a.empty() && a[0] == '[') {
    size_t close = a.find(']');
    if (close == std::string::npos) return std::nullopt;
    std::string rest = a.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || !AllDigits(rest.substr(1)))) return std::nullopt;
    return a.substr(0, close + 1);
  }
  size_t colon = a.find(':');
  if (colon == std::string::npos) return a;
  if (!AllDigits(std::string_view(a).substr(colon + 1))) return std::nullopt;
  return a.substr(0, colon);
}

}  // namespace

Authenticator::Authenticator(const Config& config, bool check_host) : check_host_(check_host) {
  for (const auto& [name, domain] : config.domains) {
    for (const auto& hash : domain.token_sha256) {
      Entry e;
      e.sha256 = Lower(hash);
      e.principal.kind = Principal::Kind::kDomain;
      e.principal.domain = name;
      entries_.push_back(std::move(e));
    }
  }
  for (const auto& hash : config.operator_token_sha256) {
    Entry e;
    e.sha256 = Lower(hash);
    e.principal.kind = Principal::Kind::kOperator;
    entries_.push_back(std::move(e));
  }
  for (const auto& o : config.server.allowed_origins) allowed_origins_.push_back(Lower(o));
}

bool Authenticator::IsLoopbackHost(std::string_view host) {
  auto h = HostOfAuthority(host);
  if (!h) return false;
  return *h == "localhost" || *h == "127.0.0.1" || *h == "[::1]";
}

bool Authenticator::IsLoopbackOrigin(std::string_view origin) {
  std::string o = Lower(origin);
  std::string_view rest;
  if (o.rfind("http://", 0) == 0) {
    rest = std::string_view(o).substr(7);
  } else if (o.rfind("https://", 0) == 0) {
    rest = std::string_view(o).substr(8);
  } else {
    return false;
  }
  if (rest.find('/') != std::string_view::npos) return false;
  return IsLoopbackHost(rest);
}

AuthDecision Authenticator::CheckOrigin(std::string_view origin, bool has_origin,
                                        std::string_view host) const {
  AuthDecision d;
  if (check_host_ && !IsLoopbackHost(host)) {
    d.status = 403;
    d.message = "Host header does not name this server (DNS rebinding protection)";
    return d;
  }
  if (!has_origin) return d;
  std::string o = Lower(origin);
  if (std::find(allowed_origins_.begin(), allowed_origins_.end(), o) != allowed_origins_.end()) {
    return d;
  }
  if (IsLoopbackOrigin(o)) return d;
  d.status = 403;
  d.message = "Origin not allowed (add it to server.allowed_origins)";
  return d;
}

AuthDecision Authenticator::Authenticate(std::string_view authorization) const {
  AuthDecision d;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.empty()) {
    d.status = 401;
    d.www_authenticate = "Bearer realm=\"kiln\"";
    d.message = "missing bearer token (send Authorization: Bearer <token>)";
    return d;
  }
  if (authorization.size() <= kScheme.size() ||
      Lower(authorization.substr(0, kScheme.size())) != kScheme) {
    d.status = 401;
    d.www_authenticate = "Bearer realm=\"kiln\", error=\"invalid_request\"";
    d.message = "Authorization header must use the Bearer scheme";
    return d;
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  std::string presented = Sha256Hex(token);
  // Compare against every entry; remember the first match without branching out early.
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    bool eq = ConstantTimeEquals(presented, e.sha256);
    if (eq && match == nullptr) match = &e;
  }
  if (token.empty() || match == nullptr) {
    d.status = 401;
    d.www_authenticate = "Bearer realm=\"kiln\", error=\"invalid_token\"";
    d.message = "invalid bearer token";
    return d;
  }
  d.principal = match->principal;
  return d;
}

}  // namespace kiln
