// KubeClient: the few Kubernetes API calls kiln's deploy target needs, over HTTPS
// (net/http_client.h) with a bearer token (TokenSource) and/or a client certificate:
//   GET   /apis/apps/v1/namespaces/{ns}/deployments/{name}
//   PATCH /apis/apps/v1/namespaces/{ns}/deployments/{name}  (strategic merge patch)
//   GET   /api/v1/namespaces/{ns}/pods?labelSelector=...
//   GET   /apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=...
//   GET   /api/v1/namespaces/{ns}/pods/{pod}/log?container=&previous=&tailLines=&limitBytes=
//   GET   /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name=<pod>
//   GET   /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=...[&watch=true]
// The Status messages name the API server and the kubeconfig: they are for kiln's log and the
// operator. What the agent sees is built from KubeCallError (reason, status, the object) by
// RolloutEvaluator::DescribeApiError, never from these messages.
// Error answers become clear Status errors that name the object (and, for 403, the missing
// RBAC permission) and quote the message of the API's Status object. 5xx, 429 and connection
// errors are retried with exponential backoff and jitter; after a 401 a file-backed token is
// re-read and the call retried once. Tokens and keys never appear in a Status or a log line.
//
// Ownership: Create() hands out the client (unique_ptr); it owns its origin and options, and
// shares the TLS context and the TokenSource of the KubeConfig it was built from.
//
// Thread-safety: thread-safe; calls may run concurrently on many threads. Each call opens its own
// connection; the shared state (TLS context, token source) is immutable or internally locked.
// Calls block the calling thread (each I/O step has a timeout). Issue 19: while a
// KubeCallDeadline lives on the calling thread, no call on that thread outlasts it: each I/O step
// waits at most until the deadline, no retry starts after it, and a call that reaches it fails
// Unavailable (err->reason "Unavailable") — a stalled API server cannot hold a deploy beyond its
// rollout timeout.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "k8s/kube_config.h"
#include "net/http_client.h"

namespace kiln {

struct KubeClientOptions {
  int attempts = 4;                             // tries per call on 5xx/429/connection errors
  std::chrono::milliseconds backoff_base{200};  // doubled each retry, plus jitter
  std::chrono::milliseconds io_timeout{10000};  // per connect/handshake/write/read
  size_t max_body_bytes = 16 << 20;             // largest response accepted
};

/// What the last failed call saw; `http_status` is 0 for connection/TLS failures.
struct KubeCallError {
  int http_status = 0;
  /// The Kubernetes Status reason ("Unauthorized", "Forbidden", "NotFound", "Conflict",
  /// "Invalid", ...) or kiln's: "Unavailable" (unreachable, 5xx), "TLSError", "BadResponse".
  std::string reason;
  // --- Issue 16: what the call was about, for agent-facing wording without the server ---
  std::string verb;         // "get", "list", "patch"
  std::string resource;     // "deployments", "pods", "pods/log", "events"
  std::string group;        // "apps" or "" (core)
  std::string what;         // 'deployments.apps "web" in namespace "loop"'
  std::string api_message;  // the API's Status message ("" when none)
};

/// Issue 19: bounds every KubeClient call made on the constructing thread until destroyed (the
/// deploy's deadline). Scopes nest; the innermost counts. Thread-safety: thread-local state only;
/// create and destroy on the same thread.
class KubeCallDeadline {
 public:
  explicit KubeCallDeadline(std::chrono::steady_clock::time_point deadline);
  ~KubeCallDeadline();
  KubeCallDeadline(const KubeCallDeadline&) = delete;
  KubeCallDeadline& operator=(const KubeCallDeadline&) = delete;
  /// The calling thread's innermost deadline, if any.
  static std::optional<std::chrono::steady_clock::time_point> Current();

