#include "state/state_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/file_util.h"
#include "common/json_text.h"
#include "common/sha256.h"

namespace kiln {
namespace {

using nlohmann::json;

// Journal record types. Never renumber: they are on disk.
enum RecordType : uint8_t {
  kBuildStarted = 1,
  kBuildFinished = 2,
  kDeploy = 3,
  kInterrupted = 4,
  kReserveIds = 5,  // written by older versions only (id blocks); still read
  kCacheDrop = 6,   // written by older versions only (their build-key cache); skipped
};

constexpr int kSnapshotVersion = 1;

// The journal keeps every status by its exact name (core/build_types.h); an unknown name is a
// corrupt record.
BuildStatus StatusFromName(const std::string& n) {
  std::optional<BuildStatus> s = BuildStatusFromName(n);
  if (!s) throw std::invalid_argument("unknown build status '" + n + "'");
  return *s;
}

// Sequence number of an id "<prefix><16 hex>", or 0 when it is not of that form.
uint64_t SeqOf(const std::string& id, char prefix) {
  if (id.size() != 18 || id[0] != prefix || id[1] != '-') return 0;
  uint64_t v = 0;
  for (size_t i = 2; i < 18; ++i) {
    char c = id[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return 0;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

std::string FormatId(char prefix, uint64_t seq) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%c-%016" PRIx64, prefix, seq);
  return buf;
}

json TimingsJson(const BuildTimings& t) {
  json j = {{"queued_ms", t.queued_ms},
            {"build_ms", t.build_ms},
            {"push_ms", t.push_ms},
            {"total_ms", t.total_ms}};
  if (!t.parts.empty()) j["parts"] = t.parts;  // issue 18
  return j;
}

BuildTimings TimingsFrom(const json& j) {
  BuildTimings t;
  t.queued_ms = j.value("queued_ms", int64_t{0});
  t.build_ms = j.value("build_ms", int64_t{0});
  t.push_ms = j.value("push_ms", int64_t{0});
  t.total_ms = j.value("total_ms", int64_t{0});
  if (j.contains("parts") && j["parts"].is_object())  // issue 18
    for (auto it = j["parts"].begin(); it != j["parts"].end(); ++it)
      if (it.value().is_number_integer()) t.parts[it.key()] = it.value().get<int64_t>();
  return t;
}

json BuildJson(const BuildRecord& b) {
  return {{"id", b.id},
          {"domain", b.domain},
          {"candidate", b.candidate},
          {"commit", b.commit},
          {"build_key", b.build_key},
          {"status", BuildStatusName(b.status)},
          {"image_ref", b.image_ref},
          {"digest", b.digest},
          {"diagnostics", DiagnosticsToJson(b.diagnostics)},
          {"timings", TimingsJson(b.timings)},
          {"error", b.error},
          {"error_kind", b.error_kind},
          {"cache_hit", b.cache_hit},
          {"started_at_ms", b.started_at_ms},
          {"finished_at_ms", b.finished_at_ms}};
}

BuildRecord BuildFrom(const json& j) {
  BuildRecord b;
  b.id = j.at("id").get<std::string>();
  b.domain = j.at("domain").get<std::string>();
  b.candidate = j.at("candidate").get<std::string>();
  b.commit = j.value("commit", "");
  b.build_key = j.value("build_key", "");
  b.status = StatusFromName(j.at("status").get<std::string>());
  b.image_ref = j.value("image_ref", "");
  b.digest = j.value("digest", "");
  if (j.contains("diagnostics")) b.diagnostics = DiagnosticsFromJson(j.at("diagnostics"));
  if (j.contains("timings")) b.timings = TimingsFrom(j.at("timings"));
  b.error = j.value("error", "");
  b.error_kind = j.value("error_kind", "");
  b.cache_hit = j.value("cache_hit", false);
  b.started_at_ms = j.value("started_at_ms", int64_t{0});
  b.finished_at_ms = j.value("finished_at_ms", int64_t{0});
  return b;
}

json FinishJson(const BuildFinish& f) {
  return {{"id", f.id},
          {"status", BuildStatusName(f.status)},
          {"image_ref", f.image_ref},
          {"digest", f.digest},
          {"diagnostics", DiagnosticsToJson(f.diagnostics)},
          {"timings", TimingsJson(f.timings)},
          {"error", f.error},
          {"error_kind", f.error_kind},
          {"cache_hit", f.cache_hit},
          {"commit", f.commit},
          {"build_key", f.build_key},
          {"finished_at_ms", f.finished_at_ms}};
}

json DeployJson(const DeployRecord& d) {
  return {{"deploy_id", d.deploy_id}, {"domain", d.domain}, {"build_id", d.build_id},
          {"image", d.image},         {"status", d.status}, {"reason", d.reason},
          {"at_ms", d.at_ms}};
}

DeployRecord DeployFrom(const json& j) {
  DeployRecord d;
  d.deploy_id = j.value("deploy_id", "");
  d.domain = j.at("domain").get<std::string>();
  d.build_id = j.value("build_id", "");
  d.image = j.value("image", "");
  d.status = j.value("status", "");
  d.reason = j.value("reason", "");
  d.at_ms = j.value("at_ms", int64_t{0});
  return d;
}

using CandidateKey = std::pair<std::string, std::string>;

// JSON text of a record. Strings from builds and agents may hold invalid UTF-8: it is replaced
// (U+FFFD) rather than thrown on, and replay sees the same replaced text.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

// The in-memory model. Apply* are used both live (after a successful append) and on replay,
// so replay reproduces exactly the state the live process had.
struct StateStore::Model {
  struct Build {
    BuildRecord record;
    uint64_t order = 0;  // start order
  };
  std::map<BuildId, Build> builds;
  std::map<CandidateKey, std::map<uint64_t, BuildId>> by_candidate;  // start order -> id
  std::map<CandidateKey, BuildId> latest;
  std::map<std::string, BuildId> latest_in_domain;
  std::map<std::string, DeployRecord> deployed;
  std::map<std::string, DeployRecord> latest_deploy;
  uint64_t next_order = 1;
  uint64_t next_seq = 1;      // next build id sequence number to assign
  uint64_t reserved_seq = 1;  // ids below this were reserved by an older kiln (kReserveIds)
  uint64_t next_deploy_seq = 1;
  std::vector<BuildId> duplicate_terminal;  // replay only: finishes of already final builds
  std::vector<BuildId> duplicate_started;   // replay only: a start of an existing id

  void ApplyStarted(const BuildRecord& b) {
    if (builds.count(b.id)) {
      duplicate_started.push_back(b.id);
      throw std::invalid_argument("duplicate build id " + b.id);
    }
    uint64_t order = next_order++;
    builds[b.id] = Build{b, order};
    by_candidate[{b.domain, b.candidate}][order] = b.id;
    if (uint64_t s = SeqOf(b.id, 'b')) next_seq = std::max(next_seq, s + 1);
    if (IsFinal(b.status)) OnFinal(builds[b.id].record);
  }

  void ApplyFinished(const json& j) {
    auto it = builds.find(j.at("id").get<std::string>());
    if (it == builds.end()) throw std::invalid_argument("finish of unknown build");
    BuildRecord& b = it->second.record;
    // The live store refuses to finish a final build, so a second terminal record can only
    // come from a damaged or hand-edited journal: the first one wins, the later is reported.
    if (IsFinal(b.status)) {
      duplicate_terminal.push_back(b.id);
      return;
    }
    b.status = StatusFromName(j.at("status").get<std::string>());
    b.image_ref = j.value("image_ref", "");
    b.digest = j.value("digest", "");
    b.diagnostics = DiagnosticsFromJson(j.at("diagnostics"));
    b.timings = TimingsFrom(j.at("timings"));
    b.error = j.value("error", "");
    b.error_kind = j.value("error_kind", "");
    b.cache_hit = j.value("cache_hit", false);
    if (!j.value("commit", "").empty()) b.commit = j.value("commit", "");
    if (!j.value("build_key", "").empty()) b.build_key = j.value("build_key", "");
    b.finished_at_ms = j.value("finished_at_ms", int64_t{0});
    if (IsFinal(b.status)) OnFinal(b);
  }

  void OnFinal(const BuildRecord& b) {
    if (b.status != BuildStatus::kSucceeded) return;
    latest[{b.domain, b.candidate}] = b.id;
    latest_in_domain[b.domain] = b.id;
  }

  void ApplyDeploy(const DeployRecord& d) {
    latest_deploy[d.domain] = d;
    if (d.status == "rolled_out") deployed[d.domain] = d;
    if (uint64_t s = SeqOf(d.deploy_id, 'd')) next_deploy_seq = std::max(next_deploy_seq, s + 1);
  }

  void ApplyInterrupted(const json& j) {
    int64_t at = j.value("at_ms", int64_t{0});
    for (const json& id : j.at("ids")) {
      auto it = builds.find(id.get<std::string>());
      if (it == builds.end() || IsFinal(it->second.record.status)) continue;
      BuildRecord& b = it->second.record;
      b.status = BuildStatus::kInterrupted;
      b.finished_at_ms = at;
      if (b.error.empty()) b.error = "interrupted: kiln stopped during the build";
    }
  }

  void Apply(uint8_t type, const json& j) {
    switch (type) {
      case kBuildStarted:
        ApplyStarted(BuildFrom(j));
        break;
      case kBuildFinished:
        ApplyFinished(j);
        break;
      case kDeploy:
        ApplyDeploy(DeployFrom(j));
        break;
      case kInterrupted:
        ApplyInterrupted(j);
        break;
      case kReserveIds:
        reserved_seq = std::max(reserved_seq, j.at("upto").get<uint64_t>());
        break;
      case kCacheDrop:
        break;  // older versions kept a build-key cache here (now the keys_dir files)
      default:
        throw std::invalid_argument("unknown record type " + std::to_string(type));
    }
  }

  bool Referenced(const BuildRecord& b) const {
    auto l = latest.find({b.domain, b.candidate});
    if (l != latest.end() && l->second == b.id) return true;
    auto ld = latest_in_domain.find(b.domain);
    if (ld != latest_in_domain.end() && ld->second == b.id) return true;
    for (const auto* m : {&deployed, &latest_deploy}) {
      auto d = m->find(b.domain);
      if (d != m->end() && d->second.build_id == b.id) return true;
    }
    return false;
  }

  // Drops the oldest final, unreferenced builds beyond `keep` per candidate.
  size_t Prune(size_t keep) {
    size_t dropped = 0;
    for (auto& [key, ids] : by_candidate) {
      for (auto it = ids.begin(); ids.size() > keep && it != ids.end();) {
        const BuildRecord& b = builds.at(it->second).record;
        if (!IsFinal(b.status) || Referenced(b)) {
          ++it;
          continue;
        }
        builds.erase(it->second);
        it = ids.erase(it);
        ++dropped;
      }
    }
    return dropped;
  }

  json Snapshot() const {
    json bs = json::array();
    std::map<uint64_t, const BuildRecord*> ordered;
    for (const auto& [id, b] : builds) ordered[b.order] = &b.record;
    for (const auto& [order, b] : ordered) bs.push_back(BuildJson(*b));
    json latest_j = json::array();
    for (const auto& [k, id] : latest) latest_j.push_back({k.first, k.second, id});
    json deploys = json::array();
    for (const auto& [d, r] : deployed) deploys.push_back(DeployJson(r));
    json attempts = json::array();
    for (const auto& [d, r] : latest_deploy) attempts.push_back(DeployJson(r));
    return {{"version", kSnapshotVersion},
            {"next_seq", next_seq},
            {"reserved_seq", reserved_seq},
            {"next_deploy_seq", next_deploy_seq},
            {"builds", bs},
            {"latest", latest_j},
            {"latest_in_domain", latest_in_domain},
            {"deployed", deploys},
            {"latest_deploy", attempts},
            {"cache", json::array()}};  // read by older versions (their build-key cache)
  }

  void LoadSnapshot(const json& s) {
    if (s.at("version").get<int>() != kSnapshotVersion) {
      throw std::invalid_argument("unsupported snapshot version");
    }
    next_seq = s.at("next_seq").get<uint64_t>();
    reserved_seq = s.at("reserved_seq").get<uint64_t>();
    next_deploy_seq = s.at("next_deploy_seq").get<uint64_t>();
    for (const json& b : s.at("builds")) {
      BuildRecord r = BuildFrom(b);
      if (builds.count(r.id)) throw std::invalid_argument("duplicate build id " + r.id);
      uint64_t order = next_order++;
      const BuildId id = r.id;  // r is moved from below
      by_candidate[{r.domain, r.candidate}][order] = id;
      builds[id] = Build{std::move(r), order};
    }
    for (const json& l : s.at("latest")) {
      latest[{l.at(0).get<std::string>(), l.at(1).get<std::string>()}] = l.at(2).get<std::string>();
    }
    latest_in_domain = s.at("latest_in_domain").get<std::map<std::string, std::string>>();
    for (const json& d : s.at("deployed")) {
      DeployRecord r = DeployFrom(d);
      deployed[r.domain] = r;
    }
    for (const json& d : s.at("latest_deploy")) {
      DeployRecord r = DeployFrom(d);
      latest_deploy[r.domain] = r;
    }
  }
};

StateStore::StateStore(StateStoreOptions options)
    : options_(std::move(options)), model_(std::make_unique<Model>()) {}

StateStore::~StateStore() = default;

std::string StateStore::FormatBuildId(uint64_t seq) { return FormatId('b', seq); }

int64_t StateStore::Now() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status StateStore::CheckLoaded() const {
  if (!journal_) return Status::FailedPrecondition("state store is not loaded");
  return Status::Ok();
}

Status StateStore::Load(const std::string& dir, LoadSummary* summary) {
  std::lock_guard<std::mutex> w(write_mu_);
  if (journal_) return Status::FailedPrecondition("state store already loaded");
  auto t0 = std::chrono::steady_clock::now();
  *summary = LoadSummary{};
  JournalOptions jo;
  jo.fs = options_.fs;
  jo.compact_threshold_bytes = options_.compact_threshold_bytes;
  jo.sync = options_.sync;
  std::unique_ptr<Journal> journal;
  JournalLoad jl;
  Status s = Journal::Open(dir, jo, &journal, &jl);
  if (!s.ok()) return s;

  auto m = std::make_unique<Model>();
  if (jl.has_snapshot) {
    try {
      m->LoadSnapshot(json::parse(jl.snapshot));
    } catch (const std::exception& e) {
      return Status::Internal("state snapshot in " + dir + " is unreadable: " + e.what());
    }
  }
  for (size_t i = 0; i < jl.records.size(); ++i) {
    try {
      m->Apply(jl.records[i].type, json::parse(jl.records[i].payload));
    } catch (const std::exception& e) {
      summary->notes.push_back("journal record " + std::to_string(i) + " skipped: " + e.what());
    }
  }
  m->next_seq = std::max(m->next_seq, m->reserved_seq);
  {
    std::unique_lock<std::shared_mutex> lock(model_mu_);
    model_ = std::move(m);
  }
  journal_ = std::move(journal);

  std::vector<BuildId> active;
  std::vector<BuildId> resumed;
  for (const auto& [id, b] : model_->builds) {
    if (IsFinal(b.record.status)) continue;
    (options_.resumable && options_.resumable(b.record) ? resumed : active).push_back(id);
  }
  if (!active.empty()) {
    s = Commit(kInterrupted, Dump(json{{"ids", active}, {"at_ms", Now()}}));
    if (!s.ok()) {
      journal_.reset();
      std::unique_lock<std::shared_mutex> lock(model_mu_);
      model_ = std::make_unique<Model>();
      return s;
    }
  }
  if (!jl.corruptions.empty() || journal_->CompactionDue()) {
    Status c = CompactLocked();
    if (!c.ok()) summary->notes.push_back("compaction after load failed: " + c.ToString());
  }

  // A kiln killed while writing a build key leaves its temporary file: gone at the next start.
  if (!options_.keys_dir.empty())
    if (size_t n = RemoveOrphanTempFiles(options_.keys_dir); n > 0)
      summary->notes.push_back("removed " + std::to_string(n) +
                               " temporary build-key file(s) of an earlier kiln");

  summary->builds = model_->builds.size();
  summary->deploys = model_->latest_deploy.size();
  summary->interrupted = std::move(active);
  summary->resumed = std::move(resumed);
  summary->duplicate_terminal = model_->duplicate_terminal;
  summary->duplicate_started = model_->duplicate_started;
  summary->generation = jl.generation;
  summary->journal_records = jl.records.size();
  summary->truncated_bytes = jl.truncated_bytes;
  summary->corruptions = std::move(jl.corruptions);
  summary->notes.insert(summary->notes.end(), jl.notes.begin(), jl.notes.end());
  summary->load_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  journaled_ = true;
  return Status::Ok();
}

Status StateStore::Commit(uint8_t type, const std::string& payload) {
  Status s = journal_->Append(type, payload);
  if (!s.ok()) return s;
  {
    std::unique_lock<std::shared_mutex> lock(model_mu_);
    model_->Apply(type, json::parse(payload));  // validated by the caller: cannot throw
  }
  return MaybeCompact();
}

Status StateStore::MaybeCompact() {
  if (!journal_->CompactionDue()) return Status::Ok();
  // After a failed compaction (full disk), retry only once the journal grew by another quarter.
  if (failed_compaction_at_ &&
      journal_->size() < failed_compaction_at_ + options_.compact_threshold_bytes / 4) {
    return Status::Ok();
  }
  Status c = CompactLocked();
  if (!c.ok()) {
    failed_compaction_at_ = journal_->size();
    spdlog::warn("state: compaction of {} failed (journal keeps growing): {}", journal_->dir(),
                 c.ToString());
  }
  return Status::Ok();  // the record itself is committed
}

Status StateStore::CompactLocked() {
  std::string snapshot;
  {
    std::unique_lock<std::shared_mutex> lock(model_mu_);
    model_->Prune(options_.max_builds_per_candidate);
    snapshot = Dump(model_->Snapshot());
  }
  Status s = journal_->Compact(snapshot);
  if (s.ok()) failed_compaction_at_ = 0;
  return s;
}

Status StateStore::Compact() {
  std::lock_guard<std::mutex> w(write_mu_);
  Status s = CheckLoaded();
  return s.ok() ? CompactLocked() : s;
}

Status StateStore::RecordBuildStarted(BuildRecord* build) {
  std::lock_guard<std::mutex> w(write_mu_);
  Status s = CheckLoaded();
  if (!s.ok()) return s;
  if (build->domain.empty() || build->candidate.empty()) {
    return Status::InvalidArgument("build record needs a domain and a candidate");
  }
  BuildRecord b = *build;
  if (b.id.empty()) b.id = FormatBuildId(model_->next_seq);
  if (model_->builds.count(b.id))
    return Status::InvalidArgument("build " + b.id + " already exists");
  if (b.started_at_ms == 0) b.started_at_ms = Now();
  s = Commit(kBuildStarted, Dump(BuildJson(b)));
  if (s.ok()) *build = std::move(b);
  return s;
}

Status StateStore::RecordBuildFinished(const BuildFinish& finish) {
  std::lock_guard<std::mutex> w(write_mu_);
  Status s = CheckLoaded();
  if (!s.ok()) return s;
  auto it = model_->builds.find(finish.id);
  if (it == model_->builds.end()) return Status::NotFound("build " + finish.id + " not found");
  if (IsFinal(it->second.record.status)) {
    return Status::FailedPrecondition("build " + finish.id + " is already " +
                                      BuildStatusName(it->second.record.status));
  }
  BuildFinish f = finish;
  if (f.finished_at_ms == 0 && IsFinal(f.status)) f.finished_at_ms = Now();
  return Commit(kBuildFinished, Dump(FinishJson(f)));
}

Status StateStore::RecordDeploy(DeployRecord* deploy) {
  std::lock_guard<std::mutex> w(write_mu_);
  Status s = CheckLoaded();
  if (!s.ok()) return s;
  if (deploy->domain.empty() || deploy->status.empty()) {
    return Status::InvalidArgument("deploy record needs a domain and a status");
  }
  DeployRecord d = *deploy;
  if (d.deploy_id.empty()) d.deploy_id = FormatId('d', model_->next_deploy_seq);
  if (d.at_ms == 0) d.at_ms = Now();
  s = Commit(kDeploy, Dump(DeployJson(d)));
  if (s.ok()) *deploy = std::move(d);
  return s;
}

std::optional<BuildRecord> StateStore::Build(const BuildId& id) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  auto it = model_->builds.find(id);
  if (it == model_->builds.end()) return std::nullopt;
  return it->second.record;
}

std::optional<BuildRecord> StateStore::LatestSuccessful(const std::string& domain,
                                                        const std::string& candidate) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  auto it = model_->latest.find({domain, candidate});
  if (it == model_->latest.end()) return std::nullopt;
  auto b = model_->builds.find(it->second);
  if (b == model_->builds.end()) return std::nullopt;
  return b->second.record;
}

std::optional<BuildRecord> StateStore::LatestSuccessfulInDomain(const std::string& domain) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  auto it = model_->latest_in_domain.find(domain);
  if (it == model_->latest_in_domain.end()) return std::nullopt;
  auto b = model_->builds.find(it->second);
  if (b == model_->builds.end()) return std::nullopt;
  return b->second.record;
}

std::optional<DeployRecord> StateStore::Deployed(const std::string& domain) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  auto it = model_->deployed.find(domain);
  if (it == model_->deployed.end()) return std::nullopt;
  return it->second;
}

