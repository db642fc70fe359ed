#include "storage/collector.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <utility>

#include "common/file_util.h"
#include "common/safe_remove.h"
#include "storage/inventory.h"

namespace kiln {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const StorageKind kAllKinds[] = {
    StorageKind::kCandidateStorage, StorageKind::kWorkspace,  StorageKind::kKeyEntry,
    StorageKind::kLayeredOutput,    StorageKind::kDeployBlob, StorageKind::kDeployRootfs,
    StorageKind::kBuildCache,       StorageKind::kGitRepo,    StorageKind::kJournal};

int64_t GbToBytes(double gb) { return static_cast<int64_t>(std::llround(gb * kGiB)); }

std::string Mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

void StorageGate::Set(std::map<std::string, std::string> refusals) {
  std::lock_guard<std::mutex> l(mu_);
  refusals_ = std::move(refusals);
}

std::string StorageGate::Refusal(const std::string& domain) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = refusals_.find(domain);
  if (it == refusals_.end()) return "";
  wanted_ = true;
  return it->second;
}

GcBudgets BudgetsFromConfig(const Config& config) {
  GcBudgets b;
  b.global_max_bytes = GbToBytes(config.storage.max_gb);
  for (const auto& [name, d] : config.domains)
    if (d.storage.max_gb > 0) b.domain_max_bytes[name] = GbToBytes(d.storage.max_gb);
  b.candidate_idle_ms = config.storage.candidate_idle_s * 1000;
  b.workspace_idle_ms = config.storage.workspace_idle_s * 1000;
  b.headroom_pct = config.storage.headroom_pct;
  return b;
}

StorageCollector::StorageCollector(std::shared_ptr<const Config> config, std::string state_dir,
                                   std::shared_ptr<StorageLeaseTable> leases,
                                   std::shared_ptr<StorageGate> gate)
    : config_(std::move(config)),
      state_dir_(std::move(state_dir)),
      leases_(std::move(leases)),
      gate_(std::move(gate)) {
  metrics_.DeclareGauge(
      "kiln_storage_bytes",
      "Bytes kiln keeps in its state directory, per domain (\"\": shared) and kind");
  metrics_.DeclareGauge("kiln_storage_budget_bytes",
                        "Storage budget in bytes (domain \"\": storage.max_gb)");
  metrics_.DeclareGauge(
      "kiln_storage_over_budget",
      "1 while the domain stays over its budget after collection (builds refused)");
  metrics_.DeclareCounter("kiln_storage_collected_bytes_total",
                          "Bytes deleted by the storage collector");
  metrics_.DeclareCounter("kiln_storage_collections_total", "Storage collections run");
}

bool StorageCollector::Delete(const StorageItem& item, std::string* why) {
  const std::string path = state_dir_ + "/" + item.id;
  std::string lease_key;
  if (item.kind == StorageKind::kCandidateStorage || item.kind == StorageKind::kWorkspace)
    lease_key = StorageLeaseTable::Key(item.domain, item.candidate);
  else if (item.kind == StorageKind::kBuildCache)
    lease_key = item.domain + "/*";
  if (leases_ && !lease_key.empty() && !leases_->TryBeginCollect(lease_key)) {
    *why = "a build started using it";
    return false;
  }
  Status st;
  if (item.kind == StorageKind::kWorkspace) {
    // Under the workspace's checkout lock; without its marker the next checkout starts over.
    std::string parent = path.substr(0, path.rfind('/'));
    FileLock lock(parent + "/checkout.lock", LOCK_EX | LOCK_NB);
    if (!lock.held() && lock.error() == "busy") {
      if (leases_) leases_->EndCollect(lease_key);
      *why = "a checkout is running";
      return false;
    }
    ::unlink((parent + "/checked-out").c_str());
    st = RemoveTreeNoFollow(path);
    if (st.ok()) ::unlink((parent + "/index").c_str());
  } else if (item.kind == StorageKind::kKeyEntry) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) st = Status::Internal("unlink failed");
  } else {
    st = RemoveTreeNoFollow(path);
  }
  if (leases_ && !lease_key.empty()) leases_->EndCollect(lease_key);
  if (!st.ok()) *why = st.message();
  return st.ok();
}

int64_t StorageCollector::Trim(const StorageItem& item, int64_t bytes, int64_t now_ms) {
  namespace fs = std::filesystem;
  const std::string root = state_dir_ + "/" + item.id;
  struct stat top;
  if (::lstat(root.c_str(), &top) != 0 || !S_ISDIR(top.st_mode)) return 0;
  struct Entry {
    int64_t mtime_ms, bytes;
    std::string path;
  };
  std::vector<Entry> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    if (st.st_dev != top.st_dev) {
      if (S_ISDIR(st.st_mode)) it.disable_recursion_pending();
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    const int64_t mtime =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (now_ms - mtime < 60 * 1000) continue;  // a running build's own writes
    files.push_back({mtime, static_cast<int64_t>(st.st_blocks) * 512, it->path().string()});
  }
  std::sort(files.begin(), files.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.mtime_ms, a.path) < std::tie(b.mtime_ms, b.path);
  });
  int64_t freed = 0;
  for (const auto& f : files) {
    if (freed >= bytes) break;
    if (::unlink(f.path.c_str()) == 0) freed += f.bytes;
  }
  return freed;
}

