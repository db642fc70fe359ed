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
// Issue 16 (failures say why): every failure is classified (DeployResult::error_kind,
// next_step, details; see RolloutEvaluator::Describe*): a crash (CrashLoopBackOff, a terminated
// or OOM-killed container) fails at once with the exit code, reason, restarts and the last 20
// lines of the container's previous log (pods/log); an image pull failure at once; a pod that
// runs but stays unready, or stays unschedulable, fails after unready_timeout_s (or at the
// rollout deadline, whichever is first) with the readiness probe's message from the pod's
// Events. While failing signs show, polls run every failing_poll_interval. API failures are
// "infrastructure": the agent's message never carries the API server's URL, the kubeconfig
// path or a credential (the full error goes to kiln's log).
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
  // --- Issue 16 ---
  /// Poll interval while a new pod shows failing signs (restarts, errors, unready).
  std::chrono::milliseconds failing_poll_interval{250};
  /// Overrides KubernetesDeploy::unready_timeout_s when set (tests).
  std::optional<std::chrono::milliseconds> unready_timeout;
  int log_tail_lines = 40;          // lines of the crashed container's log (issue 16: ~40)
  int64_t log_limit_bytes = 32768;  // bytes of log asked for (limitBytes)
  // --- end Issue 16 ---
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
  // --- Issue 16 ---
  // A classified failure from a RolloutFailure; scrubbed of the server and kubeconfig.
  DeployResult Classified(RolloutFailure f) const;
  // An API error: full wording to kiln's log, the agent's wording from err.
  DeployResult ApiFailure(const KubeCallError& err, const Status& st, const char* during) const;
  // The classified failure for fatal or pending signs (reads the crashed container's log or
  // the pod's Events).
  DeployResult DescribeSigns(const PodSigns& s, int64_t pending_ms);
  // Removes the API server's URL/host and the kubeconfig path from agent-visible text.
  std::string Redact(std::string s) const;
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
