// The domain actor: one per domain. Routes the domain's tool calls to its candidate actors
// (spawned on first use, bounded in number), maps build ids to candidates, and keeps each
// candidate's summary for list_candidates. Protocol: actors/protocol.h.
#pragma once

#include <caf/fwd.hpp>

#include <memory>

namespace kiln {

struct DomainEnv;

caf::actor SpawnDomain(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                       caf::actor scheduler);

}  // namespace kiln
