// Build history that levels off (issue 19): how many build records each candidate keeps in
// memory when the candidates of a domain share one bound, and the answers about a build the
// candidate no longer holds, rendered from its journal record (state/state_store.h).
//
//   - HistoryPerCandidate: min(per_candidate, max(kMinHistoryPerCandidate, per_domain / n)) for
//     n candidates: a domain keeps at most max(per_domain, kMinHistoryPerCandidate * n) records
//     (n is bounded by the domain's max_candidates); FullLogsPerCandidate likewise bounds the
//     whole logs kept per domain (older finished builds keep only their log's tail).
//   - DomainHistoryBudget: the live count of a domain's candidates, shared by its candidate
//     actors (thread-safe); each candidate trims to the current share after every build end.
//   - Journal*: build_result / build_log / the deploy lookup / cancel of a build that left the
//     memory: its status, commit, image, diagnostics and reason come from the journal record;
//     its log is gone (a note says so, with the reason as the first line, like a live log).
//     Only a record of the asking domain (and, for a candidate's lookup, of that candidate) is
//     answered: another domain's build id stays "not found".
//
// Plain functions, no CAF, no I/O (the record is looked up by the caller).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "actors/tool_views.h"
#include "core/tool_backend.h"
#include "state/state_store.h"

namespace kiln {

constexpr size_t kMinHistoryPerCandidate = 4;
constexpr size_t kDefaultHistoryPerDomain = 400;
constexpr size_t kFullLogsPerCandidate = 4;
constexpr size_t kFullLogsPerDomain = 32;

/// Records one of `candidates` candidates keeps (see the file comment); per_domain 0: no bound.
size_t HistoryPerCandidate(size_t per_candidate, size_t per_domain, size_t candidates);
/// Whole logs one of `candidates` candidates keeps: 1..kFullLogsPerCandidate.
size_t FullLogsPerCandidate(size_t candidates);

class DomainHistoryBudget {
 public:
  DomainHistoryBudget(size_t per_candidate, size_t per_domain)
      : per_candidate_(per_candidate), per_domain_(per_domain) {}
  /// One more candidate actor of the domain.
  void Join() { candidates_.fetch_add(1); }
  size_t candidates() const { return candidates_.load(); }
  size_t PerCandidate() const {
    return HistoryPerCandidate(per_candidate_, per_domain_, candidates());
  }
  size_t FullLogs() const { return FullLogsPerCandidate(candidates()); }

 private:
  const size_t per_candidate_;
  const size_t per_domain_;
  std::atomic<size_t> candidates_{0};
};

/// The snapshot of a journaled build (as CandidateBuilds restores it); `remote`: the domain's
/// git remote.
BuildSnapshot SnapshotOfRecord(const BuildRecord& b, const std::string& remote);

/// The record when it is `domain`'s build (nullopt otherwise: never another domain's).
std::optional<BuildRecord> JournalRecordOf(const std::optional<BuildRecord>& b,
                                           const std::string& domain);

/// build_result (tasks/get) of a build only the journal still has.
ToolResult JournalResult(const BuildRecord& b, const std::string& remote);
/// build_log of a build only the journal still has: a note that its log is no longer kept and
/// its reason (a final, failed build), read with the same offset/limit/tail rules as a live log.
ToolResult JournalLog(const BuildRecord& b, uint64_t offset, uint64_t limit, uint64_t tail);
/// The deploy lookup of a build only the journal still has (as CandidateBuilds::Lookup).
ToolResult JournalLookup(const BuildRecord& b, const std::string& candidate,
                         const std::string& remote);
/// cancel_build of a build only the journal still has (it ended long ago).
ToolResult JournalCancel(const BuildRecord& b);

}  // namespace kiln
