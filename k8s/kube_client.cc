#include "k8s/kube_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <thread>

#include "common/json_text.h"

namespace kiln {

namespace {

constexpr size_t kMaxQuoted = 400;

// The `message` of a Kubernetes Status body, shortened; "" when the body is not a Status.
std::string StatusMessage(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  auto it = j.find("message");
  if (it == j.end() || !it->is_string()) return "";
  std::string m = it->get<std::string>();
  if (m.size() > kMaxQuoted) m = m.substr(0, kMaxQuoted) + "...";
  return m;
}

std::string StatusReason(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  auto it = j.find("reason");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

void SetErr(KubeCallError* err, int status, std::string reason) {
  if (!err) return;
  err->http_status = status;
  err->reason = std::move(reason);
}

std::string Quoted(const std::string& m) { return m.empty() ? "" : ": " + m; }

thread_local std::optional<std::chrono::steady_clock::time_point> tls_call_deadline;

}  // namespace

KubeCallDeadline::KubeCallDeadline(std::chrono::steady_clock::time_point deadline)
    : previous_(tls_call_deadline) {
  tls_call_deadline = deadline;
}

KubeCallDeadline::~KubeCallDeadline() { tls_call_deadline = previous_; }

std::optional<std::chrono::steady_clock::time_point> KubeCallDeadline::Current() {
  return tls_call_deadline;
}

std::string KubeClient::Object::Describe() const {
  std::string r = group.empty() ? resource : resource + "." + group;
  if (!name.empty()) r += " \"" + name + "\"";
  return r + " in namespace \"" + ns + "\"";
}

KubeClient::KubeClient(std::string server, HttpOrigin origin, std::shared_ptr<const TlsContext> tls,
                       std::shared_ptr<TokenSource> token, KubeClientOptions opts,
                       std::string source)
    : server_(std::move(server)),
      origin_(std::move(origin)),
      tls_(std::move(tls)),
      token_(std::move(token)),
      opts_(opts),
      source_(std::move(source)) {}

Status KubeClient::Create(const KubeConfig& cfg, KubeClientOptions opts,
                          std::unique_ptr<KubeClient>* out) {
  HttpOrigin origin;
  std::string rest;
  if (!ParseHttpUrl(cfg.server, &origin, &rest) || !origin.tls || (!rest.empty() && rest != "/"))
    return Status::FailedPrecondition("Kubernetes API server '" + cfg.server +
                                      "' is not https://host[:port]");
  std::shared_ptr<const TlsContext> tls;
  Status st = TlsContext::Create(cfg.tls, &tls);
  if (!st.ok())
    return Status::FailedPrecondition("Kubernetes API " + cfg.server + " (" + cfg.source +
                                      "): " + st.message());
  out->reset(new KubeClient(cfg.server, origin, std::move(tls), cfg.token, opts, cfg.source));
  return Status::Ok();
}

Status KubeClient::Send(const std::string& method, const std::string& target,
                        const std::string& content_type, const std::string& body,
                        HttpClientResponse* resp, KubeCallError* err) {
  const std::string where = "Kubernetes API " + server_;
  const std::string path = target.substr(0, target.find('?'));
  Status last;
  bool reread_token = false;
  int attempts = std::max(1, opts_.attempts);
  const auto deadline = KubeCallDeadline::Current();
  // Issue 19: the time left before the caller's deadline bounds each step; none left ends the call.
  auto io_timeout = [&]() -> std::optional<std::chrono::milliseconds> {
    if (!deadline) return opts_.io_timeout;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        *deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    return std::min(opts_.io_timeout, left);
  };
  int last_http = 0;  // the last attempt's HTTP status (5xx/429), 0 when it had no answer
  auto out_of_time = [&]() {
    SetErr(err, last_http, "Unavailable");  // "failing (HTTP 503)" stays that, not "unreachable"
    return Status::Unavailable(where + ": no answer to " + method + " " + path +
                               " before the deploy's deadline" +
                               (last.ok() ? "" : " (last error: " + last.message() + ")"));
  };
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) {
      spdlog::warn("{}: retrying {} {} (attempt {}): {}", where, method, path, attempt + 1,
                   last.message());
      SleepBeforeRetry(opts_.backoff_base, attempt);
    }
    const auto step_timeout = io_timeout();
    if (!step_timeout) return out_of_time();
    HttpClientRequest req;
    req.method = method;
    req.target = target;
    req.body = body;
    req.body_limit = opts_.max_body_bytes;
    req.headers.emplace_back("Accept", "application/json");
    if (!content_type.empty()) req.headers.emplace_back("Content-Type", content_type);
    if (token_) {
      std::string token;
      Status ts = token_->Get(&token);
      if (!ts.ok()) {
        SetErr(err, 0, "Unauthorized");
        return Status::FailedPrecondition(where + ": no usable credential (" + source_ +
                                          "): " + ts.message());
      }
      req.headers.emplace_back("Authorization", "Bearer " + token);
    }
    HttpResult x;
    try {
      x = HttpRoundTrip(origin_, tls_.get(), req, *step_timeout, resp);
    } catch (const std::exception& e) {
      SetErr(err, 0, "Unavailable");
      return Status::Internal(where + ": " + e.what());
    }
    if (!x.ok()) {
      bool retryable = false;
      last = HttpFailureStatus(x, where, path, opts_.max_body_bytes, &retryable);
      if (retryable) {
        last_http = 0;
        SetErr(err, 0, "Unavailable");
        continue;
      }
      if (x.failure == HttpFailure::kTls) {
        SetErr(err, 0, "TLSError");
        return Status::FailedPrecondition(last.message() + " (check the cluster CA of " + source_ +
                                          ")");
      }
      SetErr(err, 0, "BadResponse");
      return last;
    }
    if (resp->status >= 500 || resp->status == 429) {
      last = Status::Unavailable(where + " returned " + std::to_string(resp->status) + " for " +
                                 method + " " + path + Quoted(StatusMessage(resp->body)));
      last_http = resp->status;
      SetErr(err, resp->status, "Unavailable");
      continue;
    }
    if (resp->status == 401 && !reread_token && token_ && token_->Refresh()) {
      // A rotated service-account token: read the file again and retry once.
      reread_token = true;
      spdlog::info("{}: 401 for {} {}; re-reading {}", where, method, path, token_->Describe());
      --attempt;
      continue;
    }
    return Status::Ok();
  }
  return last;
}

