// Runtime: kiln's core assembled — the CAF actor system, the scheduler actor, one domain actor
// per configured domain, the MCP transport actor, the builder and the blocking-work threads —
// exposed to the transport as a ToolBackend and to the CLI as blocking calls. Which builder
// and deployer implementations exist is decided by the composition root (app/composition.h);
// the Runtime sees only the Builder and Deployer interfaces.
//
// Thread-safety: all public methods may be called from any thread. Create, then use, then
// Shutdown before destruction.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/on_push_policy.h"
#include "builder/builder.h"
#include "common/status.h"
#include "config/config.h"
#include "core/build_types.h"
#include "core/tool_backend.h"
#include "deploy/deployer.h"
#include "transport/mcp_session_host.h"

namespace kiln {

struct RuntimeOptions {
  using DeployerFactory = std::function<std::shared_ptr<Deployer>(
      const std::string& domain, const DomainConfig&, const RegistryConfig&,
      const std::string& domain_dir)>;

  size_t worker_threads = 2;         // scheduler.max-threads of the actor system
  std::shared_ptr<Builder> builder;  // containerfile mode (required)
  std::shared_ptr<Builder> layered;  // layered mode (null: `builder`)
  /// The deploy target of a domain (null result: none). Unset: no domain has a deployer.
  DeployerFactory make_deployer;
  /// Readiness probe of a registry for /readyz (unset: registries are not probed).
  std::function<Status(const RegistryConfig&)> probe_registry;
  /// The /readyz detail of a builder check that passed (unset: "buildah works"); the worker
  /// pool's says which workers are connected and why the others are not (issue 20).
  std::function<std::string()> builder_detail;
  /// What the parts above need alive while the Runtime lives (the builders' process runner).
  std::vector<std::shared_ptr<void>> keep_alive;
  bool open_repositories = true;  // false for `kiln build --source` (no git)
  bool readiness_checks = true;   // background builder/registry checks for /readyz
  bool deploy = true;             // false: no deployers (`kiln build`)
  bool persist = true;            // false: no state journal (`kiln build`)
  /// Overrides the deployer of a domain (tests); domains not listed get the configured one.
  std::map<std::string, std::shared_ptr<Deployer>> deployers;
};

class Runtime : public ToolBackend {
 public:
  /// Creates state directories and domain repositories, starts the actors. Returns the first
  /// error (state_dir not writable, repository creation failed).
  static Status Create(std::shared_ptr<const Config> config, RuntimeOptions opts,
                       std::unique_ptr<Runtime>* out);
  ~Runtime() override;

  // ToolBackend
  uint64_t Call(ToolCall call, ProgressFn progress, DoneFn done) override;
  void Cancel(uint64_t handle) override;
  void Disconnected(uint64_t handle) override;

  /// Issue 17: hands the MCP session table (made from `options`) to the MCP transport actor
  /// and returns the HTTP layer's view of it (HttpServerOptions::session_host). Blocks until
  /// the actor took it (at most kQuickReply); null when it did not.
  std::shared_ptr<McpSessionHost> ServeMcpSessions(McpOptions options);
  nlohmann::json Readiness() override;
  std::string MetricsText() override;

  /// Runs one build through the scheduler and waits for its result (the CLI's `kiln build`).
  ToolResult BuildAndWait(const std::string& domain, const BuildRequest& req);

  /// Cancels every queued and running build (their callers get `cancelled`). Non-blocking.
  void CancelAll();

  /// Branches of `domain` with a build in progress (thread-safe, non-blocking).
  std::set<std::string> BusyBranches(const std::string& domain) const;
  /// The git endpoint accepted a push to `domain` (thread-safe, non-blocking).
  void Pushed(const std::string& domain);
  /// Issue 18: a push to `domain` updated `refs` (in the push's order): the domain starts the
  /// builds of its candidates' branches when build.on_push is on (thread-safe, non-blocking).
  void PushedRefs(const std::string& domain, std::vector<PushedRef> refs);

  /// Issue 19: runs one storage collection now (as the background collector does every
  /// storage.gc_interval_s) and returns the bytes freed. Blocks on file I/O: never call it from
  /// an actor. 0 when not persisting (`kiln build`).
  int64_t CollectStorageNow();

  /// Graceful stop: waits up to `grace` for running and queued builds to finish, then cancels
  /// what is left (logging which), and waits for every builder process to be gone.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
