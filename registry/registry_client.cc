#include "registry/registry_client.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/beast/http/verb.hpp>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/base64.h"
#include "common/sha256.h"
#include "registry/www_authenticate.h"

namespace kiln {

namespace http = boost::beast::http;

struct RegistryClient::Request {
  http::verb method = http::verb::get;
  std::optional<Origin> origin;  // absent: the registry itself
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  size_t body_limit = 1 << 20;
};

struct RegistryClient::Response : HttpClientResponse {};

namespace {

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxTokenBody = 1 << 20;

bool ValidRepo(const std::string& r) {
  if (r.empty() || r.size() > 255 || r.front() == '/' || r.back() == '/') return false;
  if (r.find("//") != std::string::npos || r.find("..") != std::string::npos) return false;
  for (char c : r) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
          c == '/'))
      return false;
  }
  return true;
}

bool ValidTag(const std::string& t) {
  if (t.empty() || t.size() > 128) return false;
  if (!(std::isalnum(static_cast<unsigned char>(t[0])) || t[0] == '_')) return false;
  for (char c : t) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  }
  return true;
}

std::string ScopeFor(const std::string& repo, bool push) {
  return "repository:" + repo + (push ? ":pull,push" : ":pull");
}

std::string JoinScopes(const std::vector<std::string>& scopes) {
  std::string k;
  for (const auto& s : scopes) k += s + " ";
  return k;
}

// The registry's error code/message from an errors body, short; "" when none.
std::string RegistryErrorText(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("errors") || !j["errors"].is_array() ||
      j["errors"].empty())
    return "";
  const auto& e = j["errors"][0];
  std::string t;
  if (e.is_object() && e.contains("code") && e["code"].is_string())
    t = e["code"].get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    t += (t.empty() ? "" : ": ") + e["message"].get<std::string>();
  if (t.size() > 200) t = t.substr(0, 200) + "...";
  return t;
}

}  // namespace

RegistryClient::RegistryClient(RegistryEndpoint ep, RegistryClientOptions opts)
    : opts_(opts), origin_(std::make_unique<Origin>()) {
  std::string rest;
  if (!ParseHttpUrl(ep.url, origin_.get(), &rest) || (!rest.empty() && rest != "/")) {
    init_status_ =
        Status::InvalidArgument("registry url '" + ep.url + "' is not http(s)://host[:port]");
    return;
  }
  hostport_ = origin_->HostPort();
  if (ep.auth_file) {
    std::ifstream in(*ep.auth_file);
    if (!in) {
      init_status_ = Status::FailedPrecondition("registry " + hostport_ +
                                                ": cannot read auth file " + *ep.auth_file);
      return;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      init_status_ = Status::FailedPrecondition("registry " + hostport_ + ": auth file " +
                                                *ep.auth_file + " is not a JSON object");
      return;
    }
    if (j.contains("auths") && j["auths"].is_object()) {
      const auto& auths = j["auths"];
      std::string scheme = origin_->tls ? "https://" : "http://";
      std::vector<std::string> keys = {hostport_, scheme + hostport_};
      if ((origin_->tls && origin_->port == "443") || (!origin_->tls && origin_->port == "80")) {
        keys.push_back(origin_->host);
        keys.push_back(scheme + origin_->host);
      }
      for (const auto& k : keys) {
        if (!auths.contains(k) || !auths[k].is_object()) continue;
        const auto& a = auths[k];
        if (a.contains("auth") && a["auth"].is_string()) {
          basic_ = a["auth"].get<std::string>();
        } else if (a.contains("username") && a["username"].is_string() && a.contains("password") &&
                   a["password"].is_string()) {
          basic_ = EncodeBase64(a["username"].get<std::string>() + ":" +
                                a["password"].get<std::string>());
        }
        break;
      }
    }
  }
  if (origin_->tls) {
    TlsOptions tls;
    tls.ca_file = ep.ca_file;
    Status st = TlsContext::Create(tls, &tls_);
    if (!st.ok()) {
      init_status_ = Status::FailedPrecondition("registry " + hostport_ + ": " + st.message());
      return;
    }
  }
}

