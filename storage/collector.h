// StorageCollector: the storage budget enforced (issue 19). One RunOnce scans the state
// directory (storage/inventory.h), plans with the pure policy (storage/gc_policy.h) and
// deletes what the plan says, re-checking each candidate's lease (storage/lease_table.h) right
// before it deletes, logs what it freed, refreshes the /metrics gauges and tells the
// StorageGate which domains stay over their budget (their next build fails with an
// `infrastructure` error naming the budget).
//
// Deletion: candidate storages and workspaces, layered outputs, build caches and local deploy
// blobs with common/safe_remove (no symlink followed; files the build user wrote included);
// a workspace loses its `checked-out` marker first (the next checkout is a full one) under its
// checkout.lock; build-key entries are unlinked. Git repositories and the journal are only
// counted: git runs `gc --auto` after pushes (transport/git_http.cc) and the journal compacts
// itself (state/state_store.h).
//
// Ownership: shares the lease table and gate (shared_ptr); owns its metrics.
// Thread-safety: RunOnce may be called from one thread at a time (the runtime's collector
// thread, or `kiln gc`); Gate()/Render are thread-safe. RunOnce blocks on file I/O: never call
// it from an actor.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"
#include "storage/gc_policy.h"
#include "storage/lease_table.h"

namespace kiln {

/// Domains over their storage budget -> the agent-facing reason. Thread-safe.
class StorageGate {
 public:
  void Set(std::map<std::string, std::string> refusals);
  /// "" when the domain may build. A refusal also asks for an early collection (the builds
  /// that held the space may have ended since the last one).
  std::string Refusal(const std::string& domain) const;
  /// True once after a refusal (the collector thread then collects again soon).
  bool TakeCollectionWanted() { return wanted_.exchange(false); }
  /// Issue 19, a strict budget: a build wrote its outputs; the collector runs within a couple
  /// of seconds instead of at its next interval, so the growth between two collections stays
  /// within the headroom (storage.headroom_pct).
  void BuildEnded() { ended_ = true; }
  bool TakeBuildEnded() { return ended_.exchange(false); }

 private:
  std::atomic<bool> ended_{false};
  mutable std::atomic<bool> wanted_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::string> refusals_;
};

struct GcRunReport {
  GcPlan plan;
  int64_t freed_bytes = 0;
  size_t deleted = 0;
  std::vector<std::string> skipped;              // "<id>: <why>" (became busy, removal failed)
  std::map<std::string, int64_t> bytes_by_kind;  // before the deletions, all domains
};

/// The policy's budgets from the config (GB are GiB).
GcBudgets BudgetsFromConfig(const Config& config);

class StorageCollector {
 public:
  /// `leases` and `gate` may be null (offline `kiln gc --dry-run`).
  StorageCollector(std::shared_ptr<const Config> config, std::string state_dir,
                   std::shared_ptr<StorageLeaseTable> leases, std::shared_ptr<StorageGate> gate);

  /// Scan, plan, delete (not when `dry_run`). `leases` come from the state (deployed and
  /// latest images, running builds as journaled); the lease table's busy candidates are added.
  GcRunReport RunOnce(GcLeases leases, bool dry_run, int64_t now_ms);

  /// kiln_storage_bytes{domain,kind}, kiln_storage_budget_bytes{domain},
  /// kiln_storage_collected_bytes_total{domain,kind}, kiln_storage_over_budget{domain}.
  /// Prometheus text format (common/metrics.h MetricsRegistry::Render).
  std::string RenderMetrics() const;

 private:
  bool Delete(const StorageItem& item, std::string* why);
  /// Issue 19: frees about `bytes` of the cache at `item` (its oldest regular files first;
  /// files modified in the last minute, symlinks and other file systems never). Freed bytes.
  int64_t Trim(const StorageItem& item, int64_t bytes, int64_t now_ms);
  void UpdateMetrics(const std::vector<StorageItem>& items, const GcRunReport& report);

  std::shared_ptr<const Config> config_;
  const std::string state_dir_;
  std::shared_ptr<StorageLeaseTable> leases_;
  std::shared_ptr<StorageGate> gate_;
  // The gauges and counters, in kiln's one metrics registry and renderer (thread-safe).
  MetricsRegistry metrics_;
  void SetMetric(const std::string& name, const std::string& domain, const std::string& kind,
                 double value, bool add = false);
};

}  // namespace kiln
