// GcPolicy: what kiln's storage collector deletes, as a pure function (issue 19).
//
// Inputs: an inventory of what exists on disk (one StorageItem per collectable unit: a
// candidate's buildah storage, a workspace, a build-key cache entry, a layered output, a local
// deploy blob or rootfs, plus non-collectable units such as git repositories and the journal
// that only count against the budget), what is in use (GcLeases: running builds, deploys in
// progress, the deployed image per domain, each candidate's latest successful image) and the
// budgets (GcBudgets: global and per-domain byte limits, idle windows). Output: a GcPlan — the
// items to delete, in the order to delete them, each with its reason, and the domains that stay
// over their budget after everything collectable went.
//
// Rules (unit-tested in gc_policy_test.cc):
//  - never an item that is leased: of a candidate with a running build, of a domain with a
//    deploy in progress (deploy blobs and rootfs), or that holds/refers to a protected image
//    (the deployed image of a domain, the latest successful image of a candidate);
//  - never a non-collectable item (git repository, journal);
//  - a domain's (trimmable) build cache while a build of the domain runs is not deleted but, when
//  the
//    domain stays over its mark after everything else collectable went, trimmed (GcTrim: its
//    oldest files) by what it is over — a busy domain's compiler cache otherwise grows until
//    the domain's builds are refused;
//  - age rules apply without budget pressure: workspaces of candidates idle longer than
//    `workspace_idle_ms`, build-key entries whose image is gone (`dangling`), rootfs of images
//    not deployed;
//  - a domain over its own collection mark (its budget less `headroom_pct`) collects only its own
//    items, down to the mark: idle candidates first, then least recently used first;
//  - over the global mark, the domains using more than their share's mark (the global budget
//    split evenly, or their own budget when smaller) give down to it, then shared items
//    (domain "") go, LRU; a domain within its share is never touched. Domains still above their
//    share (the share itself, not its mark) are listed in `domains_over_share` (their next
//    build fails), as are domains over their own budget in `domains_over_budget`.
//
// Plain data and functions, no CAF, no I/O: thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln {

enum class StorageKind {
  kCandidateStorage,  // domains/<d>/candidates/<c>/storage (buildah store, base layouts)
  kWorkspace,         // domains/<d>/candidates/<c>/src (+ index, checked-out)
  kKeyEntry,          // keys/<key>.json (build-key cache)
  kLayeredOutput,     // domains/<d>/cache/outputs/<entry>
  kDeployBlob,        // domains/<d>/deploy/blobs/<digest>
  kDeployRootfs,      // domains/<d>/deploy/rootfs/<entry>
  kBuildCache,        // domains/<d>/cache/rootless, cache/layered (shared compiler caches)
  kGitRepo,           // domains/<d>/repo.git (never deleted; `git gc --auto`)
  kJournal,           // state/ (never deleted; compaction)
};

/// Stable lower-case name, used in /metrics labels, logs and `kiln gc` output.
const char* StorageKindName(StorageKind kind);

struct StorageItem {
  StorageKind kind = StorageKind::kCandidateStorage;
  std::string domain;     // "" for items shared by every domain
  std::string candidate;  // "" when the item is not a candidate's
  std::string id;         // unique, e.g. the path relative to the state directory
  int64_t bytes = 0;
  int64_t last_used_ms = 0;  // unix ms (mtime or the candidate's last build)
  /// Image digests ("sha256:<hex>") this item holds or refers to.
  std::vector<std::string> images;
  /// A build-key entry whose image is known to be gone from the registry.
  bool dangling = false;
  /// Issue 19: a temporary file whose writer (a kiln process) is gone, e.g. after kill -9.
  bool leftover = false;
  /// Issue 19: a compiler cache whose old files may go while a build uses it (the domain's
  /// layered caches; not buildah's directory, which holds running builds' temporary files).
  bool trimmable = false;
};

struct GcLeases {
  /// "<domain>/<candidate>" with a build running or queued: its storage and workspace stay.
  std::set<std::string> busy_candidates;
  /// Domains with a deploy in progress: their deploy blobs and rootfs stay.
  std::set<std::string> deploying_domains;
  /// Digests that must survive: each domain's deployed image and each candidate's latest
  /// successful image.
  std::set<std::string> protected_images;
  /// Item ids leased explicitly (e.g. a rootfs a running local candidate uses).
  std::set<std::string> leased_ids;
  /// "<domain>/<candidate>" -> unix ms of the candidate's last activity (build request).
  std::map<std::string, int64_t> candidate_last_active_ms;
};

struct GcBudgets {
  int64_t global_max_bytes = 0;                     // 0: no global budget
  std::map<std::string, int64_t> domain_max_bytes;  // absent or 0: no domain budget
  /// Candidates without activity this long count as idle (collected first).
  int64_t candidate_idle_ms = int64_t{6} * 3600 * 1000;
  /// Workspaces of candidates idle this long are collected even under budget; 0: never by age.
  int64_t workspace_idle_ms = int64_t{24} * 3600 * 1000;
  /// Issue 19, a strict budget: collection starts once usage passes the budget less this share
  /// (the low-water mark) and collects down to it, so that what builds write between two
  /// collections fits in the headroom. 0..90. Refusals stay at the budget itself.
  int headroom_pct = 0;
};

/// The low-water mark of `max` bytes under `headroom_pct` (what collection collects down to).
int64_t CollectionMark(int64_t max, int headroom_pct);

struct GcDeletion {
  StorageItem item;
  std::string reason;  // "idle workspace", "dangling key", "domain d over budget", ...
};

/// Issue 19: a build cache that a running build of its domain may be using is never deleted
/// whole; when the domain stays over its mark with nothing else left, its oldest files go
/// (files written in the last minute never: a running build's own writes).
struct GcTrim {
  StorageItem item;
  int64_t bytes = 0;  // to free, oldest files first
  std::string reason;
};

struct GcPlan {
  std::vector<GcDeletion> deletions;                   // in deletion order
  std::vector<GcTrim> trims;                           // after the deletions
  std::map<std::string, int64_t> domain_bytes_before;  // per domain ("" shared)
  std::map<std::string, int64_t> domain_bytes_after;
  int64_t total_bytes_before = 0;
  int64_t total_bytes_after = 0;
  /// Domains still over their own budget after the plan (their next build fails).
  std::set<std::string> domains_over_budget;
  /// True when the total stays over the global budget after the plan.
  bool global_over_budget = false;
  /// When the total stays over the global budget: domains above their share -> the share.
  std::map<std::string, int64_t> domains_over_share;
};

/// Why `item` may not be deleted under `leases`, or nullopt when it may.
std::optional<std::string> GcLeaseReason(const StorageItem& item, const GcLeases& leases);

/// The collection plan for `items` now (`now_ms`, unix ms).
GcPlan PlanCollection(const std::vector<StorageItem>& items, const GcLeases& leases,
                      const GcBudgets& budgets, int64_t now_ms);

/// The agent-facing error of a build in a domain that stays over its budget; names the budget
/// (`budget_key`, e.g. "domains.d.storage.max_gb" or "storage.max_gb") and the next step.
/// `used` and `budget` in bytes.
std::string OverBudgetMessage(const std::string& domain, int64_t used, int64_t budget,
                              const std::string& budget_key);

}  // namespace kiln
