// The domain actor: one per domain. Glue between CAF and the domain's pure core
// (actors/domain_core.h: the tool routing table and argument parsing, build owners, summaries
// and success order, deploy results from the journal after a restart,
// the apply choice, deploy admission and bookkeeping). It spawns the domain's candidate
// actors (on first use, bounded in number), delegates build requests to them, runs deploys on
// BlockingWork threads and carries out the core's effects. Interface: DomainActor in
// actors/protocol.h.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

#include "actors/protocol.h"

namespace kiln {

struct DomainEnv;

DomainActor SpawnDomain(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                        SchedulerActor scheduler);

}  // namespace kiln
