// WorkerSim: a deterministic discrete-event simulation of the scheduler + worker pool
// (issue 20, docs/benchmarks.md "Worker pool simulation").
//
// Pure: a simulated clock, no threads, no I/O; the same config and seed give the same result.
// Model: `candidates` candidates spread evenly over `domains` domains; every fifth domain is
// "hot" (its agents think 4x less between builds). Each candidate is a closed loop, like an agent:
// think (exponential) → submit a build → wait for its end → think again. A worker holds the
// last `warm_per_worker` candidates it built (LRU): a build of one of those is warm, else
// cold. Build times are lognormal with the configured means (defaults from docs/benchmarks.md:
// warm ≈ one-function change, cold ≈ fresh state_dir). Think times are set so that the offered
// load is `utilization` of all slots at a 90 % hit rate; the measured utilization is reported.
// Agents start over a ramp (each candidate's first build is cold; the ramp keeps those cold
// builds under half the pool). The first `warmup` builds (every candidate's first build is cold)
// are run but not measured: the figures are of the steady state after them. Halfway through, one
// worker leaves and a new one joins (churn), and the share of candidates whose worker changed is
// reported.
//
// Strategies: kAffinity (PoolQueue: FairQueue + Placement with spill), kRandom (fair queue, a
// uniformly random free worker), kContextHash (fair queue, the worker is hash(context path) mod
// workers, as BuildKit's Kubernetes driver does; all candidates of a domain build from the
// domain's repository path, so they share it; a busy worker queues locally without limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

enum class SimStrategy { kAffinity, kRandom, kContextHash };
const char* SimStrategyName(SimStrategy s);

struct SimConfig {
  SimStrategy strategy = SimStrategy::kAffinity;
  size_t workers = 100;
  size_t slots = 2;
  size_t domains = 50;
  size_t candidates = 2000;
  size_t builds = 40000;        // builds submitted in all (then the pool drains)
  size_t warmup = 10000;        // of which the first ones are not measured
  size_t warm_per_worker = 64;  // candidates a worker holds warm (LRU)
  double utilization = 0.7;     // offered load (see above)
  double warm_mean_s = 10, cold_mean_s = 40, sigma = 0.35;  // lognormal build times
  double min_idle_s = 5;                                    // Placement::Options::min_idle_s
  bool churn = true;
  uint64_t seed = 1;
};

struct SimResult {
  size_t submitted = 0, finished = 0, measured = 0, warm = 0, retried = 0;
  size_t spilled = 0;   // measured builds that ran off their preferred worker
  double hit_rate = 0;  // warm / measured
  double wait_p50_s = 0, wait_p99_s = 0, wait_mean_s = 0;
  double build_mean_s = 0;   // mean measured build time
  double utilization = 0;    // busy slot-seconds / (slots x measured span)
  double jain = 0;           // Jain's index over domains of mean stretch (wait+build)/build
  double churn_moved = 0;    // share of candidates whose worker changed at the churn
  size_t overcommitted = 0;  // starts on a worker with no free slot (must be 0)
  size_t max_parked = 0;     // largest number of builds parked/queued at workers
  double span_s = 0;
};

SimResult RunSim(const SimConfig& cfg);

/// Jain's fairness index (sum x)^2 / (n * sum x^2) of non-negative values; 1 for an empty list.
double JainIndex(const std::vector<double>& x);

}  // namespace kiln
