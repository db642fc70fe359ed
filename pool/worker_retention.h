// WorkerRetention (issue 20): which candidates a `kiln worker` evicts — its bare repository,
// workspace and build storage under <state_dir>/worker/domains/<d>/candidates/<c>/ — so that it
// keeps at most `max_candidates` overall and `max_candidates_per_domain` of each domain.
//
// Rules (worker_retention_test.cc): the least recently built go first; a candidate that is
// busy (a build or push running or waiting, or built and not pushed yet) is never evicted but
// counts; each domain is brought within its limit first (its own oldest), then the total
// (oldest overall). When busy candidates alone exceed a limit, nothing more can go and the
// worker is over it until they end.
//
// Why a count and not the byte budget of storage/gc_policy.h: a worker's unit of reuse is the
// whole candidate (one eviction turns it cold for placement; the scheduler stops seeing it
// advertised warm), and the worker has none of the leases GcPolicy weighs (deployed images,
// latest successful images, deploys): those live on the scheduler.
//
// Plain data and a function, no I/O: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct RetainedCandidate {
  std::string domain;
  std::string candidate;
  int64_t last_built_ms = 0;  // unix ms of its last build's end (or its directory's mtime)
  bool busy = false;
};

struct RetentionLimits {
  size_t max_candidates = 128;            // worker.max_candidates
  size_t max_candidates_per_domain = 64;  // worker.max_candidates_per_domain
};

/// The candidates to evict ("<domain>/<candidate>"), in eviction order.
std::vector<std::string> PlanEviction(std::vector<RetainedCandidate> kept,
                                      const RetentionLimits& limits);

}  // namespace kiln
