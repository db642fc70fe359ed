// The candidate actor: one per (domain, candidate). Owns the candidate's workspace directory,
// its builder storage, its build state machine (queued -> resolving -> building -> pushing ->
// succeeded | failed | cancelled) and its build history. At most one build of a candidate is
// active: a newer request supersedes the older one, whose callers get `cancelled`.
//
// Blocking work (git, buildah) runs on BlockingWork threads that report back with WorkDone
// messages; the actor itself never blocks. Protocol: actors/protocol.h.
#pragma once

#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace kiln {

struct DomainEnv;

/// Spawns the actor for `candidate` (a validated name). `scheduler` and `domain` must be live.
caf::actor SpawnCandidate(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                          std::string candidate, caf::actor scheduler, caf::actor domain);

}  // namespace kiln