Status KubeClient::ErrorFor(const Object& obj, const HttpClientResponse& resp,
                            KubeCallError* err) const {
  std::string msg = StatusMessage(resp.body);
  if (err) err->api_message = msg;
  std::string reason = StatusReason(resp.body);
  const std::string what = obj.Describe();
  switch (resp.status) {
    case 401: {
      SetErr(err, 401, "Unauthorized");
      std::string cred = token_ ? token_->Describe() : std::string("the client certificate");
      return Status::PermissionDenied(
          "Kubernetes API " + server_ + " rejected kiln's credential (401 Unauthorized) for " +
          obj.verb + " " + what + Quoted(msg) + " — check " + cred + " of " + source_);
    }
    case 403:
      SetErr(err, 403, "Forbidden");
      return Status::PermissionDenied("kiln may not " + obj.verb + " " + what + Quoted(msg) +
                                      " — grant verb \"" + obj.verb + "\" on \"" + obj.resource +
                                      "\" (" + (obj.group.empty() ? "core" : obj.group) + ")");
    case 404:
      SetErr(err, 404, "NotFound");
      return Status::NotFound(what.substr(0, what.find(" in namespace ")) +
                              " not found in namespace \"" + obj.ns + "\" (Kubernetes API " +
                              server_ + ")" + Quoted(msg));
    case 409:
      SetErr(err, 409, "Conflict");
      return Status::FailedPrecondition("conflict on " + obj.verb + " " + what + Quoted(msg));
    case 422:
      SetErr(err, 422, "Invalid");
      return Status::InvalidArgument("Kubernetes rejected " + obj.verb + " " + what +
                                     " as invalid" + Quoted(msg));
    case 400:  // e.g. pods/log?previous=true without a previous container
      SetErr(err, 400, reason.empty() ? "BadRequest" : reason);
      return Status::InvalidArgument("Kubernetes API " + server_ + " refused " + obj.verb + " " +
                                     what + " (400)" + Quoted(msg));
    case 415:
      SetErr(err, 415, reason.empty() ? "UnsupportedMediaType" : reason);
      return Status::Internal("Kubernetes API " + server_ + " does not accept the " + obj.verb +
                              " of " + what + Quoted(msg));
    default:
      SetErr(err, resp.status, reason.empty() ? "BadResponse" : reason);
      return Status::Internal("Kubernetes API " + server_ + " answered " +
                              std::to_string(resp.status) + " to " + obj.verb + " " + what +
                              Quoted(msg));
  }
}

Status KubeClient::Call(const Object& obj, const std::string& method, const std::string& target,
                        const std::string& content_type, const std::string& body,
                        nlohmann::json* out, KubeCallError* err) {
  Describe(obj, err);
  if (obj.ns.empty()) return Status::InvalidArgument("no Kubernetes namespace given");
  HttpClientResponse resp;
  Status st = Send(method, target, content_type, body, &resp, err);
  if (!st.ok()) return st;
  if (resp.status != 200 && resp.status != 201) return ErrorFor(obj, resp, err);
  auto j = nlohmann::json::parse(resp.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    SetErr(err, resp.status, "BadResponse");
    return Status::Internal("Kubernetes API " + server_ + " answered " + obj.verb + " " +
                            obj.Describe() + " with a body that is not a JSON object");
  }
  SetErr(err, resp.status, "");
  *out = std::move(j);
  return Status::Ok();
}

