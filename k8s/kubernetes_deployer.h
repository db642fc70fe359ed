// KubernetesDeployer: the "kubernetes" deploy target. Deploy() patches one container of one
// Deployment to the built image (always by digest) and follows the rollout until it is
// complete, has failed, times out or is cancelled:
//   1. GET the Deployment; a container name it does not have is an error before any patch.
//   2. If that container already runs exactly req.image and the rollout is complete: rolled_out,
//      changed == false, no patch.
//   3. Strategic-merge-patch spec.template.spec.containers[{name, image}] and the pod-template
//      annotations kiln.dev/candidate, kiln.dev/commit, kiln.dev/build-id, kiln.dev/deploy-id;
//      409 Conflict is retried a few times.
//   4. Poll the Deployment, its ReplicaSets and pods (every poll_interval) and decide through
//      RolloutEvaluator (rollout.h); progress lines go to the callback when they change.
// Failure reasons are those of deployer.h: the rollout's ("ProgressDeadlineExceeded",
// "ImagePullBackOff", ...), the API's ("Unauthorized", "Forbidden", "NotFound", "Conflict",
// "Invalid", "Unavailable", "TLSError"), "ContainerNotFound", "Config", "Timeout", "Cancelled".
//
// Ownership: owns its KubeClient (built in the constructor); the progress callback and the
// cancel token are borrowed for the duration of one Deploy().
//
// Thread-safety: as deployer.h says — one Deploy() at a time per instance; Current() may run
// concurrently with Deploy() (the client is thread-safe; the rest is immutable after
// construction).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"
#include "deploy/deployer.h"
#include "k8s/kube_client.h"
#include "k8s/kube_config.h"
#include "k8s/rollout.h"

namespace kiln {

struct KubernetesDeployerOptions {
  std::chrono::milliseconds poll_interval{500};
  /// Overrides KubernetesDeploy::rollout_timeout_s when set (tests).
  std::optional<std::chrono::milliseconds> rollout_timeout;
  /// Where in-cluster settings come from when KubernetesDeploy::kubeconfig is null; default:
  /// the process environment and /var/run/secrets/kubernetes.io/serviceaccount.
  std::optional<InClusterSource> in_cluster;
  int conflict_attempts = 4;  // PATCH tries on 409 Conflict
  std::chrono::milliseconds conflict_backoff{100};
  KubeClientOptions client;
};

class KubernetesDeployer : public Deployer {
 public:
  /// Never fails: a configuration problem (unreadable kubeconfig, not in a cluster, bad CA) is
  /// reported by every Deploy() (reason "Config") and Current() (FailedPrecondition).
  explicit KubernetesDeployer(KubernetesDeploy cfg, KubernetesDeployerOptions opts = {});
  ~KubernetesDeployer() override;
  KubernetesDeployer(const KubernetesDeployer&) = delete;
  KubernetesDeployer& operator=(const KubernetesDeployer&) = delete;

  DeployResult Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                      const CancelToken* cancel) override;
  /// The configured container's image in the Deployment. NotFound when the Deployment or the
  /// container does not exist; PermissionDenied, Unavailable, FailedPrecondition otherwise.
  Status Current(std::string* image) override;

  /// The namespace in use (the configured one, else the kubeconfig's / service account's).
  const std::string& ns() const { return ns_; }

 private:
  DeployResult Fail(const std::string& reason, const std::string& message) const;
  // Fetches deployment + replicasets + pods and evaluates; false with *fail set on API errors.
  bool Observe(nlohmann::json* dep, RolloutDecision* decision, DeployResult* fail);
  // Waits up to `d` or until cancelled; true when cancelled.
  static bool SleepOrCancel(std::chrono::milliseconds d, const CancelToken* cancel);

  const KubernetesDeploy cfg_;
  const KubernetesDeployerOptions opts_;
  Status init_;
  std::string ns_;
  std::unique_ptr<KubeClient> client_;  // null when init_ is not ok
};

}  // namespace kiln