std::optional<DeployRecord> StateStore::LatestDeploy(const std::string& domain) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  auto it = model_->latest_deploy.find(domain);
  if (it == model_->latest_deploy.end()) return std::nullopt;
  return it->second;
}

std::vector<BuildRecord> StateStore::Builds(const std::string& domain, const std::string& candidate,
                                            size_t limit) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::vector<BuildRecord> out;
  auto it = model_->by_candidate.find({domain, candidate});
  if (it == model_->by_candidate.end()) return out;
  for (auto r = it->second.rbegin(); r != it->second.rend() && out.size() < limit; ++r) {
    out.push_back(model_->builds.at(r->second).record);
  }
  return out;
}

std::vector<std::string> StateStore::Candidates(const std::string& domain) const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::vector<std::string> out;
  for (auto it = model_->by_candidate.lower_bound({domain, std::string()});
       it != model_->by_candidate.end() && it->first.first == domain; ++it)
    if (!it->second.empty()) out.push_back(it->first.second);
  return out;
}

std::vector<std::string> StateStore::Domains() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::vector<std::string> out;
  for (const auto& [key, ids] : model_->by_candidate) {
    if (!ids.empty() && (out.empty() || out.back() != key.first)) out.push_back(key.first);
  }
  return out;
}

std::vector<BuildRecord> StateStore::AllBuilds() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::vector<std::pair<uint64_t, const BuildRecord*>> ordered;
  ordered.reserve(model_->builds.size());
  for (const auto& [id, b] : model_->builds) ordered.emplace_back(b.order, &b.record);
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<BuildRecord> out;
  out.reserve(ordered.size());
  for (const auto& [order, r] : ordered) out.push_back(*r);
  return out;
}

