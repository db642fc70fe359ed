// Deployer: rolls one built image out to a domain's deploy target and reports how it went.
//
// Implementations: KubernetesDeployer (k8s/, patches a Deployment and follows the rollout),
// LocalDeployer (deploy/, runs the image as a supervised local process) and FakeDeployer (tests).
// One Deployer per domain. Deploy() blocks the calling thread: call it from a worker thread,
// never from an actor. The caller (the domain actor) runs at most one Deploy() per domain at a
// time and orders them; implementations need not be safe for concurrent Deploy() calls on one
// instance, but Current() may be called concurrently with Deploy().
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/cancel_token.h"

namespace kiln {

struct DeployRequest {
  std::string deploy_id;  // kiln's id for this deploy: "d-<16 hex>" (random 64 bits)
  std::string domain;
  std::string candidate;
  std::string build_id;
  std::string commit;  // git commit the image was built from ("" when unknown)
  std::string image;   // "<host:port>/<repository>@sha256:<hex>": always by digest
  std::string digest;  // "sha256:<hex>"
};

enum class DeployState { kInProgress, kRolledOut, kFailed };
/// Wire names: in_progress, rolled_out, failed.
const char* DeployStateName(DeployState s);

// --- Issue 16: classified deploy failures (filled by KubernetesDeployer) ---
/// What the deploy target saw of the failing container; empty/unset fields are unknown.
struct DeployFailureDetails {
  std::string pod;        // the new pod the failure was seen on
  std::string container;  // the deployed container
  /// The container's termination reason ("OOMKilled", "Error", "Completed") or waiting reason
  /// ("CrashLoopBackOff", "ImagePullBackOff", "Unschedulable", ...).
  std::string reason;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<int> restarts;  // restartCount
  std::string memory_limit;     // the container's resources.limits.memory ("256Mi"), if any
  /// The last lines of the crashed container's (previous) log: valid UTF-8, bounded (at most
  /// 40 lines of at most 512 bytes each).
  std::vector<std::string> log_tail;
  std::string probe_message;          // "Readiness probe failed: ..." from the pod's Events
  std::optional<int64_t> unready_ms;  // how long the pod has been running but not ready
};
// --- end Issue 16 ---

struct DeployResult {
  // Issue 16: constructors so that `DeployResult{state, reason, message, changed, elapsed_ms}`
  // stays warning-free (-Wmissing-field-initializers) with the fields added below.
  DeployResult() = default;
  DeployResult(DeployState s, std::string why, std::string text, bool was_changed = false,
               int64_t elapsed = 0)
      : state(s),
        reason(std::move(why)),
        message(std::move(text)),
        changed(was_changed),
        elapsed_ms(elapsed) {}
  DeployState state = DeployState::kFailed;
  /// Short machine-readable reason when failed: "ProgressDeadlineExceeded", "ImagePullBackOff",
  /// "ErrImagePull", "CrashLoopBackOff", "Unauthorized", "Forbidden", "NotFound", "Conflict",
  /// "Invalid", "Timeout", "Cancelled", "Unavailable", "HealthCheckFailed", "StartFailed", ...
  std::string reason;
  /// Human-readable detail (the pod's message, the process's last output, the object and the
  /// missing permission). Never contains a credential.
  std::string message;
  /// True when the target was changed (a patch was sent / a process was started). A deploy of
  /// an image that is already rolled out reports rolled_out with changed == false.
  bool changed = false;
  int64_t elapsed_ms = 0;
  // --- Issue 16: classified deploy failures ---
  /// When failed: "deploy_crash", "deploy_unready", "deploy_image", "deploy_unschedulable",
  /// "deploy_timeout", "infrastructure" (not the agent's code), "superseded", "cancelled";
  /// "" when not classified (other deployers) or not failed. `message` is then one sentence
  /// naming the cause in the agent's terms (never a host path, API URL or credential).
  std::string error_kind;
  /// When failed and classified: one sentence saying what to do next.
  std::string next_step;
  DeployFailureDetails details;
  // --- end Issue 16 ---
};

// --- Issue 16 ---
/// The classified-failure fields of a failed result, for tool results: {"error", "error_kind",
/// "next_step", "details": {...}} (details holds only the known fields: pod, container, reason,
/// exit_code, signal, restarts, memory_limit, log_tail, probe_message, unready_ms). Empty object
/// when the result is not failed or not classified (error_kind "").
nlohmann::json DeployFailureJson(const DeployResult& r);
// --- end Issue 16 ---

/// Progress lines while a rollout runs ("2/3 replicas updated", "waiting for /healthz").
using DeployProgressFn = std::function<void(const std::string& line)>;

class Deployer {
 public:
  virtual ~Deployer() = default;
  /// Rolls req.image out and waits until it is rolled out, has failed, or `cancel` fires
  /// (reason "Cancelled"). Times out by the target's own configured timeout (reason "Timeout").
  virtual DeployResult Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                              const CancelToken* cancel) = 0;
  /// The image the target runs now ("" when nothing), e.g. the Deployment's container image.
  /// Used to make deploys idempotent. Errors: Unavailable, PermissionDenied, NotFound, ...
  virtual Status Current(std::string* image) = 0;
  /// Stops whatever the deployer supervises (local processes); no-op for remote targets.
  virtual void Shutdown() {}
};

}  // namespace kiln
