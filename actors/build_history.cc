#include "actors/build_history.h"

#include <algorithm>
#include <memory>

#include "builder/log_buffer.h"

namespace kiln {

size_t HistoryPerCandidate(size_t per_candidate, size_t per_domain, size_t candidates) {
  if (per_domain == 0 || candidates == 0) return per_candidate;
  const size_t share = std::max(kMinHistoryPerCandidate, per_domain / candidates);
  return std::min(per_candidate, share);
}

size_t FullLogsPerCandidate(size_t candidates) {
  if (candidates == 0) return kFullLogsPerCandidate;
  return std::clamp<size_t>(kFullLogsPerDomain / candidates, 1, kFullLogsPerCandidate);
}

BuildSnapshot SnapshotOfRecord(const BuildRecord& b, const std::string& remote) {
  BuildSnapshot s;
  s.id = b.id;
  s.candidate = b.candidate;
  s.remote = remote;
  s.commit = b.commit;
  s.status = b.status;
  s.cache_hit = b.cache_hit;
  s.timings = b.timings;
  s.error = b.error;
  s.error_kind = b.error_kind;
  auto o = std::make_shared<BuildOutcome>();
  o->status = b.status;
  o->image_ref = b.image_ref;
  o->digest = b.digest;
  o->diagnostics = b.diagnostics;
  o->error = b.error;
  o->error_kind = b.error_kind;
  o->built_by = b.id;
  o->commit = b.commit;
  s.outcome = o;
  return s;
}

std::optional<BuildRecord> JournalRecordOf(const std::optional<BuildRecord>& b,
                                           const std::string& domain) {
  if (!b || b->domain != domain) return std::nullopt;
  return b;
}

ToolResult JournalResult(const BuildRecord& b, const std::string& remote) {
  BuildSnapshot s = SnapshotOfRecord(b, remote);
  ToolResult r{BuildJson(s), s.status != BuildStatus::kSucceeded && IsFinal(s.status)};
  r.structured["from_journal"] = true;
  return r;
}

ToolResult JournalLog(const BuildRecord& b, uint64_t offset, uint64_t limit, uint64_t tail) {
  LogBuffer log(64 << 10);
  if (IsFinal(b.status) && !b.error.empty()) log.Append("kiln: " + b.error + "\n");
  log.Append(
      "kiln: the log of this build is no longer kept (kiln keeps the logs of each candidate's "
      "newest builds); its status, diagnostics and reason are in build_result\n");
  log.Close();
  if (tail > 0) {
    const size_t size = log.size();
    offset = size > tail ? size - tail : 0;
    limit = tail;
  }
  nlohmann::json j = LogChunkJson(b.id, log.Read(offset, limit));
  j["from_journal"] = true;
  return {j, false};
}

ToolResult JournalLookup(const BuildRecord& b, const std::string& candidate,
                         const std::string& remote) {
  if (b.candidate != candidate)
    return {ErrorJson("build " + b.id + " belongs to candidate '" + b.candidate + "', not '" +
                      candidate + "'"),
            true};
  if (b.status != BuildStatus::kSucceeded || b.digest.empty())
    return {ErrorJson("build '" + b.id + "' is " + StatusWireName(b.status) +
                      "; only a succeeded build can be deployed"),
            true};
  return {DeployableJson(SnapshotOfRecord(b, remote), b.started_at_ms * 1000000), false};
}

ToolResult JournalCancel(const BuildRecord& b) {
  nlohmann::json j = {{"build_id", b.id}, {"status", StatusWireName(b.status)}};
  j["note"] = IsFinal(b.status) ? "build had already finished" : "build is no longer running";
  return {j, false};
}

}  // namespace kiln