 private:
  std::optional<std::chrono::steady_clock::time_point> previous_;
};

class KubeClient {
 public:
  /// Builds the TLS context from cfg. FailedPrecondition when the server URL, CA, client
  /// certificate or key is unusable ("Kubernetes API <server>: cannot load CA file ...").
  static Status Create(const KubeConfig& cfg, KubeClientOptions opts,
                       std::unique_ptr<KubeClient>* out);
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  /// The Deployment object. NotFound 'deployment "web" not found in namespace "loop" ...';
  /// PermissionDenied for 401/403; Unavailable when unreachable; FailedPrecondition for TLS.
  Status GetDeployment(const std::string& ns, const std::string& name, nlohmann::json* out,
                       KubeCallError* err = nullptr);
  /// Strategic-merge-patches the Deployment; *out gets the patched object. Errors as
  /// GetDeployment, plus FailedPrecondition on 409 Conflict (err->reason "Conflict") and
  /// InvalidArgument on 422 Invalid.
  Status PatchDeployment(const std::string& ns, const std::string& name,
                         const nlohmann::json& patch, nlohmann::json* out,
                         KubeCallError* err = nullptr);
  /// PodList / ReplicaSetList matching the label selector ("app=web,tier=x"). Errors as above.
  Status ListPods(const std::string& ns, const std::string& selector, nlohmann::json* out,
                  KubeCallError* err = nullptr);
  Status ListReplicaSets(const std::string& ns, const std::string& selector, nlohmann::json* out,
                         KubeCallError* err = nullptr);
  // --- Issue 16 ---
  /// The last `tail_lines` lines (at most `limit_bytes`) of a container's log, the previous
  /// instance's when `previous`. The API answers 400 BadRequest (err->reason "BadRequest")
  /// when there is no previous instance, 404 for an unknown pod.
  Status GetPodLog(const std::string& ns, const std::string& pod, const std::string& container,
                   bool previous, int tail_lines, int64_t limit_bytes, std::string* out,
                   KubeCallError* err = nullptr);
  /// EventList (core/v1) of the object named `name` (fieldSelector involvedObject.name).
  Status ListEvents(const std::string& ns, const std::string& name, nlohmann::json* out,
                    KubeCallError* err = nullptr);

  // --- Issue 20: worker discovery ---
  /// EndpointSliceList (discovery.k8s.io/v1) matching the label selector. Errors as ListPods.
  Status ListEndpointSlices(const std::string& ns, const std::string& selector, nlohmann::json* out,
                            KubeCallError* err = nullptr);
  /// A bounded watch of the EndpointSlices after `resource_version`, with bookmarks: *out gets
  /// the raw stream (one JSON watch event per line) the API server sent until it closed the
  /// watch after `timeout_seconds` (keep it below KubeClientOptions::io_timeout). A 410 comes
  /// either as an ERROR event in the stream or as err->http_status 410.
  Status WatchEndpointSlices(const std::string& ns, const std::string& selector,
                             const std::string& resource_version, int timeout_seconds,
                             std::string* out, KubeCallError* err = nullptr);

  /// "https://host:port" of the API server.
  const std::string& server() const { return server_; }

 private:
  // What a call is about, for messages: verb "get", resource "deployments", group "apps",
  // name "web" ("" for lists), namespace.
  struct Object {
    std::string verb, resource, group, name, ns;
    std::string Describe() const;  // 'deployments.apps "web" in namespace "loop"'
  };
  KubeClient(std::string server, HttpOrigin origin, std::shared_ptr<const TlsContext> tls,
             std::shared_ptr<TokenSource> token, KubeClientOptions opts, std::string source);

  Status Call(const Object& obj, const std::string& method, const std::string& target,
              const std::string& content_type, const std::string& body, nlohmann::json* out,
              KubeCallError* err);
  // Call() for a text answer (pods/log).
  Status CallText(const Object& obj, const std::string& target, std::string* out,
                  KubeCallError* err);
  static void Describe(const Object& obj, KubeCallError* err);
  Status Send(const std::string& method, const std::string& target, const std::string& content_type,
              const std::string& body, HttpClientResponse* resp, KubeCallError* err);
  Status ErrorFor(const Object& obj, const HttpClientResponse& resp, KubeCallError* err) const;

  const std::string server_;
  const HttpOrigin origin_;
  const std::shared_ptr<const TlsContext> tls_;
  const std::shared_ptr<TokenSource> token_;  // may be null (client certificate only)
  const KubeClientOptions opts_;
  const std::string source_;  // where the config came from, for 401 hints
};

}  // namespace kiln