RegistryClient::~RegistryClient() = default;

Status RegistryClient::Check(const std::string& repo) const {
  if (!init_status_.ok()) return init_status_;
  if (!ValidRepo(repo)) return Status::InvalidArgument("invalid repository name '" + repo + "'");
  return Status::Ok();
}

// --- Issue 19: every wait bounded ---
namespace {
thread_local std::optional<std::chrono::steady_clock::time_point> t_deadline;
thread_local std::string t_deadline_what;
}  // namespace

RegistryDeadlineScope::RegistryDeadlineScope(std::chrono::steady_clock::time_point deadline,
                                             std::string what)
    : prev_deadline_(t_deadline), prev_what_(t_deadline_what) {
  t_deadline = deadline;
  t_deadline_what = std::move(what);
}

RegistryDeadlineScope::RegistryDeadlineScope(const RegistryDeadline& carried)
    : prev_deadline_(t_deadline), prev_what_(t_deadline_what) {
  if (!carried.at) return;
  t_deadline = carried.at;
  t_deadline_what = carried.what;
}

RegistryDeadline CurrentRegistryDeadline() { return RegistryDeadline{t_deadline, t_deadline_what}; }

RegistryDeadlineScope::~RegistryDeadlineScope() {
  t_deadline = prev_deadline_;
  t_deadline_what = prev_what_;
}

std::optional<std::chrono::milliseconds> RegistryDeadlineLeft() {
  if (!t_deadline) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*t_deadline -
                                                               std::chrono::steady_clock::now());
}
// --- end issue 19 ---

Status RegistryClient::Send(const Origin& origin, Request& r, Response* resp) {
  // The body goes to the round trip and back (swapped, not copied: a layer is megabytes).
  HttpClientRequest req;
  req.body.swap(r.body);
  struct GiveBack {
    std::string& from;
    std::string& to;
    ~GiveBack() { to.swap(from); }
  } give_back{req.body, r.body};
  Status last;
  const std::string where = "registry " + origin.HostPort();
  const std::string path =
      r.target.substr(0, r.target.find('?'));  // the query may hold upload state
  for (int attempt = 0; attempt < std::max(1, opts_.attempts); ++attempt) {
    // Issue 19: the caller's deadline bounds every step and every retry.
    std::chrono::milliseconds timeout = opts_.io_timeout;
    if (auto left = RegistryDeadlineLeft()) {
      if (attempt > 0) *left -= opts_.backoff_base * (1 << std::min(attempt, 10));
      if (left->count() <= 0)
        return Status::Unavailable(where + " did not answer within " + t_deadline_what +
                                   (last.ok() ? std::string() : " (" + last.message() + ")"));
      timeout = std::min(timeout, *left);
    }
    if (attempt > 0) {
      // Only the origin, the path and the error.
      spdlog::warn("{}: retrying {} {} (attempt {}): {}", where,
                   std::string(http::to_string(r.method)), path, attempt + 1, last.message());
      SleepBeforeRetry(opts_.backoff_base, attempt);
    }
    req.method = std::string(http::to_string(r.method));
    req.target = r.target;
    req.headers = r.headers;
    req.body_limit = r.body_limit;
    HttpResult x;
    try {
      x = HttpRoundTrip(origin, tls_.get(), req, timeout, resp);
    } catch (const std::exception& e) {
      return Status::Internal(where + ": " + e.what());
    }
    if (!x.ok()) {
      bool retryable = false;
      last = HttpFailureStatus(x, where, path, r.body_limit, &retryable);
      if (retryable) continue;
      return last;
    }
    if (resp->status >= 500 || resp->status == 429) {
      last = Status::Unavailable(where + " returned " + std::to_string(resp->status));
      continue;
    }
    return Status::Ok();
  }
  if (auto left = RegistryDeadlineLeft(); left && left->count() <= 0)  // issue 19
    return Status::Unavailable(where + " did not answer within " + t_deadline_what + " (" +
                               last.message() + ")");
  return last;
}

