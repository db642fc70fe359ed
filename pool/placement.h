// Placement: which worker of the pool runs a candidate's build.
//
// Pure state, no I/O, no CAF, no clock (callers pass `now` in seconds on any monotonic clock).
// Not thread-safe: owned by the scheduler (or the simulation), like SchedulerCore.
//
// Policy (docs/architecture.md, "Worker pool"):
// - Affinity: each candidate prefers one worker: the ready workers holding it warm (SetWarm)
//   come first, each group in weighted rendezvous order of (worker id, candidate), weighted by
//   slots. The candidate's warm workspace, compiler cache and base store live there. So a
//   worker joining takes new candidates (those it scores highest for, about slots/total of
//   them) while candidates already warm elsewhere stay (issue 20); a worker leaving, or
//   evicting a candidate (no longer advertised warm), gives away only those candidates, each
//   to its next-ranked worker. Nothing else moves.
// - Spill: when the preferred worker has no free slot, the build waits for it unless waiting
//   is expected to cost more than a cold build elsewhere: expected wait (the earliest expected
//   end of the preferred worker's running builds, from the measured warm/cold means of
//   BuildTimes; an overdue build is expected to need a quarter of a warm build more; a build
//   `ahead` places back in the worker's line waits for later ends) + a warm build > the build
//   on the target: warm there when the target advertises the candidate warm (SetWarm), else
//   cold. The target must have had a free slot for at least `min_idle_s` (its own candidates
//   have left it under-used that long). Targets holding the candidate warm come first, then
//   rank order, so repeated spills of one candidate land on the same second worker (which
//   then becomes warm for it too).
// - Fairness across domains is not decided here: the scheduler's FairQueue orders the builds;
//   Placement only answers where the next one goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln {

/// Measured build durations, warm (the worker held the candidate) and cold. Means are
/// exponentially weighted (alpha 0.2) after a seed value; nothing measured yet → the seeds.
class BuildTimes {
 public:
  BuildTimes(double warm_seed_s, double cold_seed_s) : warm_(warm_seed_s), cold_(cold_seed_s) {}
  /// Records one finished build of `seconds` (ignored when negative).
  void Record(bool warm, double seconds);
  double warm() const { return warm_; }
  double cold() const { return cold_; }

 private:
  double warm_, cold_;
};

/// 64-bit score of (worker, candidate) for rendezvous hashing: stable across processes and
/// builds (FNV-1a over both strings, then a splitmix64 finalizer).
uint64_t RendezvousHash(const std::string& worker, const std::string& candidate);

class Placement {
 public:
  struct Options {
    double min_idle_s = 0;  // a spill target must have had a free slot this long
    bool allow_spill = true;
  };
  explicit Placement(Options opts) : opts_(opts) {}
  Placement() : Placement(Options{}) {}

  /// Adds a worker (or updates its slots); it is ready. `now` starts its free-slot time.
  /// slots == 0 is treated as 1.
  void AddWorker(const std::string& id, size_t slots, double now);
  /// Removes a worker; its running builds are forgotten (the caller retries them).
  void RemoveWorker(const std::string& id);
  /// A not-ready worker keeps its running builds but takes no new ones and owns no candidates.
  void SetReady(const std::string& id, bool ready, double now);

  /// Ready workers of `candidate`, most preferred first (warm ones first, rendezvous order).
  std::vector<std::string> Ranking(const std::string& candidate) const;
  /// The preferred ready worker; nullopt when no worker is ready.
  std::optional<std::string> Preferred(const std::string& candidate) const;

  enum class Kind { kPreferred, kSpill, kWait, kNoWorker };
  struct Decision {
    Kind kind = Kind::kNoWorker;
    std::string worker;          // kPreferred/kSpill: where to run; kWait: whose slot to wait for
    double expected_wait_s = 0;  // kWait/kSpill: expected wait for the preferred worker
  };
  /// Where `candidate`'s next build should go at `now`; `ahead` builds already wait for the
  /// preferred worker before this one. Does not change state: call Started.
  Decision Place(const std::string& candidate, const BuildTimes& times, double now,
                 size_t ahead = 0) const;
  /// The best worker with a free slot for `candidate` now (one holding it warm first, then rank
  /// order), ignoring cost; nullopt when every ready worker is full.
  std::optional<std::string> BestFree(const std::string& candidate) const;

  /// The worker advertises (or stops advertising) `candidate` as warm. Unknown workers: ignored.
  void SetWarm(const std::string& worker, const std::string& candidate, bool warm);
  bool IsWarm(const std::string& worker, const std::string& candidate) const;
  /// Replaces what `worker` advertises warm (its answer after a build: it may have evicted
  /// candidates). Unknown workers: ignored.
  void SetWarmSet(const std::string& worker, const std::set<std::string>& warm);

  /// A build of `candidate` started on `worker` at `now`, expected to take `expected_s`.
  /// Returns false (and changes nothing) for an unknown worker.
  bool Started(const std::string& worker, const std::string& candidate, double now,
               double expected_s);
  /// That build ended. Returns false when it was not running there.
  bool Finished(const std::string& worker, const std::string& candidate, double now);

  size_t FreeSlots(const std::string& worker) const;
  /// Free slots over all ready workers.
  size_t TotalFreeSlots() const;
  size_t ready_workers() const;
  size_t workers() const { return workers_.size(); }
  /// Every known worker (ready or not), sorted.
  std::vector<std::string> WorkerIds() const;

 private:
  struct Worker {
    size_t slots = 1;
    bool ready = true;
    double free_since = 0;  // since when it has had a free slot (valid while it has one)
    std::multimap<std::string, double> running;  // candidate -> expected end
    std::set<std::string> warm;                  // advertised warm candidates
  };
  bool Free(const Worker& w, double now) const;
  double Score(const std::string& worker, size_t slots, const std::string& candidate) const;
  double ExpectedWait(const Worker& w, const BuildTimes& times, double now, size_t ahead) const;
  const std::vector<std::string>& CachedRanking(const std::string& candidate) const;

  const Options opts_;
  std::map<std::string, Worker> workers_;
  // Rankings by candidate, valid until the ready set changes (then cleared).
  mutable std::unordered_map<std::string, std::vector<std::string>> rank_cache_;
};

}  // namespace kiln
