// The scheduler actor: one per process. Glue around SchedulerCore (slots, fair admission,
// dedup, cache) and PushLanes (one push at a time per registry). Interface: SchedulerActor in
// actors/protocol.h.
#pragma once

#include <caf/fwd.hpp>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/protocol.h"
#include "core/build_types.h"

namespace kiln {

class BuildMetrics;

/// `weights`: domain -> weight. `metrics` may be null.
/// `known` seeds the build-key cache (StateStore::BuildKeys, loaded at start).
/// `slots`: domain -> the most builds it may run at once (absent: only `max_parallel`).
SchedulerActor SpawnScheduler(caf::actor_system& sys, size_t max_parallel,
                              std::map<std::string, int> weights,
                              std::shared_ptr<BuildMetrics> metrics,
                              std::vector<std::pair<std::string, OutcomePtr>> known = {},
                              std::map<std::string, size_t> slots = {});

}  // namespace kiln