std::string RegistryClient::AuthHeader(const std::vector<std::string>& scopes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(JoinScopes(scopes));
  if (it != tokens_.end() && it->second.expires > std::chrono::steady_clock::now())
    return "Bearer " + it->second.value;
  if (basic_mode_ && !basic_.empty()) return "Basic " + basic_;
  return "";
}

Status RegistryClient::FetchToken(const BearerInfo& info, const std::vector<std::string>& scopes,
                                  const std::string& repo, std::string* token) {
  Origin realm;
  std::string rest;
  if (!ParseHttpUrl(info.realm, &realm, &rest))
    return Status::FailedPrecondition("registry " + hostport_ + ": bad bearer realm url");
  Request req;
  req.origin = realm;
  req.target = rest.empty() ? "/" : rest;
  char sep = req.target.find('?') == std::string::npos ? '?' : '&';
  if (!info.service.empty()) {
    req.target += sep + std::string("service=") + UrlEncode(info.service);
    sep = '&';
  }
  for (const auto& s : scopes) {
    req.target += sep + std::string("scope=") + UrlEncode(s);
    sep = '&';
  }
  req.body_limit = kMaxTokenBody;
  // Credentials go to the token endpoint only over TLS or when the registry itself is plain.
  if (!basic_.empty() && (realm.tls || !origin_->tls))
    req.headers.emplace_back("Authorization", "Basic " + basic_);
  Response resp;
  Status st = Send(realm, req, &resp);
  if (!st.ok()) return st;
  if (resp.status == 401)
    return Status::PermissionDenied("registry " + hostport_ +
                                    " token endpoint rejected the credential (401) for " + repo);
  if (resp.status == 403)
    return Status::PermissionDenied("registry " + hostport_ + " token endpoint denied (403) " +
                                    repo);
  if (resp.status != 200)
    return Status::Unavailable("registry " + hostport_ + " token endpoint returned " +
                               std::to_string(resp.status));
  auto j = nlohmann::json::parse(resp.body, nullptr, false);
  std::string t;
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("token") && j["token"].is_string()) t = j["token"].get<std::string>();
    if (t.empty() && j.contains("access_token") && j["access_token"].is_string())
      t = j["access_token"].get<std::string>();
  }
  if (t.empty())
    return Status::Internal("registry " + hostport_ + " token endpoint returned no token");
  long ttl = 60;
  if (j.contains("expires_in") && j["expires_in"].is_number_integer())
    ttl = std::max<long>(j["expires_in"].get<long>(), 1);
  std::lock_guard<std::mutex> lock(mu_);
  tokens_[JoinScopes(scopes)] = {
      t, std::chrono::steady_clock::now() + std::chrono::seconds(std::max<long>(ttl - 5, 1))};
  *token = t;
  return Status::Ok();
}

