#include "app/state_check_command.h"

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <utility>

#include "common/json_text.h"
#include "state/state_store.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json LatestJson(const std::optional<BuildRecord>& b) {
  if (!b) return nullptr;
  return {{"id", b->id}, {"digest", b->digest}};
}

json DeployJson(const std::optional<DeployRecord>& d) {
  if (!d) return nullptr;
  return {{"deploy_id", d->deploy_id}, {"build_id", d->build_id}, {"image", d->image},
          {"status", d->status},       {"reason", d->reason},     {"at_ms", d->at_ms}};
}

// A private copy of `from` (regular files only: the journal, snapshots, LOCK).
bool CopyState(const fs::path& from, const fs::path& to, std::string* error) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file()) continue;
    fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) break;
  }
  if (ec) *error = ec.message();
  return !ec;
}

}  // namespace

int StateCheckCommand(const std::string& state_dir, bool list_builds, std::ostream& out,
                      std::ostream& err) {
  const fs::path src = fs::path(state_dir) / "state";
  std::error_code ec;
  if (!fs::is_directory(src, ec)) {
    err << "kiln state-check: " << src.string() << " is not a directory (is --state-dir kiln's "
        << "server.state_dir?)\n";
    return 2;
  }
  std::string tmpl = (fs::temp_directory_path(ec) / "kiln-state-check-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    err << "kiln state-check: cannot create a temporary directory\n";
    return 2;
  }
  const fs::path copy = tmpl;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{copy};
  std::string copy_error;
  if (!CopyState(src, copy, &copy_error)) {
    err << "kiln state-check: cannot copy " << src.string() << ": " << copy_error << "\n";
    return 2;
  }

  StateStoreOptions options;
  options.sync = false;  // a throw-away copy
  options.compact_threshold_bytes = ~uint64_t{0};
  StateStore store(options);
  LoadSummary sum;
  Status s = store.Load(copy.string(), &sum);
  if (!s.ok()) {
    err << "kiln state-check: " << s.ToString() << "\n";
    json j{{"ok", false}, {"error", s.ToString()}};
    out << DumpJson(j, 2) << "\n";
    return 1;
  }

  json doc;
  const bool ok =
      sum.corruptions.empty() && sum.duplicate_terminal.empty() && sum.duplicate_started.empty();
  doc["ok"] = ok;
  doc["builds"] = sum.builds;
  doc["journal_records"] = sum.journal_records;
  doc["generation"] = sum.generation;
  doc["load_ms"] = sum.load_ms;
  doc["truncated_bytes"] = sum.truncated_bytes;
  doc["corruptions"] = sum.corruptions;
  doc["notes"] = sum.notes;
  doc["duplicate_terminal"] = sum.duplicate_terminal;
  doc["duplicate_started"] = sum.duplicate_started;
  doc["interrupted"] = sum.interrupted;

  std::map<std::string, size_t> statuses;
  std::map<std::pair<std::string, std::string>, size_t> per_candidate;
  json list = json::array();
  for (const BuildRecord& b : store.AllBuilds()) {
    // Builds the load marked interrupted count as such: that is what kiln would report.
    ++statuses[StatusWireName(b.status)];
    ++per_candidate[{b.domain, b.candidate}];
    if (list_builds) {
      list.push_back({{"id", b.id},
                      {"domain", b.domain},
                      {"candidate", b.candidate},
                      {"status", StatusWireName(b.status)},
                      {"digest", b.digest},
                      {"commit", b.commit},
                      {"error", b.error}});
    }
  }
  doc["statuses"] = statuses;
  json domains = json::object();
  for (const std::string& d : store.Domains()) {
    json candidates = json::object();
    for (const std::string& c : store.Candidates(d)) {
      candidates[c] = {{"builds", per_candidate[{d, c}]},
                       {"latest_successful", LatestJson(store.LatestSuccessful(d, c))}};
    }
    domains[d] = {{"deployed", DeployJson(store.Deployed(d))},
                  {"latest_deploy", DeployJson(store.LatestDeploy(d))},
                  {"latest_successful", LatestJson(store.LatestSuccessfulInDomain(d))},
                  {"candidates", std::move(candidates)}};
  }
  doc["domains"] = std::move(domains);
  if (list_builds) doc["build_list"] = std::move(list);
  out << DumpJson(doc, 2) << "\n";
  if (!ok) {
    err << "kiln state-check: the state in " << src.string()
        << " is damaged: " << sum.corruptions.size() << " corrupt region(s), "
        << sum.duplicate_terminal.size() << " duplicate terminal record(s), "
        << sum.duplicate_started.size() << " duplicate build id(s)\n";
  }
  return ok ? 0 : 1;
}

}  // namespace kiln
