#include "storage/gc_policy.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace kiln {

const char* StorageKindName(StorageKind kind) {
  switch (kind) {
    case StorageKind::kCandidateStorage:
      return "candidate_storage";
    case StorageKind::kWorkspace:
      return "workspace";
    case StorageKind::kKeyEntry:
      return "build_key";
    case StorageKind::kLayeredOutput:
      return "layered_output";
    case StorageKind::kDeployBlob:
      return "deploy_blob";
    case StorageKind::kDeployRootfs:
      return "deploy_rootfs";
    case StorageKind::kBuildCache:
      return "build_cache";
    case StorageKind::kGitRepo:
      return "git_repo";
    case StorageKind::kJournal:
      return "journal";
  }
  return "unknown";
}

namespace {

std::string CandidateKey(const StorageItem& item) { return item.domain + "/" + item.candidate; }

bool DomainHasBusyCandidate(const std::string& domain, const GcLeases& leases) {
  std::string prefix = domain + "/";
  auto it = leases.busy_candidates.lower_bound(prefix);
  return it != leases.busy_candidates.end() && it->compare(0, prefix.size(), prefix) == 0;
}

// The newest of the item's own use and its candidate's last activity.
int64_t EffectiveLastUsed(const StorageItem& item, const GcLeases& leases) {
  int64_t t = item.last_used_ms;
  if (!item.candidate.empty()) {
    auto it = leases.candidate_last_active_ms.find(CandidateKey(item));
    if (it != leases.candidate_last_active_ms.end()) t = std::max(t, it->second);
  }
  return t;
}

std::string FormatMiB(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string FormatGiB(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g GB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

int64_t CollectionMark(int64_t max, int headroom_pct) {
  const int pct = std::clamp(headroom_pct, 0, 90);
  return max - max / 100 * pct - (max % 100) * pct / 100;
}

std::optional<std::string> GcLeaseReason(const StorageItem& item, const GcLeases& leases) {
  switch (item.kind) {
    case StorageKind::kGitRepo:
      return std::string("git repositories are never deleted (git gc --auto only)");
    case StorageKind::kJournal:
      return std::string("the journal is never deleted (compaction only)");
    default:
      break;
  }
  if (leases.leased_ids.count(item.id)) return std::string("in use");
  if ((item.kind == StorageKind::kCandidateStorage || item.kind == StorageKind::kWorkspace) &&
      leases.busy_candidates.count(CandidateKey(item))) {
    return std::string("a build of the candidate is running");
  }
  if (item.kind == StorageKind::kBuildCache && DomainHasBusyCandidate(item.domain, leases)) {
    return std::string("a build of the domain is running");
  }
  if ((item.kind == StorageKind::kDeployBlob || item.kind == StorageKind::kDeployRootfs) &&
      leases.deploying_domains.count(item.domain)) {
    return std::string("a deploy of the domain is in progress");
  }
  for (const auto& image : item.images) {
    if (leases.protected_images.count(image)) {
      return std::string("holds a deployed or latest successful image");
    }
  }
  return std::nullopt;
}

GcPlan PlanCollection(const std::vector<StorageItem>& items, const GcLeases& leases,
                      const GcBudgets& budgets, int64_t now_ms) {
  GcPlan plan;
  std::map<std::string, int64_t> usage;
  for (const auto& item : items) {
    usage[item.domain] += item.bytes;
    plan.total_bytes_before += item.bytes;
  }
  plan.domain_bytes_before = usage;
  int64_t total = plan.total_bytes_before;

  std::vector<bool> deleted(items.size(), false);
  std::vector<bool> eligible(items.size(), false);
  for (size_t i = 0; i < items.size(); ++i) eligible[i] = !GcLeaseReason(items[i], leases);

  auto remove = [&](size_t i, std::string reason) {
    deleted[i] = true;
    usage[items[i].domain] -= items[i].bytes;
    total -= items[i].bytes;
    plan.deletions.push_back({items[i], std::move(reason)});
  };

  // 1. Age rules, whatever the budget.
  for (size_t i = 0; i < items.size(); ++i) {
    if (!eligible[i]) continue;
    const StorageItem& item = items[i];
    int64_t idle = now_ms - EffectiveLastUsed(item, leases);
    if (item.kind == StorageKind::kWorkspace && budgets.workspace_idle_ms > 0 &&
        idle > budgets.workspace_idle_ms) {
      remove(i, "workspace of a candidate idle longer than the workspace idle window");
    } else if (item.kind == StorageKind::kKeyEntry && item.dangling) {
      remove(i, "build-key cache entry whose image is gone");
    } else if (item.leftover) {
      remove(i, "temporary file of a kiln process that is gone");
    } else if (item.kind == StorageKind::kDeployRootfs) {
      remove(i, "rootfs of an image that is no longer deployed");
    }
  }

  // Budget candidates of a set, in deletion order: idle first, then least recently used.
  auto ordered = [&](auto&& select) {
    std::vector<std::tuple<bool, int64_t, std::string, size_t>> keyed;
    for (size_t i = 0; i < items.size(); ++i) {
      if (deleted[i] || !eligible[i] || !select(items[i])) continue;
      int64_t last = EffectiveLastUsed(items[i], leases);
      bool idle = now_ms - last > budgets.candidate_idle_ms;
      keyed.emplace_back(!idle, last, items[i].id, i);
    }
    std::sort(keyed.begin(), keyed.end());
    std::vector<size_t> out;
    for (const auto& k : keyed) out.push_back(std::get<3>(k));
    return out;
  };
  auto budget_of = [&](const std::string& domain) -> int64_t {
    auto it = budgets.domain_max_bytes.find(domain);
    return it == budgets.domain_max_bytes.end() ? 0 : it->second;
  };

  auto mark = [&](int64_t max) { return CollectionMark(max, budgets.headroom_pct); };
  const std::string over = budgets.headroom_pct > 0 ? " over its storage budget's collection mark"
                                                    : " over its storage budget";

  // 2. Each domain over its own budget (its mark) collects its own items only.
  for (const auto& [domain, max] : budgets.domain_max_bytes) {
    if (max <= 0 || domain.empty() || usage[domain] <= mark(max)) continue;
    for (size_t i : ordered([&](const StorageItem& it) { return it.domain == domain; })) {
      if (usage[domain] <= mark(max)) break;
      remove(i, "domain " + domain + over);
    }
  }

  // 3. Over the global budget (its mark): domains above their share give first (down to their
  // share's mark), then everything collectable, least recently used first.
  const int64_t global_mark = mark(budgets.global_max_bytes);
  if (budgets.global_max_bytes > 0 && total > global_mark) {
    std::set<std::string> domains;
    for (const auto& item : items) {
      if (!item.domain.empty()) domains.insert(item.domain);
    }
    int64_t even_share = domains.empty()
                             ? budgets.global_max_bytes
                             : budgets.global_max_bytes / static_cast<int64_t>(domains.size());
    auto share_of = [&](const std::string& domain) {
      int64_t own = budget_of(domain);
      return own > 0 ? std::min(own, even_share) : even_share;
    };
    for (size_t i : ordered([&](const StorageItem& it) {
           return !it.domain.empty() && usage[it.domain] > mark(share_of(it.domain));
         })) {
      if (total <= global_mark) break;
      if (usage[items[i].domain] <= mark(share_of(items[i].domain))) continue;
      remove(i, "total storage over the global budget (domain " + items[i].domain +
                    " above its share)");
    }
    for (size_t i : ordered([](const StorageItem& it) { return it.domain.empty(); })) {
      if (total <= global_mark) break;
      remove(i, "total storage over the global budget (shared)");
    }
    if (total > budgets.global_max_bytes) {
      for (const auto& domain : domains) {
        if (usage[domain] > share_of(domain)) {
          plan.domains_over_share[domain] = share_of(domain);
        }
      }
    }
  }

  // 4. A domain still over its own mark (or, over the global mark, its share's mark) trims
  // the build caches its running builds lease, largest first (only the busy-domain lease; an
  // explicit lease or a protected image keeps a cache whole).
  auto trimmable = [&](size_t i) {
    const StorageItem& it = items[i];
    if (it.kind != StorageKind::kBuildCache || !it.trimmable || deleted[i] || eligible[i] ||
        it.bytes <= 0)
      return false;
    if (!DomainHasBusyCandidate(it.domain, leases)) return false;
    GcLeases others = leases;
    others.busy_candidates.clear();
    return !GcLeaseReason(it, others);
  };
  std::set<std::string> busy_domains;
  for (size_t i = 0; i < items.size(); ++i)
    if (trimmable(i)) busy_domains.insert(items[i].domain);
  for (const auto& domain : busy_domains) {
    int64_t target = -1;
    if (int64_t max = budget_of(domain); max > 0 && usage[domain] > mark(max)) target = mark(max);
    if (budgets.global_max_bytes > 0 && total > global_mark) {
      std::set<std::string> named;
      for (const auto& item : items)
        if (!item.domain.empty()) named.insert(item.domain);
      const auto n = static_cast<int64_t>(named.size());
      int64_t share = n > 0 ? budgets.global_max_bytes / n : budgets.global_max_bytes;
      if (int64_t own = budget_of(domain); own > 0) share = std::min(share, own);
      if (usage[domain] > mark(share))
        target = target < 0 ? mark(share) : std::min(target, mark(share));
    }
    if (target < 0) continue;
    std::vector<size_t> caches;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].domain == domain && trimmable(i)) caches.push_back(i);
    std::sort(caches.begin(), caches.end(), [&](size_t a, size_t b) {
      return std::tie(items[b].bytes, items[a].id) < std::tie(items[a].bytes, items[b].id);
    });
    for (size_t i : caches) {
      const int64_t want = std::min(items[i].bytes, usage[domain] - target);
      if (want <= 0) break;
      usage[domain] -= want;
      total -= want;
      plan.trims.push_back({items[i], want,
                            "domain " + domain +
                                " over its storage budget's collection mark "
                                "while its builds run: the cache's oldest files"});
    }
  }

  plan.domain_bytes_after = usage;
  plan.total_bytes_after = total;
  for (const auto& [domain, max] : budgets.domain_max_bytes) {
    if (max > 0 && usage[domain] > max) plan.domains_over_budget.insert(domain);
  }
  plan.global_over_budget = budgets.global_max_bytes > 0 && total > budgets.global_max_bytes;
  return plan;
}

std::string OverBudgetMessage(const std::string& domain, int64_t used, int64_t budget,
                              const std::string& budget_key) {
  return "domain " + domain + " uses " + FormatMiB(used) + " of storage, over its budget (" +
         budget_key + " = " + FormatGiB(budget) +
         ") even after collecting everything not in use (running builds, the deployed build and "
         "each candidate's latest successful build are kept). Next step: stop building "
         "candidates the loop no longer needs and retry later, or ask the operator to raise " +
         budget_key;
}

}  // namespace kiln