Status RegistryClient::SendAuthed(Request req, const std::vector<std::string>& scopes,
                                  const std::string& repo, Response* resp) {
  // The request is the caller's (moved in: a blob upload's body is not copied); the retry after
  // a 401 sends it again without the Authorization header added here.
  const Origin origin = req.origin ? *req.origin : *origin_;
  bool same_origin = origin == *origin_;
  const size_t caller_headers = req.headers.size();
  std::string auth = same_origin ? AuthHeader(scopes) : "";
  if (auth.empty() && same_origin) {
    // A known bearer realm: fetch a token up front and save a 401 round trip.
    std::optional<BearerInfo> info;
    {
      std::lock_guard<std::mutex> lock(mu_);
      info = bearer_;
    }
    std::string token;
    if (info && FetchToken(*info, scopes, repo, &token).ok()) auth = "Bearer " + token;
  }
  if (!auth.empty()) req.headers.emplace_back("Authorization", auth);
  Status st = Send(origin, req, resp);
  if (!st.ok() || resp->status != 401 || !same_origin) return st;

  std::vector<Challenge> challenges;
  Status pst = ParseWwwAuthenticate(resp->Header("www-authenticate"), &challenges);
  if (!pst.ok())
    return Status::FailedPrecondition("registry " + hostport_ +
                                      " sent a bad 401 challenge: " + pst.message());
  const Challenge* bearer = nullptr;
  const Challenge* basic = nullptr;
  for (const auto& c : challenges) {
    if (c.scheme == "bearer" && !bearer) bearer = &c;
    if (c.scheme == "basic" && !basic) basic = &c;
  }
  req.headers.resize(caller_headers);
  if (bearer) {
    BearerInfo info{bearer->Param("realm"), bearer->Param("service")};
    if (info.realm.empty())
      return Status::FailedPrecondition("registry " + hostport_ +
                                        " sent a Bearer challenge without realm");
    {
      std::lock_guard<std::mutex> lock(mu_);
      bearer_ = info;
    }
    std::vector<std::string> want = scopes;
    std::string cs = bearer->Param("scope");
    if (!cs.empty() && std::find(want.begin(), want.end(), cs) == want.end()) want.push_back(cs);
    std::string token;
    Status ts = FetchToken(info, want, repo, &token);
    if (!ts.ok()) return ts;
    if (want != scopes) {
      std::lock_guard<std::mutex> lock(mu_);
      tokens_[JoinScopes(scopes)] = tokens_[JoinScopes(want)];
    }
    req.headers.emplace_back("Authorization", "Bearer " + token);
  } else if (basic) {
    if (basic_.empty())
      return Status::PermissionDenied("registry " + hostport_ +
                                      " requires a credential (401) for " + repo +
                                      " and none is configured");
    {
      std::lock_guard<std::mutex> lock(mu_);
      basic_mode_ = true;
    }
    req.headers.emplace_back("Authorization", "Basic " + basic_);
  } else {
    return Status::FailedPrecondition("registry " + hostport_ +
                                      " asks for an unsupported auth scheme");
  }
  return Send(origin, req, resp);
}

Status RegistryClient::ErrorFor(const Response& resp, const std::string& kind,
                                const std::string& ref, const std::string& repo) const {
  const std::string what = ref.empty() ? kind : kind + " " + ref;
  std::string detail = resp.body.size() <= kMaxErrorBody ? RegistryErrorText(resp.body) : "";
  std::string suffix = detail.empty() ? "" : " [" + detail + "]";
  const std::string reg = "registry " + hostport_;
  switch (resp.status) {
    case 401:
      if (basic_.empty())
        return Status::PermissionDenied(reg + " requires a credential (401) for " + repo +
                                        " and none is configured" + suffix);
      return Status::PermissionDenied(reg + " rejected the credential (401) for " + repo + suffix);
    case 403:
      return Status::PermissionDenied(reg + " denied (403) " + what + " in " + repo + suffix);
    case 404:
      return Status::NotFound(kind + " unknown (404): " + (ref.empty() ? "" : ref + " ") + "in " +
                              repo + " at " + reg + suffix);
    default:
      if (resp.status >= 500 || resp.status == 429)
        return Status::Unavailable(reg + " returned " + std::to_string(resp.status) + " for " +
                                   what + " in " + repo + suffix);
      return Status::Internal(reg + " returned unexpected " + std::to_string(resp.status) +
                              " for " + what + " in " + repo + suffix);
  }
}

Status RegistryClient::Ping() {
  if (!init_status_.ok()) return init_status_;
  Request req;
  req.target = "/v2/";
  req.body_limit = kMaxErrorBody;
  Response resp;
  Status st = Send(*origin_, req, &resp);
  if (!st.ok()) return st;
  if (resp.status == 200 || resp.status == 401) return Status::Ok();
  return Status::Unavailable("registry " + hostport_ + " answered " + std::to_string(resp.status) +
                             " to GET /v2/");
}

Status RegistryClient::BlobExists(const std::string& repo, const std::string& digest,
                                  bool* exists) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  if (!IsSha256Digest(digest)) return Status::InvalidArgument("invalid digest '" + digest + "'");
  Request req;
  req.method = http::verb::head;
  req.target = "/v2/" + repo + "/blobs/" + digest;
  Response resp;
  st = SendAuthed(req, {ScopeFor(repo, true)}, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status == 200) {
    *exists = true;
    return Status::Ok();
  }
  if (resp.status == 404) {
    *exists = false;
    return Status::Ok();
  }
  return ErrorFor(resp, "blob", digest, repo);
}

