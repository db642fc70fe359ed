// The candidate actor: one per (domain, candidate). Glue between CAF and the candidate's pure
// core (actors/candidate_builds.h, which owns the build records and decides every
// transition): it receives a message, calls the core, and carries out the effects the core
// returns (journal writes and answers, progress, scheduler messages, work phases on
// BlockingWork threads — actors/candidate_work.h — that report back with WorkDone). The
// actor itself never blocks. Interface: CandidateActor in actors/protocol.h.
#pragma once

#include <caf/fwd.hpp>
#include <memory>
#include <string>

#include "actors/protocol.h"

namespace kiln {

struct DomainEnv;

/// Spawns the actor for `candidate` (a validated name). `scheduler` and `domain` must be live.
CandidateActor SpawnCandidate(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                              std::string candidate, SchedulerActor scheduler, DomainActor domain);

}  // namespace kiln