void KubeClient::Describe(const Object& obj, KubeCallError* err) {
  if (!err) return;
  err->verb = obj.verb;
  err->resource = obj.resource;
  err->group = obj.group;
  err->what = obj.Describe();
  err->api_message.clear();
}

Status KubeClient::CallText(const Object& obj, const std::string& target, std::string* out,
                            KubeCallError* err) {
  Describe(obj, err);
  if (obj.ns.empty()) return Status::InvalidArgument("no Kubernetes namespace given");
  HttpClientResponse resp;
  Status st = Send("GET", target, "", "", &resp, err);
  if (!st.ok()) return st;
  if (resp.status != 200) return ErrorFor(obj, resp, err);
  SetErr(err, resp.status, "");
  *out = std::move(resp.body);
  return Status::Ok();
}

Status KubeClient::GetPodLog(const std::string& ns, const std::string& pod,
                             const std::string& container, bool previous, int tail_lines,
                             int64_t limit_bytes, std::string* out, KubeCallError* err) {
  Object obj{"get", "pods/log", "", pod, ns};
  return CallText(
      obj,
      "/api/v1/namespaces/" + UrlEncode(ns) + "/pods/" + UrlEncode(pod) +
          "/log?container=" + UrlEncode(container) + "&previous=" + (previous ? "true" : "false") +
          "&tailLines=" + std::to_string(tail_lines) + "&limitBytes=" + std::to_string(limit_bytes),
      out, err);
}

Status KubeClient::ListEvents(const std::string& ns, const std::string& name, nlohmann::json* out,
                              KubeCallError* err) {
  Object obj{"list", "events", "", "", ns};
  return Call(obj, "GET",
              "/api/v1/namespaces/" + UrlEncode(ns) +
                  "/events?fieldSelector=" + UrlEncode("involvedObject.name=" + name),
              "", "", out, err);
}

Status KubeClient::GetDeployment(const std::string& ns, const std::string& name,
                                 nlohmann::json* out, KubeCallError* err) {
  Object obj{"get", "deployments", "apps", name, ns};
  return Call(obj, "GET",
              "/apis/apps/v1/namespaces/" + UrlEncode(ns) + "/deployments/" + UrlEncode(name), "",
              "", out, err);
}

Status KubeClient::PatchDeployment(const std::string& ns, const std::string& name,
                                   const nlohmann::json& patch, nlohmann::json* out,
                                   KubeCallError* err) {
  Object obj{"patch", "deployments", "apps", name, ns};
  return Call(obj, "PATCH",
              "/apis/apps/v1/namespaces/" + UrlEncode(ns) + "/deployments/" + UrlEncode(name),
              "application/strategic-merge-patch+json", DumpJson(patch), out, err);
}

Status KubeClient::ListPods(const std::string& ns, const std::string& selector, nlohmann::json* out,
                            KubeCallError* err) {
  Object obj{"list", "pods", "", "", ns};
  return Call(obj, "GET",
              "/api/v1/namespaces/" + UrlEncode(ns) + "/pods?labelSelector=" + UrlEncode(selector),
              "", "", out, err);
}

Status KubeClient::ListReplicaSets(const std::string& ns, const std::string& selector,
                                   nlohmann::json* out, KubeCallError* err) {
  Object obj{"list", "replicasets", "apps", "", ns};
  return Call(obj, "GET",
              "/apis/apps/v1/namespaces/" + UrlEncode(ns) +
                  "/replicasets?labelSelector=" + UrlEncode(selector),
              "", "", out, err);
}

Status KubeClient::ListEndpointSlices(const std::string& ns, const std::string& selector,
                                      nlohmann::json* out, KubeCallError* err) {
  Object obj{"list", "endpointslices", "discovery.k8s.io", "", ns};
  return Call(obj, "GET",
              "/apis/discovery.k8s.io/v1/namespaces/" + UrlEncode(ns) +
                  "/endpointslices?labelSelector=" + UrlEncode(selector),
              "", "", out, err);
}

Status KubeClient::WatchEndpointSlices(const std::string& ns, const std::string& selector,
                                       const std::string& resource_version, int timeout_seconds,
                                       std::string* out, KubeCallError* err) {
  Object obj{"watch", "endpointslices", "discovery.k8s.io", "", ns};
  return CallText(
      obj,
      "/apis/discovery.k8s.io/v1/namespaces/" + UrlEncode(ns) +
          "/endpointslices?labelSelector=" + UrlEncode(selector) +
          "&watch=true&allowWatchBookmarks=true&resourceVersion=" + UrlEncode(resource_version) +
          "&timeoutSeconds=" + std::to_string(timeout_seconds),
      out, err);
}

}  // namespace kiln