namespace {
// Resolves a Location header against the registry origin; false when unusable.
bool ResolveLocation(const std::string& loc, const RegistryClient::Origin& base,
                     RegistryClient::Origin* origin, std::string* target) {
  if (loc.empty()) return false;
  if (loc[0] == '/') {
    *origin = base;
    *target = loc;
    return true;
  }
  std::string rest;
  if (!ParseHttpUrl(loc, origin, &rest)) return false;
  *target = rest.empty() ? "/" : rest;
  return true;
}
}  // namespace

Status RegistryClient::PutBlob(const std::string& repo, const std::string& digest, std::string data,
                               bool verify) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  if (!IsSha256Digest(digest)) return Status::InvalidArgument("invalid digest '" + digest + "'");
  if (verify && "sha256:" + Sha256Hex(data) != digest)
    return Status::InvalidArgument("blob data does not match digest " + digest);
  const std::vector<std::string> scopes = {ScopeFor(repo, true)};
  Request post;
  post.method = http::verb::post;
  post.target = "/v2/" + repo + "/blobs/uploads/";
  post.body_limit = kMaxErrorBody;
  Response resp;
  st = SendAuthed(post, scopes, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status != 202) return ErrorFor(resp, "blob upload", "", repo);
  Request put;
  Origin loc_origin;
  if (!ResolveLocation(resp.Header("location"), *origin_, &loc_origin, &put.target))
    return Status::Internal("registry " + hostport_ + " gave no usable upload Location");
  put.origin = loc_origin;
  put.method = http::verb::put;
  put.target += (put.target.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") +
                UrlEncode(digest);
  put.headers.emplace_back("Content-Type", "application/octet-stream");
  put.body = std::move(data);
  put.body_limit = kMaxErrorBody;
  st = SendAuthed(std::move(put), scopes, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status != 201) return ErrorFor(resp, "blob", digest, repo);
  std::string got = resp.Header("docker-content-digest");
  if (!got.empty() && got != digest)
    return Status::Internal("registry " + hostport_ + " stored blob as " + got + ", expected " +
                            digest);
  return Status::Ok();
}

Status RegistryClient::MountBlob(const std::string& repo, const std::string& digest,
                                 const std::string& from_repo, bool* mounted) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  if (!ValidRepo(from_repo))
    return Status::InvalidArgument("invalid repository name '" + from_repo + "'");
  if (!IsSha256Digest(digest)) return Status::InvalidArgument("invalid digest '" + digest + "'");
  Request post;
  post.method = http::verb::post;
  post.target = "/v2/" + repo + "/blobs/uploads/?mount=" + UrlEncode(digest) +
                "&from=" + UrlEncode(from_repo);
  post.body_limit = kMaxErrorBody;
  Response resp;
  st = SendAuthed(post, {ScopeFor(repo, true), ScopeFor(from_repo, false)}, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status == 201) {
    *mounted = true;
    return Status::Ok();
  }
  if (resp.status == 202) {
    *mounted = false;
    // Abandon the upload session the registry opened instead (best effort).
    Request del;
    if (ResolveLocation(resp.Header("location"), *origin_, &del.origin.emplace(), &del.target)) {
      del.method = http::verb::delete_;
      del.body_limit = kMaxErrorBody;
      Response ignored;
      SendAuthed(del, {ScopeFor(repo, true)}, repo, &ignored);
    }
    return Status::Ok();
  }
  return ErrorFor(resp, "blob mount", digest, repo);
}