GcRunReport StorageCollector::RunOnce(GcLeases leases, bool dry_run, int64_t now_ms) {
  GcRunReport report;
  std::set<std::string> always;
  std::vector<StorageItem> items = ScanInventory(state_dir_, *config_, &always);
  leases.leased_ids.insert(always.begin(), always.end());
  if (leases_)
    for (const auto& k : leases_->Busy()) leases.busy_candidates.insert(k);
  GcBudgets budgets = BudgetsFromConfig(*config_);
  report.plan = PlanCollection(items, leases, budgets, now_ms);
  for (const auto& it : items) report.bytes_by_kind[StorageKindName(it.kind)] += it.bytes;
  if (!dry_run) {
    for (const auto& del : report.plan.deletions) {
      std::string why;
      if (Delete(del.item, &why)) {
        report.freed_bytes += del.item.bytes;
        ++report.deleted;
        SetMetric("kiln_storage_collected_bytes_total", del.item.domain,
                  StorageKindName(del.item.kind), static_cast<double>(del.item.bytes), true);
        spdlog::info("storage: freed {} ({}) domain={} {}: {}", Mib(del.item.bytes),
                     StorageKindName(del.item.kind),
                     del.item.domain.empty() ? "-" : del.item.domain, del.item.id, del.reason);
      } else {
        report.skipped.push_back(del.item.id + ": " + why);
        spdlog::info("storage: kept {} ({}): {}", del.item.id, StorageKindName(del.item.kind), why);
      }
    }
    for (const auto& trim : report.plan.trims) {
      const int64_t freed = Trim(trim.item, trim.bytes, now_ms);
      // Fewer bytes than planned (recent files stay): the domain may stay over its budget.
      const std::string& d = trim.item.domain;
      report.plan.domain_bytes_after[d] += std::max<int64_t>(0, trim.bytes - freed);
      report.plan.total_bytes_after += std::max<int64_t>(0, trim.bytes - freed);
      if (budgets.domain_max_bytes.count(d) &&
          report.plan.domain_bytes_after[d] > budgets.domain_max_bytes[d])
        report.plan.domains_over_budget.insert(d);
      report.freed_bytes += freed;
      SetMetric("kiln_storage_collected_bytes_total", trim.item.domain,
                StorageKindName(trim.item.kind), static_cast<double>(freed), true);
      spdlog::info("storage: trimmed {} of {} ({}) domain={}: {}", Mib(freed), trim.item.id,
                   StorageKindName(trim.item.kind), trim.item.domain, trim.reason);
    }
    SetMetric("kiln_storage_collections_total", "", "", 1, true);
    if (report.deleted > 0 || !report.plan.domains_over_budget.empty())
      spdlog::info("storage: collection freed {} in {} item(s); {} in use of {} budget",
                   Mib(report.freed_bytes), report.deleted,
                   Mib(report.plan.total_bytes_before - report.freed_bytes),
                   budgets.global_max_bytes > 0 ? Mib(budgets.global_max_bytes) : "no global");
  }
  // What the next builds of each domain are told.
  std::map<std::string, std::string> refusals;
  for (const auto& d : report.plan.domains_over_budget) {
    refusals[d] =
        OverBudgetMessage(d, report.plan.domain_bytes_after[d], budgets.domain_max_bytes[d],
                          "domains." + d + ".storage.max_gb");
  }
  for (const auto& [d, share] : report.plan.domains_over_share) {
    if (!refusals.count(d))
      refusals[d] = OverBudgetMessage(d, report.plan.domain_bytes_after[d], share,
                                      "storage.max_gb (its share of)");
  }
  for (const auto& [d, why] : refusals)
    if (!dry_run)
      spdlog::warn("storage: domain {} stays over its budget: builds refused until it is under", d);
  if (gate_ && !dry_run) gate_->Set(std::move(refusals));
  UpdateMetrics(items, report);
  return report;
}

void StorageCollector::UpdateMetrics(const std::vector<StorageItem>& items,
                                     const GcRunReport& report) {
  std::set<std::string> deleted;
  if (report.deleted > 0) {
    std::set<std::string> skipped_ids;
    for (const auto& s : report.skipped) skipped_ids.insert(s.substr(0, s.find(": ")));
    for (const auto& d : report.plan.deletions)
      if (!skipped_ids.count(d.item.id)) deleted.insert(d.item.id);
  }
  std::map<std::pair<std::string, std::string>, double> bytes;
  std::set<std::string> domains = {""};
  for (const auto& [name, d] : config_->domains) domains.insert(name);
  for (const auto& d : domains)
    for (StorageKind k : kAllKinds) bytes[{d, StorageKindName(k)}] = 0;
  for (const auto& it : items)
    if (!deleted.count(it.id)) bytes[{it.domain, StorageKindName(it.kind)}] += it.bytes;
  for (const auto& [k, v] : bytes) SetMetric("kiln_storage_bytes", k.first, k.second, v);
  GcBudgets budgets = BudgetsFromConfig(*config_);
  if (budgets.global_max_bytes > 0)
    SetMetric("kiln_storage_budget_bytes", "", "", static_cast<double>(budgets.global_max_bytes));
  for (const auto& [d, b] : budgets.domain_max_bytes)
    SetMetric("kiln_storage_budget_bytes", d, "", static_cast<double>(b));
  for (const auto& [name, d] : config_->domains)
    SetMetric(
        "kiln_storage_over_budget", name, "",
        report.plan.domains_over_budget.count(name) || report.plan.domains_over_share.count(name)
            ? 1
            : 0);
}

void StorageCollector::SetMetric(const std::string& name, const std::string& domain,
                                 const std::string& kind, double value, bool add) {
  MetricLabels labels;
  if (name != "kiln_storage_collections_total") labels["domain"] = domain;
  if (!kind.empty()) labels["kind"] = kind;
  if (!add)
    metrics_.Set(name, labels, value);
  else if (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0)
    metrics_.Increment(name, labels, value);
  else
    metrics_.Add(name, labels, value);
}

std::string StorageCollector::RenderMetrics() const { return metrics_.Render(); }

}  // namespace kiln
