// `kiln worker --config FILE` (issue 20): the same binary in the worker role. It publishes a
// remote_builder_actor (pool/remote_builder.h) over mutual TLS and runs the builders `kiln
// serve` uses (app/composition: buildah containerfile builds, layered builds) for the
// scheduler: per build it fetches the commit from the scheduler's git endpoint with its own
// read credential into the candidate's bare repository (incremental: only what it lacks),
// checks it out into the candidate's workspace, builds, and later pushes that image to the
// registry with its own registry credential, when the scheduler (holding the push-lane grant)
// asks. It advertises its slots and the candidates it holds warm (op "info").
//
// Config: a kiln config file with "server" (state_dir), "registries" (the worker's own
// credentials) and a "worker" block; no domains (requests carry the domain's build config,
// validated here with kiln's config parser). docs/architecture.md, "Worker pool".
//
// Thread-safety: WorkerCommand runs until SIGTERM/SIGINT. Builds and pushes run on two bounded
// thread pools (BlockingWork, `slots` threads each); the published actor never blocks. It
// admits `slots` more of each waiting (WorkerAdmission) and answers any request past that at
// once as busy (`busy: true`, resource exhausted), never queueing without bound. A request for
// a build id already running joins it; one that ended recently gets its answer again.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_parser.h"
#include "pool/remote_builder.h"
#include "pool/worker_retention.h"

namespace kiln {

struct WorkerSettings {
  std::string name;            // worker.name (default: the listen address)
  std::string listen_host;     // worker.listen "host:port"
  int listen_port = 0;         // 0: any free port (then port_file says which)
  int slots = 2;               // worker.slots 1..256: builds at once
  PoolTlsConfig tls;           // worker.tls.{certificate,key,scheduler_ca}
  std::string git_token_file;  // worker.git_token_file: read credential of the git endpoint
  std::string port_file;       // worker.port_file: the bound port is written here ("": none)
  std::string config_dir;      // relative paths of the config file resolve against it
  /// worker.max_candidates / worker.max_candidates_per_domain: candidates kept (repository,
  /// workspace, build storage); past them the least recently built go (WorkerRetention).
  RetentionLimits retention;
};

/// Reads and validates a worker config. Every problem is returned as `path: reason`;
/// `site` gets server/registries/log_level, `raw` the file's JSON (for request validation).
std::vector<ConfigProblem> LoadWorkerConfig(const std::string& path, WorkerSettings* w,
                                            Config* site, nlohmann::json* raw);

/// Runs the worker; returns the exit code (1: invalid config or cannot listen).
int WorkerCommand(const std::string& config_path);

}  // namespace kiln
