#include "app/composition.h"

#include <spdlog/spdlog.h>

#include "builder/buildah_builder.h"
#include "builder/layered_builder.h"
#include "builder/process_runner.h"
#include "deploy/local_deployer.h"
#include "k8s/kubernetes_deployer.h"
#include "pool/pool_builder.h"
#include "pool/pool_discovery.h"
#include "registry/registry_client.h"

namespace kiln {

namespace {

// The configured deploy target of a domain (null for "none").
std::shared_ptr<Deployer> MakeDeployer(const std::string& name, const DomainConfig& d,
                                       const RegistryConfig& reg, const std::string& domain_dir) {
  if (d.deploy.type == "kubernetes" && d.deploy.kubernetes)
    return std::make_shared<KubernetesDeployer>(*d.deploy.kubernetes);
  if (d.deploy.type == "local" && d.deploy.local)
    return std::make_shared<LocalDeployer>(name, *d.deploy.local,
                                           RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file},
                                           domain_dir + "/deploy");
  return nullptr;
}

// The same client the layered builder pushes with: one attempt, short timeouts.
Status PingRegistry(const RegistryConfig& reg) {
  RegistryClientOptions ro;
  ro.attempts = 1;
  ro.io_timeout = std::chrono::milliseconds(3000);
  RegistryClient client(RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file}, ro);
  return client.Ping();
}

}  // namespace

void ComposeRuntime(const std::shared_ptr<const Config>& config, RuntimeOptions* opts) {
  // Issue 20: with scheduler.workers or scheduler.worker_service, builds (both modes) run on
  // the pool's workers.
  const bool pool = !config->scheduler.workers.empty() || !config->scheduler.worker_service.empty();
  if (!opts->builder && pool) {
    PoolBuilderOptions po;
    po.workers = config->scheduler.workers;
    po.tls = {config->scheduler.worker_tls_certificate, config->scheduler.worker_tls_key,
              config->scheduler.worker_tls_ca};
    const ServerConfig server = config->server;
    po.git_url = [server](const std::string& domain) { return GitRemoteUrl(server, domain); };
    if (!config->server.state_dir.empty())
      po.journal_file = config->server.state_dir + "/pool-journal.jsonl";
    if (config->scheduler.worker_service.empty()) {
      opts->builder = std::make_shared<PoolBuilder>(std::move(po));
    } else {
      std::shared_ptr<PoolBuilder> discovered;
      std::shared_ptr<void> keep;
      Status st = StartServicePool(config->scheduler, std::move(po), &discovered, &keep);
      if (!st.ok()) {
        // Builds then fail as infrastructure ("no worker of the pool is reachable") until
        // the configuration is fixed; the reason is in the log at start.
        spdlog::error("pool: {}", st.message());
        PoolBuilderOptions none;
        discovered = std::make_shared<PoolBuilder>(std::move(none));
      }
      opts->builder = discovered;
      if (keep) opts->keep_alive.push_back(std::move(keep));
    }
    opts->layered = opts->builder;
    if (auto* pb = dynamic_cast<PoolBuilder*>(opts->builder.get())) {
      std::weak_ptr<Builder> weak = opts->builder;
      opts->builder_detail = [weak, pb] { return weak.lock() ? pb->Summary() : std::string(); };
    }
  }
  if (!opts->builder) {  // an injected builder (tests) serves both modes
    std::shared_ptr<ProcessRunner> runner = MakePosixProcessRunner();
    opts->keep_alive.push_back(runner);  // the builders hold it by pointer
    opts->builder = std::make_shared<BuildahBuilder>(runner.get(), "buildah", config);
    if (!opts->layered) opts->layered = std::make_shared<LayeredBuilder>(runner.get());
  }
  if (opts->deploy && !opts->make_deployer) opts->make_deployer = MakeDeployer;
  if (opts->readiness_checks && !opts->probe_registry) opts->probe_registry = PingRegistry;
}

}  // namespace kiln