std::vector<BuildRecord> StateStore::ActiveBuilds() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  std::vector<BuildRecord> out;
  for (const auto& [id, b] : model_->builds) {
    if (!IsFinal(b.record.status)) out.push_back(b.record);
  }
  return out;
}

uint64_t StateStore::next_build_seq() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  return model_->next_seq;
}

size_t StateStore::build_count() const {
  std::shared_lock<std::shared_mutex> lock(model_mu_);
  return model_->builds.size();
}

uint64_t StateStore::journal_bytes() const {
  std::lock_guard<std::mutex> w(write_mu_);
  return journal_ ? journal_->size() : 0;
}

uint64_t StateStore::generation() const {
  std::lock_guard<std::mutex> w(write_mu_);
  return journal_ ? journal_->generation() : 0;
}

// --- the build-key cache ----------------------------------------------------------------
// One file per key, <keys_dir>/<key>.json: {"key", "image_ref", "digest", "built_by", "commit",
// "build_ms", "push_ms"} (the format since the cache left the journal; never changed).

Status StateStore::SaveBuildKey(const std::string& key, const BuildOutcome& o) const {
  if (!IsSha256Hex(key)) return Status::InvalidArgument("bad key");
  if (options_.keys_dir.empty()) return Status::FailedPrecondition("no build-key cache");
  std::error_code ec;
  std::filesystem::create_directories(options_.keys_dir, ec);
  json j = {{"key", key},          {"image_ref", o.image_ref},
            {"digest", o.digest},  {"built_by", o.built_by},
            {"commit", o.commit},  {"build_ms", o.build_ms},
            {"push_ms", o.push_ms}};
  return WriteFileAtomic(options_.keys_dir + "/" + key + ".json", DumpJson(j) + "\n", 0600);
}

