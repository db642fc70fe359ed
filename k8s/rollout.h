// Rollout evaluation: decides, from the Deployment, its ReplicaSets and its pods as the API
// returns them (JSON), whether a rollout is still in progress, complete or has failed. Pure: no
// I/O, no clock; the same inputs give the same decision.
//
// Complete: status.observedGeneration >= metadata.generation, and updatedReplicas ==
// readyReplicas == availableReplicas == spec.replicas (default 1), and status.replicas ==
// updatedReplicas (no old replicas left).
// Failed (only once the controller has observed the current generation):
//   - the Progressing condition has reason ProgressDeadlineExceeded;
//   - a pod of the new ReplicaSet (matched by its pod-template-hash label or owner reference)
//     has a container (or init container) waiting with ImagePullBackOff, ErrImagePull,
//     CrashLoopBackOff, InvalidImageName or CreateContainerConfigError: that reason and the
//     pod's message.
// Otherwise in progress, with a progress line ("2 of 3 updated replicas are available").
//
// Issue 16 (failures say why): the decision also carries `signs`, the worst thing the new
// ReplicaSet's pods show for the deployed container (Evaluate's `container`; every container
// when ""), and init containers:
//   kCrash (fails at once): waiting CrashLoopBackOff / CreateContainerError / RunContainerError;
//     state.terminated (a Deployment's pods restart always, so any exit is a crash; init
//     containers only with a nonzero exit code); lastState.terminated with reason OOMKilled or
//     with restartCount >= 2. Exit code, signal, reason (OOMKilled named), restarts and the
//     container's memory limit from the pod spec.
//   kImage (fails at once): ImagePullBackOff, ErrImagePull, InvalidImageName, ErrImageNeverPull.
//   kConfig (fails at once, "infrastructure"): CreateContainerConfigError (a missing Secret or
//     ConfigMap: the operator's side).
//   kUnready (pending): running but not ready. kUnschedulable (pending): PodScheduled False with
//     reason Unschedulable. The deployer fails these after deploy.kubernetes.unready_timeout_s
//     (or at the rollout deadline) — evaluation has no clock.
// `failing` is true while an error sign (a restart, an error waiting reason, unschedulable) is
// visible: the deployer polls faster.
// The Describe*() functions turn signs (plus a log text / Events) into the classified failure
// the agent sees: one-sentence message, error_kind, next_step and details; every text that came
// from the cluster is scrubbed of credentials (ScrubClusterText).
//
// The new ReplicaSet is the one owned by the Deployment whose deployment.kubernetes.io/revision
// annotation equals the Deployment's, or else whose pod template equals the Deployment's (the
// pod-template-hash label aside).
//
// Ownership: the inputs are borrowed for the call only; the decision is a plain value.
//
// Thread-safety: stateless; RolloutEvaluator::Evaluate may run on any number of threads at once.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "deploy/deployer.h"

