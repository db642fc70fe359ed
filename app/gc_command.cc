#include "app/gc_command.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "common/json_text.h"
#include "config/config_parser.h"
#include "state/state_store.h"
#include "storage/collector.h"
#include "storage/state_leases.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Removes its directory when it goes out of scope.
struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

int GcCommand(const std::map<std::string, std::string>& flags, bool dry_run, std::ostream& out,
              std::ostream& err) {
  if (!dry_run) {
    err << "kiln gc: only --dry-run is supported: kiln serve collects by itself every "
           "storage.gc_interval_s (docs/operations.md \"Storage budget\")\n";
    return 2;
  }
  auto cfg_it = flags.find("config");
  if (cfg_it == flags.end() || cfg_it->second.empty()) {
    err << "kiln gc: missing --config\n";
    return 2;
  }
  for (const auto& [k, v] : flags)
    if (k != "config") {
      err << "kiln gc: unknown flag --" << k << "\n";
      return 2;
    }
  auto config = std::make_shared<Config>();
  auto problems = LoadConfigFile(cfg_it->second, config.get());
  if (!problems.empty()) {
    for (const auto& p : problems) err << FormatConfigProblem(p) << "\n";
    return 1;
  }
  const std::string state_dir = fs::absolute(config->server.state_dir).string();

  // The journal, from a private copy (the running kiln holds the state's lock).
  StateStoreOptions options;
  options.sync = false;
  options.compact_threshold_bytes = ~uint64_t{0};
  auto store = std::make_unique<StateStore>(options);
  LoadSummary sum;
  TempDir copy;
  std::error_code ec;
  const fs::path src = fs::path(state_dir) / "state";
  if (fs::is_directory(src, ec)) {
    std::string tmpl = (fs::temp_directory_path(ec) / "kiln-gc-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      err << "kiln gc: cannot create a temporary directory\n";
      return 1;
    }
    copy.path = tmpl;
    for (const auto& e : fs::directory_iterator(src, ec)) {
      if (!e.is_regular_file() || e.path().filename() == "LOCK") continue;
      fs::copy_file(e.path(), copy.path / e.path().filename(), fs::copy_options::overwrite_existing,
                    ec);
      if (ec) break;
    }
    if (ec) {
      err << "kiln gc: cannot copy " << src.string() << ": " << ec.message()
          << " (a compaction of a running kiln may have moved the files: run it again)\n";
      return 1;
    }
    Status st = store->Load(copy.path.string(), &sum);
    if (!st.ok()) {
      err << "kiln gc: cannot load the state: " << st.ToString() << "\n";
      return 1;
    }
  }
  std::vector<std::string> domains;
  for (const auto& [n, d] : config->domains) domains.push_back(n);
  // No state yet (kiln never ran): nothing is deployed or built.
  GcLeases leases =
      copy.path.empty() ? GcLeases{} : LeasesFromState(*store, domains, sum.interrupted);

  StorageCollector collector(config, state_dir, nullptr, nullptr);
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  GcRunReport r = collector.RunOnce(leases, /*dry_run=*/true, now);
  GcBudgets budgets = BudgetsFromConfig(*config);

  json j = {{"dry_run", true},
            {"total_bytes", r.plan.total_bytes_before},
            {"total_bytes_after", r.plan.total_bytes_after},
            {"global_budget_bytes", budgets.global_max_bytes},
            {"global_over_budget", r.plan.global_over_budget}};
  json doms = json::object();
  for (const auto& name : domains) {
    int64_t budget = budgets.domain_max_bytes.count(name) ? budgets.domain_max_bytes[name] : 0;
    doms[name] = {{"bytes", r.plan.domain_bytes_before[name]},
                  {"bytes_after", r.plan.domain_bytes_after[name]},
                  {"budget_bytes", budget},
                  {"over_budget", r.plan.domains_over_budget.count(name) > 0 ||
                                      r.plan.domains_over_share.count(name) > 0}};
  }
  j["domains"] = doms;
  json del = json::array();
  for (const auto& d : r.plan.deletions)
    del.push_back({{"kind", StorageKindName(d.item.kind)},
                   {"domain", d.item.domain},
                   {"candidate", d.item.candidate},
                   {"path", d.item.id},
                   {"bytes", d.item.bytes},
                   {"reason", d.reason}});
  j["delete"] = del;
  json trim = json::array();  // issue 19: oldest files of a busy domain's build cache
  for (const auto& t : r.plan.trims)
    trim.push_back({{"kind", StorageKindName(t.item.kind)},
                    {"domain", t.item.domain},
                    {"path", t.item.id},
                    {"bytes", t.bytes},
                    {"reason", t.reason}});
  j["trim"] = trim;
  json kinds = json::object();
  for (const auto& [k, v] : r.bytes_by_kind) kinds[k] = v;
  j["bytes_by_kind"] = kinds;
  out << DumpJson(j) << "\n";
  return 0;
}

}  // namespace kiln