std::optional<StateStore::BuildKeyFile> StateStore::ParseBuildKeyFile(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto str = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_number() ? it->get<int64_t>() : int64_t{0};
  };
  BuildKeyFile f;
  f.key = str("key");
  f.outcome.status = BuildStatus::kSucceeded;
  f.outcome.image_ref = str("image_ref");
  f.outcome.digest = str("digest");
  f.outcome.built_by = str("built_by");
  f.outcome.commit = str("commit");
  f.outcome.build_ms = num("build_ms");
  f.outcome.push_ms = num("push_ms");
  return f;
}

std::vector<std::pair<std::string, OutcomePtr>> StateStore::BuildKeys() const {
  namespace fs = std::filesystem;
  std::vector<std::tuple<fs::file_time_type, std::string, OutcomePtr>> found;
  if (options_.keys_dir.empty()) return {};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.keys_dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() != 69 || name.substr(64) != ".json") continue;
    std::string text;
    if (!ReadFile(e.path().string(), &text)) continue;
    auto file = ParseBuildKeyFile(text);
    if (!file || file->key != name.substr(0, 64) || !IsSha256Digest(file->outcome.digest)) continue;
    found.emplace_back(e.last_write_time(ec), file->key,
                       std::make_shared<BuildOutcome>(std::move(file->outcome)));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::vector<std::pair<std::string, OutcomePtr>> out;
  for (auto& [t, k, o] : found) out.emplace_back(k, o);
  return out;
}

}  // namespace kiln
