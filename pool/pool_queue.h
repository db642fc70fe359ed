// PoolQueue: the scheduler's dispatch of queued builds onto a pool of workers — FairQueue
// (fair order across domains) + Placement (which worker) + a short parked queue per worker for
// builds that wait for their preferred (warm) worker.
//
// Pure state, no I/O, no CAF, no clock (callers pass `now` in seconds). Not thread-safe: owned
// by the scheduler (or the simulation).
//
// Dispatch(now), called after every change (submit, finish, worker join/leave, time passing):
//   1. a worker with a free slot takes its parked builds first (FIFO);
//   2. each parked build is placed again: it spills when waiting now costs more than the
//      build elsewhere (Placement::Place: warm on a worker advertising it, else cold);
//   3. while some worker has a free slot, the next build in fair order is placed: it starts on
//      its preferred worker, spills, or parks on its preferred worker. A worker's parked queue
//      holds at most `park_limit` builds; the next one that would park there takes the best-ranked
//      free worker instead (warm first) (so a hot candidate set cannot build an unbounded local
//      queue).
// Builds popped from the FairQueue count as admitted for their domain until Finished.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/fair_queue.h"
#include "pool/placement.h"

namespace kiln {

class PoolQueue {
 public:
  struct Options {
    Placement::Options placement;
    size_t park_limit = 2;  // parked builds per worker
  };
  PoolQueue(Options opts, BuildTimes times)
      : opts_(opts), placement_(opts.placement), times_(times) {}

  Placement& placement() { return placement_; }
  const Placement& placement() const { return placement_; }
  BuildTimes& times() { return times_; }
  FairQueue& fair_queue() { return queue_; }

  /// Queues build `id` of `candidate` (in `domain`). Ids must be unique among queued and
  /// running builds; a duplicate is ignored and returns false.
  bool Submit(const std::string& id, const std::string& domain, const std::string& candidate);

  struct Start {
    std::string id, domain, candidate, worker;
    Placement::Kind how;  // kPreferred or kSpill (parked builds start as kPreferred)
  };
  /// Starts what can start now (see above); the caller runs each Start on its worker.
  std::vector<Start> Dispatch(double now);

  /// Build `id` ended on its worker (any outcome). `seconds` (>= 0) is recorded as a warm or cold
  /// time. Returns false for an unknown or not running build.
  bool Finished(const std::string& id, double now, bool warm, double seconds);

  /// A worker was lost: its running and parked builds go back to the front of their domains'
  /// queues (each is retried once by the caller's policy); returns their ids.
  std::vector<std::string> WorkerLost(const std::string& worker);

  size_t parked() const;
  size_t queued() const { return queue_.size(); }
  size_t running() const { return running_.size(); }

 private:
  struct Build {
    std::string domain, candidate, worker;
  };
  void StartOn(const std::string& id, const Build& b, const std::string& worker,
               Placement::Kind how, double now, std::vector<Start>* out);
  double Expected(const std::string& worker, const std::string& candidate) const;

  const Options opts_;
  Placement placement_;
  BuildTimes times_;
  FairQueue queue_;
  std::map<std::string, Build> pending_;                   // queued in queue_ or parked
  std::map<std::string, std::deque<std::string>> parked_;  // worker -> ids
  std::map<std::string, Build> running_;
};

}  // namespace kiln
