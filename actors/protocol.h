// The actors' message protocol: atoms, message types and the typed interfaces of the
// scheduler, domain and candidate actors, and how long each request may take. The one
// CAF-facing header of the core; include it only from actor TUs.
//
// Interfaces (-> reply), checked by the compiler (caf::typed_actor):
//   SchedulerActor: (submit_atom, JobRequest, CandidateActor)      -> SubmitReply
//                   (finished_atom, key, BuildId, OutcomePtr)
//                   (cancel_atom, BuildId)
//                   (push_atom, registry, BuildId)                 -> granted_atom when granted
//                   (release_atom, registry, BuildId)              also leaves the line
//                   (reserve_atom, registry, BuildId)              -> bool: a place in line
//                       (issue 20); true: the lane was free and nobody in line, it is taken
//                       for the build now (issue 18: no separate blob stage)
//                   (position_atom, BuildId)                       -> int64 (-1: not queued)
//                   (stats_atom)                                   -> SchedulerStats
//   CandidateActor: (build_atom, BuildRequest, actor sink)         -> ToolResult
//                   (status_atom)                                  -> ToolResult
//                   (status_atom, BuildId)                         -> ToolResult (tasks/get)
//                   (lookup_atom, BuildId or "")                   -> ToolResult
//                       {build_id, candidate, commit, image, digest, order} of that build
//                       (or of the latest successful one); is_error when not deployable
//                   (log_atom, BuildId, offset, limit, tail)       -> ToolResult
//                   (cancel_atom, BuildId)                         -> ToolResult
//                   from the scheduler: (start_atom, BuildId, key), (waited_atom, BuildId,
//                   OutcomePtr) from its work phases: WorkDone; from the state writer:
//                   (journaled_atom, ticket) (shutdown_atom)
//   DomainActor:    (tool_atom, ToolCall, actor sink)              -> ToolResult
//                   (build_atom, BuildRequest, actor sink)         -> ToolResult  (CLI path)
//                   (summary_atom, CandidateSummary)               from its candidates
//                   (pushed_atom, std::vector<PushedRef>)          a push landed (issue 18)
//                   from its deploy worker: (deploy_prog_atom, deploy_id, line),
//                                           (deploy_done_atom, deploy_id, DeployResult)
//                   (journaled_atom, ticket), (shutdown_atom)
//   sink (the caller's bridge, an untyped caf::actor) <- candidate and domain:
//                   (progress_atom, ToolProgress), (started_atom, BuildId)
#pragma once

#include <algorithm>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "actors/candidate_builds.h"
#include "actors/on_push_policy.h"
#include "actors/scheduler_core.h"
#include "common/status.h"
#include "config/config.h"
#include "core/build_types.h"
#include "core/tool_backend.h"
#include "deploy/deployer.h"