Status RegistryClient::GetManifest(const std::string& repo, const std::string& reference,
                                   std::string* body, std::string* media_type,
                                   std::string* digest) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  bool by_digest = IsSha256Digest(reference);
  if (!by_digest && !ValidTag(reference))
    return Status::InvalidArgument("invalid manifest reference '" + reference + "'");
  Request req;
  req.target = "/v2/" + repo + "/manifests/" + reference;
  req.headers.emplace_back("Accept", std::string(kOciManifestType) + ", " + kOciIndexType + ", " +
                                         kDockerManifestType + ", " + kDockerManifestListType);
  req.body_limit = opts_.max_manifest_bytes;
  Response resp;
  st = SendAuthed(req, {ScopeFor(repo, false)}, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status != 200) return ErrorFor(resp, "manifest", reference, repo);
  std::string d = "sha256:" + Sha256Hex(resp.body);
  if (by_digest && d != reference)
    return Status::Internal("registry " + hostport_ + " returned a manifest with digest " + d +
                            " for " + reference);
  std::string header = resp.Header("docker-content-digest");
  if (!by_digest && !header.empty() && header != d)
    return Status::Internal("registry " + hostport_ + " manifest digest header " + header +
                            " does not match body " + d);
  if (media_type) {
    std::string ct = resp.Header("content-type");
    *media_type = ct.substr(0, ct.find(';'));
  }
  if (digest) *digest = d;
  *body = std::move(resp.body);
  return Status::Ok();
}

Status RegistryClient::GetBlob(const std::string& repo, const std::string& digest,
                               std::string* data) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  if (!IsSha256Digest(digest)) return Status::InvalidArgument("invalid digest '" + digest + "'");
  Request req;
  req.target = "/v2/" + repo + "/blobs/" + digest;
  req.body_limit = opts_.max_blob_bytes;
  Response resp;
  st = SendAuthed(req, {ScopeFor(repo, false)}, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status == 307 || resp.status == 302) {
    // Redirect to storage (no registry credentials sent there).
    Request redirected;
    if (!ResolveLocation(resp.Header("location"), *origin_, &redirected.origin.emplace(),
                         &redirected.target))
      return Status::Internal("registry " + hostport_ + " gave a bad blob redirect");
    redirected.body_limit = opts_.max_blob_bytes;
    st = SendAuthed(redirected, {ScopeFor(repo, false)}, repo, &resp);
    if (!st.ok()) return st;
  }
  if (resp.status != 200) return ErrorFor(resp, "blob", digest, repo);
  if ("sha256:" + Sha256Hex(resp.body) != digest)
    return Status::Internal("registry " + hostport_ + " returned blob data not matching " + digest);
  *data = std::move(resp.body);
  return Status::Ok();
}

Status RegistryClient::PutManifest(const std::string& repo, const std::string& reference,
                                   const std::string& media_type, const std::string& body,
                                   std::string* digest) {
  Status st = Check(repo);
  if (!st.ok()) return st;
  std::string d = "sha256:" + Sha256Hex(body);
  bool by_digest = IsSha256Digest(reference);
  if (!by_digest && !ValidTag(reference))
    return Status::InvalidArgument("invalid manifest reference '" + reference + "'");
  if (by_digest && reference != d)
    return Status::InvalidArgument("manifest body does not match digest " + reference);
  if (body.size() > opts_.max_manifest_bytes)
    return Status::ResourceExhausted("manifest larger than " +
                                     std::to_string(opts_.max_manifest_bytes) + " bytes");
  Request req;
  req.method = http::verb::put;
  req.target = "/v2/" + repo + "/manifests/" + reference;
  req.headers.emplace_back("Content-Type", media_type);
  req.body = body;
  req.body_limit = kMaxErrorBody;
  Response resp;
  st = SendAuthed(req, {ScopeFor(repo, true)}, repo, &resp);
  if (!st.ok()) return st;
  if (resp.status != 201) return ErrorFor(resp, "manifest", reference, repo);
  std::string got = resp.Header("docker-content-digest");
  if (!got.empty() && got != d)
    return Status::Internal("registry " + hostport_ + " stored manifest as " + got + ", expected " +
                            d);
  if (digest) *digest = d;
  return Status::Ok();
}

RegistryClient* RegistryClients::Get(const RegistryEndpoint& endpoint) {
  std::lock_guard<std::mutex> l(mu_);
  auto& c = clients_[endpoint.url + '\n' + endpoint.auth_file.value_or("") + '\n' +
                     endpoint.ca_file.value_or("")];
  if (!c) c = std::make_unique<RegistryClient>(endpoint);
  return c.get();
}

}  // namespace kiln
