// DomainEnv: what a domain's actors share — its config, directories, repository, builder and
// the blocking-work runner. Created once per domain before the actors start; immutable after
// that (the pointed-to services are themselves thread-safe). Owned by shared_ptr.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/blocking_work.h"
#include "actors/busy_branches.h"
#include "builder/builder.h"
#include "config/config.h"
#include "deploy/deployer.h"
#include "state/state_store.h"
#include "workspace/git_repo.h"

namespace kiln {

class BuildMetrics;
class DomainHistoryBudget;  // issue 19 (actors/build_history.h)
class StorageGate;          // issue 19 (storage/collector.h)
class StorageLeaseTable;    // issue 19 (storage/lease_table.h)
class StateWriter;

struct DomainEnv {
  std::shared_ptr<const Config> config;
  std::string domain;
  const DomainConfig* dc = nullptr;          // points into *config
  const RegistryConfig* registry = nullptr;  // points into *config
  std::string domain_dir;                    // <state_dir>/domains/<domain>
  std::string home_dir;                      // HOME for tools (no credentials)
  std::shared_ptr<GitRepo> repo;             // null in `kiln build --source` mode
  std::shared_ptr<Builder> builder;
  std::shared_ptr<BlockingWork> work;
  std::shared_ptr<BuildMetrics> metrics;  // may be null
  std::shared_ptr<BusyBranches> busy;     // may be null
  std::shared_ptr<Deployer> deployer;     // null: deploy.type "none"
  // The durable store (may be null: nothing persisted). Its build-key cache always; its
  // journal only when journaled() (not in `kiln build`, beside a serving kiln).
  std::shared_ptr<StateStore> store;
  std::shared_ptr<StateWriter> writer;        // set with a journaled store: its writes run here
  std::vector<std::string> known_candidates;  // candidates with a workspace (restored at start)
  size_t log_max_bytes = 4 << 20;
  size_t max_candidates = 256;
  size_t history_per_candidate = 50;
  // Issue 19: the domain's bound on in-memory build records, shared by its candidates (may be
  // null: history_per_candidate each).
  std::shared_ptr<DomainHistoryBudget> history;
  // --- issue 19: storage budget ---
  std::shared_ptr<StorageLeaseTable> storage_leases;  // may be null: nothing is collected
  std::shared_ptr<StorageGate> storage_gate;          // may be null: no budget refusals
  // --- end issue 19 ---

  /// The store when its journal is this process's (builds and deploys are recorded), else null.
  StateStore* journal() const { return store && store->journaled() ? store.get() : nullptr; }
  std::string CandidateDir(const std::string& c) const { return domain_dir + "/candidates/" + c; }
  std::string CacheDir() const { return domain_dir + "/cache"; }
};

}  // namespace kiln