namespace kiln {

enum class RolloutPhase { kInProgress, kComplete, kFailed };

// --- Issue 16: what the new pods show ---
enum class PodSignKind { kNone, kCrash, kImage, kConfig, kUnready, kUnschedulable };

struct PodSigns {
  PodSignKind kind = PodSignKind::kNone;
  std::string pod, container, pod_ip;
  /// Termination reason ("OOMKilled", "Error"), else the waiting reason ("CrashLoopBackOff",
  /// "ImagePullBackOff"), "Unschedulable", or "NotReady".
  std::string reason;
  std::string waiting_reason;      // the container's current waiting reason, if any
  std::string message;             // waiting / termination / PodScheduled message (raw)
  std::string terminated_message;  // the termination's own message (e.g. a StartError's)
  std::optional<int> exit_code, signal;
  int restarts = 0;
  /// A previous instance of the container exists (lastState.terminated or restartCount > 0):
  /// its log is read with previous=true.
  bool previous = false;
  std::string memory_limit;  // resources.limits.memory of the container in the pod spec
};

struct RolloutDecision {
  RolloutPhase phase = RolloutPhase::kInProgress;
  /// kFailed: "ProgressDeadlineExceeded", "ImagePullBackOff", ... ; "" otherwise.
  std::string reason;
  /// kFailed: the pod's or condition's message, naming the pod/ReplicaSet. kComplete: a summary.
  std::string message;
  /// kInProgress: one line for the progress callback. kComplete: "3 of 3 replicas available".
  std::string progress;
  /// The new ReplicaSet's name ("" when not known yet).
  std::string new_replicaset;
  // --- Issue 16 ---
  /// The worst sign among the new pods (kFailed for kCrash/kImage/kConfig; else pending).
  PodSigns signs;
  /// Some new pod shows a failing sign (waiting with an error, a termination or restart,
  /// unschedulable; not mere unreadiness): poll fast.
  bool failing = false;
};

/// A classified failure, ready for DeployResult (reason, message, error_kind, next_step,
/// details).
struct RolloutFailure {
  std::string reason;
  std::string error_kind;
  std::string message;
  std::string next_step;
  DeployFailureDetails details;
};

class RolloutEvaluator {
 public:
  /// `deployment`: a Deployment object. `replicasets`: a ReplicaSetList (or an array of
  /// ReplicaSets). `pods`: a PodList (or an array of Pods). Missing or malformed fields count
  /// as absent (zero replicas, no conditions); never throws, never fails.
  static RolloutDecision Evaluate(const nlohmann::json& deployment,
                                  const nlohmann::json& replicasets, const nlohmann::json& pods,
                                  const std::string& container = "");

  /// True for the container waiting reasons that fail a rollout at once.
  static bool IsFatalWaitingReason(const std::string& reason);

  // --- Issue 16: classified failures. `what` names the target: 'deployment "web"'. ---
  /// kCrash: exit code, reason (OOMKilled with the memory limit), restarts and the tail of
  /// `log_text` (the container's previous log; "" when unavailable).
  static RolloutFailure DescribeCrash(const PodSigns& s, const std::string& what,
                                      const std::string& log_text);
  /// kImage: the waiting message, scrubbed.
  static RolloutFailure DescribeImage(const PodSigns& s, const std::string& what);
  /// kConfig: CreateContainerConfigError (infrastructure).
  static RolloutFailure DescribeConfig(const PodSigns& s, const std::string& what);
  /// kUnready: the newest "Readiness probe failed: ..." of `events` (an EventList of the pod,
  /// core/v1 or events.k8s.io/v1) and how long the pod has been unready.
  static RolloutFailure DescribeUnready(const PodSigns& s, const std::string& what,
                                        const nlohmann::json& events, int64_t unready_ms);
  /// kUnschedulable: the scheduler's message.
  static RolloutFailure DescribeUnschedulable(const PodSigns& s, const std::string& what,
                                              int64_t pending_ms);
  /// The Kubernetes API failed (KubeCallError reason / http status; reason "Config" for an
  /// unusable kiln configuration): "not your code" wording, never a URL, host path or
  /// credential. `what`: 'deployments.apps "web" in namespace "loop"'; `api_message`: the API's
  /// Status message (quoted, scrubbed, for 409 and 422 only).
  static RolloutFailure DescribeApiError(const std::string& reason, int http_status,
                                         const std::string& verb, const std::string& what,
                                         const std::string& resource, const std::string& group,
                                         const std::string& api_message);

  /// The newest readiness-probe failure message among `events` for `pod` ("" when none).
  static std::string ProbeFailure(const nlohmann::json& events, const std::string& pod);
  /// The last `max_lines` lines of a container log: valid UTF-8 (invalid bytes become U+FFFD),
  /// control characters other than tab removed (ANSI colour sequences dropped), each line at
  /// most `max_line_bytes` (cut at a character boundary, "..." appended).
  static std::vector<std::string> LogTail(const std::string& text, size_t max_lines = 40,
                                          size_t max_line_bytes = 512);
  /// Removes credentials from a message that came from the cluster: URL user-info and query
  /// strings, "Bearer"/"Basic" values, token=/password=/secret=/signature= values; replaces
  /// `pod_ip` (when given) by "<pod IP>"; valid UTF-8, at most 1000 bytes.
  static std::string ScrubClusterText(const std::string& text, const std::string& pod_ip = "");
};

}  // namespace kiln
