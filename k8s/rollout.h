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
// The new ReplicaSet is the one owned by the Deployment whose deployment.kubernetes.io/revision
// annotation equals the Deployment's, or else whose pod template equals the Deployment's (the
// pod-template-hash label aside).
//
// Ownership: the inputs are borrowed for the call only; the decision is a plain value.
//
// Thread-safety: stateless; RolloutEvaluator::Evaluate may run on any number of threads at once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

enum class RolloutPhase { kInProgress, kComplete, kFailed };

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
};

class RolloutEvaluator {
 public:
  /// `deployment`: a Deployment object. `replicasets`: a ReplicaSetList (or an array of
  /// ReplicaSets). `pods`: a PodList (or an array of Pods). Missing or malformed fields count
  /// as absent (zero replicas, no conditions); never throws, never fails.
  static RolloutDecision Evaluate(const nlohmann::json& deployment,
                                  const nlohmann::json& replicasets, const nlohmann::json& pods);

  /// True for the container waiting reasons that fail a rollout at once.
  static bool IsFatalWaitingReason(const std::string& reason);
};

}  // namespace kiln