namespace kiln {

using submit_atom = caf::atom_constant<caf::atom("k_submit")>;
using finished_atom = caf::atom_constant<caf::atom("k_finish")>;
using cancel_atom = caf::atom_constant<caf::atom("k_cancel")>;
using push_atom = caf::atom_constant<caf::atom("k_push")>;
using release_atom = caf::atom_constant<caf::atom("k_release")>;
using reserve_atom = caf::atom_constant<caf::atom("k_reserve")>;
using position_atom = caf::atom_constant<caf::atom("k_pos")>;
using stats_atom = caf::atom_constant<caf::atom("k_stats")>;
using start_atom = caf::atom_constant<caf::atom("k_start")>;
using waited_atom = caf::atom_constant<caf::atom("k_waited")>;
using tool_atom = caf::atom_constant<caf::atom("k_tool")>;
using build_atom = caf::atom_constant<caf::atom("k_build")>;
using summary_atom = caf::atom_constant<caf::atom("k_summary")>;
using status_atom = caf::atom_constant<caf::atom("k_status")>;
using log_atom = caf::atom_constant<caf::atom("k_log")>;
using progress_atom = caf::atom_constant<caf::atom("k_progress")>;
using started_atom = caf::atom_constant<caf::atom("k_started")>;
using granted_atom = caf::atom_constant<caf::atom("k_granted")>;
using shutdown_atom = caf::atom_constant<caf::atom("k_shutdown")>;
using lookup_atom = caf::atom_constant<caf::atom("k_lookup")>;
using deploy_done_atom = caf::atom_constant<caf::atom("k_depdone")>;
using deploy_prog_atom = caf::atom_constant<caf::atom("k_depprog")>;
// (journaled_atom, uint64_t ticket): the state writer made a record durable; answers that
// waited for it may now be sent (write-ahead: nothing is acknowledged before it is on disk).
using journaled_atom = caf::atom_constant<caf::atom("k_journal")>;
// Issue 18: (pushed_atom, std::vector<PushedRef>) to a domain: a push landed; build on push.
using pushed_atom = caf::atom_constant<caf::atom("k_pushed")>;

struct SubmitReply {
  SchedulerCore::SubmitKind kind = SchedulerCore::SubmitKind::kQueued;
  OutcomePtr cached;
  BuildId owner;
  int64_t position = -1;
};

struct SchedulerStats {
  size_t running = 0;
  size_t queued = 0;
  size_t cache_entries = 0;
  uint64_t cache_hits = 0;
  uint64_t deduplicated = 0;
  std::map<std::string, size_t> queue_depth;  // per domain
};

// --- typed interfaces ---------------------------------------------------------------------

using CandidateActor = caf::typed_actor<
    caf::replies_to<build_atom, BuildRequest, caf::actor>::with<ToolResult>,
    caf::replies_to<status_atom>::with<ToolResult>,
    caf::replies_to<status_atom, BuildId>::with<ToolResult>,
    caf::replies_to<lookup_atom, BuildId>::with<ToolResult>,
    caf::replies_to<log_atom, BuildId, uint64_t, uint64_t, uint64_t>::with<ToolResult>,
    caf::replies_to<cancel_atom, BuildId>::with<ToolResult>,
    caf::reacts_to<start_atom, BuildId, std::string>,
    caf::reacts_to<waited_atom, BuildId, OutcomePtr>, caf::reacts_to<WorkDone>,
    caf::reacts_to<journaled_atom, uint64_t>, caf::reacts_to<shutdown_atom>>;

using SchedulerActor =
    caf::typed_actor<caf::replies_to<submit_atom, JobRequest, CandidateActor>::with<SubmitReply>,
                     caf::reacts_to<finished_atom, std::string, BuildId, OutcomePtr>,
                     caf::reacts_to<cancel_atom, BuildId>,
                     caf::replies_to<push_atom, std::string, BuildId>::with<granted_atom>,
                     caf::reacts_to<release_atom, std::string, BuildId>,
                     caf::replies_to<reserve_atom, std::string, BuildId>::with<bool>,
                     caf::replies_to<position_atom, BuildId>::with<int64_t>,
                     caf::replies_to<stats_atom>::with<SchedulerStats>>;

using DomainActor =
    caf::typed_actor<caf::replies_to<tool_atom, ToolCall, caf::actor>::with<ToolResult>,
                     caf::replies_to<build_atom, BuildRequest, caf::actor>::with<ToolResult>,
                     caf::reacts_to<summary_atom, CandidateSummary>,
                     caf::reacts_to<pushed_atom, std::vector<PushedRef>>,
                     caf::reacts_to<deploy_prog_atom, std::string, std::string>,
                     caf::reacts_to<deploy_done_atom, std::string, DeployResult>,
                     caf::reacts_to<journaled_atom, uint64_t>, caf::reacts_to<shutdown_atom>>;

// --- request timeouts (no request waits forever) ------------------------------------------

/// Requests answered from an actor's memory (scheduler submit/position/stats/push release,
/// a candidate's status, lookup or log).
constexpr std::chrono::seconds kQuickReply{30};
/// The scheduler's queue position inside a status answer (the status answers without it).
constexpr std::chrono::seconds kPositionReply{5};
/// What a build may take beyond build.timeout_s: its push (which counts against the same
/// deadline, issue 19), the journal write of its end, and scheduling slack.
constexpr std::chrono::seconds kBuildMargin{300};
/// How long a push lane may be waited for: until the build's deadline plus this margin (a
/// push started after the deadline fails on it anyway).
constexpr std::chrono::seconds kLaneMargin{60};

/// How long a waiting build may sit in the scheduler's queue before its own timeout_s starts.
constexpr std::chrono::seconds kQueueAllowance{1800};

/// What a deploy may take (it may also wait for the domain's running deploy, which a newer
/// one cancels): Kubernetes by its rollout timeout, a local sandbox by its start timeout
/// (seconds), plus this margin.
constexpr std::chrono::seconds kDeployBudget{300};

/// The one deadline of a call that waits for a build of domain `dc` (build_candidate with
/// wait through the MCP transport actor, `kiln build`): time in the queue, the build's
/// timeout_s, then its push and journal. A call waiting longer gets a clear timeout error.
inline std::chrono::seconds BuildCallTimeout(const DomainConfig& dc) {
  return kQueueAllowance + std::chrono::seconds(dc.build.timeout_s) + kBuildMargin;
}

/// The one deadline of a call that waits for a deploy of domain `dc` (deploy_candidate with
/// wait, apply).
inline std::chrono::seconds DeployCallTimeout(const DomainConfig& dc) {
  std::chrono::seconds deploy = kDeployBudget;
  if (dc.deploy.kubernetes) deploy += std::chrono::seconds(dc.deploy.kubernetes->rollout_timeout_s);
  return deploy + kBuildMargin;
}

/// Registers the protocol's inspectable message types (readable deep_to_string, and required
/// for serialization). The rest stay CAF_ALLOW_UNSAFE_MESSAGE_TYPE below, with the reason.
void AddMessageTypes(caf::actor_system_config& cfg);

// Inspectable message types (CAF 0.17 inspect signature).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JobRequest& x) {
  return f(caf::meta::type_name("kiln::JobRequest"), x.id, x.domain, x.candidate, x.key);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SchedulerStats& x) {
  return f(caf::meta::type_name("kiln::SchedulerStats"), x.running, x.queued, x.cache_entries,
           x.cache_hits, x.deduplicated, x.queue_depth);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PushedRef& x) {
  return f(caf::meta::type_name("kiln::PushedRef"), x.ref, x.commit);
}

}  // namespace kiln

// Not inspectable in CAF 0.17 (its inspectors know neither std::optional, nlohmann::json nor
// shared_ptr), so allowed unsafe (local messages only; these never cross the pool's remote
// transport): std::optional fields (BuildRequest, ToolProgress, DeployResult's
// DeployFailureDetails), nlohmann::json payloads (ToolCall, ToolResult, CandidateSummary),
// shared_ptr payloads (OutcomePtr, SubmitReply), a Status (WorkDone: private fields).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::BuildRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::SubmitReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::OutcomePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolProgress)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::CandidateSummary)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::WorkDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::DeployResult)
