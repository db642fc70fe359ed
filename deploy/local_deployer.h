// LocalDeployer: the local deploy target (`deploy.type: "local"`). Runs the domain's image as a
// sandboxed process on this machine and serves it on 127.0.0.1:<port> of the host:
//   1. fetches the manifest (OCI or docker v2; an index -> linux/amd64), the config and the
//      layers from the domain's registry with kiln's credential (layers are cached by digest
//      under <work_dir>/blobs), and extracts them into a fresh <work_dir>/rootfs/<n>-<digest>
//      (deploy/rootfs_extractor.h: hostile entries cannot leave the root);
//   2. runs Entrypoint + Cmd with the image's Env, PORT=<port> and WorkingDir under bubblewrap
//      (deploy/launch_spec.h): the root as "/", its own PID/IPC/UTS/user/network namespaces
//      (loopback only), no capabilities; nothing of the host is visible;
//   3. health checks the new candidate inside its network namespace (HTTP GET health_path
//      until 200) until start_timeout, then points the host port's TCP forwarder
//      (deploy/tcp_forwarder.h) at it and only then stops the previous candidate (after its open
//      connections drained, at most `drain`; SIGTERM, then SIGKILL after stop_grace; every
//      process of it gone) and removes its root.
// A failed deploy (ImageFetchFailed, StartFailed, HealthCheckFailed, Cancelled, Unavailable for
// the host port) leaves the previous candidate serving untouched; the message carries the
// process's last output (bounded by output_tail_bytes) and never a credential.
//
// Ownership: owns the forwarder, every candidate process, its threads and <work_dir> (private
// to this deployer: it is cleared of old roots at construction). The destructor calls
// Shutdown(). Thread-safety: as the Deployer contract — one Deploy() at a time per instance
// (the domain actor orders them); Current() and Shutdown() may be called from any thread
// concurrently with Deploy() (Shutdown() makes a running Deploy() fail with "Cancelled" and
// waits for it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "deploy/deployer.h"
#include "registry/registry_client.h"

namespace kiln {

class NetnsDialer;
class SandboxProcess;
class TaskThread;
class TcpForwarder;

struct LocalDeployerOptions {
  /// From the start of the process until the first 200 on health_path.
  std::chrono::milliseconds start_timeout{30000};
  /// Issue 19: the image fetch (manifest, config, layers) ends by this bound; a registry that
  /// stalls fails the deploy (ImageFetchFailed, infrastructure) instead of holding it.
  std::chrono::milliseconds fetch_timeout{300000};
  /// After the switch, how long the previous candidate may finish the connections it is
  /// serving before it is stopped (it stops as soon as they are closed).
  std::chrono::milliseconds drain{2000};
  /// SIGTERM -> SIGKILL delay when a candidate is stopped.
  std::chrono::milliseconds stop_grace{5000};
  /// Delay between health probes (and process checks).
  std::chrono::milliseconds poll_interval{100};
  /// Last bytes of stdout+stderr kept per candidate and quoted in failures.
  size_t output_tail_bytes = 4096;
  RegistryClientOptions registry;
};

class LocalDeployer : public Deployer {
 public:
  /// Never fails; problems (a bad work_dir, an unbindable port, an unreachable registry) are
  /// reported by the first Deploy(). `registry` must be the domain's registry (the host of
  /// every image this deployer is asked to run).
  LocalDeployer(std::string domain, LocalDeploy config, RegistryEndpoint registry,
                std::string work_dir, LocalDeployerOptions opts = {});
  ~LocalDeployer() override;
  LocalDeployer(const LocalDeployer&) = delete;
  LocalDeployer& operator=(const LocalDeployer&) = delete;

  /// See the file comment. Failure reasons: "Invalid" (bad image reference), "Unavailable"
  /// (host port not bindable, deployer shut down), "ImageFetchFailed" (registry, manifest,
  /// layers, extraction), "StartFailed" (bad image config, sandbox failed, process exited before
  /// it was healthy), "HealthCheckFailed" (no 200 within start_timeout), "Cancelled".
  DeployResult Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                      const CancelToken* cancel) override;
  /// The image serving now ("" when none). Never fails.
  Status Current(std::string* image) override;
  /// Stops the forwarder and every candidate process. Idempotent.
  void Shutdown() override;

  /// pid of the serving candidate's sandbox init (0 when none); for tests and status.
  int serving_pid() const;
  int port() const { return config_.port; }

 private:
  struct Candidate;
  struct Fetched;

  DeployResult DeployLocked(const DeployRequest& req, const DeployProgressFn& progress,
                            const CancelToken* cancel);
  Status FetchImage(const std::string& repo, const std::string& digest,
                    const DeployProgressFn& progress, const CancelToken* cancel, Fetched* out);
  Status FetchBlob(const std::string& repo, const std::string& digest, std::string* data);
  // Starts `cand` and waits until it is healthy; fills reason/message on failure.
  bool StartAndCheck(Candidate* cand, const std::vector<std::string>& argv,
                     const DeployProgressFn& progress, const CancelToken* cancel,
                     DeployResult* result);
  void StopCandidate(std::unique_ptr<Candidate> cand);
  // Waits (at most opts_.drain) until no relayed connection uses `cand`.
  void Drain(const Candidate& cand);
  /// Names this deployer's staged sandbox roots (<stage dir>/<tag>-<n>-<digest>): a hash of
  /// the work directory.
  std::string SandboxTag() const;
  bool Interrupted(const CancelToken* cancel) const;

  const std::string domain_;
  const LocalDeploy config_;
  const std::string work_dir_;
  const LocalDeployerOptions opts_;
  std::unique_ptr<RegistryClient> registry_;
  std::unique_ptr<TcpForwarder> forwarder_;
  std::unique_ptr<TaskThread> launcher_;  // forks sandboxes (must outlive them)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Candidate> current_;  // guarded by mu_
  bool deploying_ = false;              // guarded by mu_
  bool shutdown_ = false;               // guarded by mu_
  uint64_t seq_ = 0;                    // guarded by mu_; names root directories
};

}  // namespace kiln
