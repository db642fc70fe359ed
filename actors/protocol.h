// The actors' message protocol: atoms and message types of the scheduler, domain and
// candidate actors. The one CAF-facing header of the core; include it only from actor TUs.
//
// Messages (-> reply):
//   scheduler:  (submit_atom, JobRequest, actor candidate)       -> SubmitReply
//               (finished_atom, key, BuildId, OutcomePtr)
//               (cancel_atom, BuildId)
//               (push_atom, registry, BuildId)                     -> ok_atom when granted
//               (release_atom, registry, BuildId)
//               (position_atom, BuildId)                           -> int64 (-1: not queued)
//               (stats_atom)                                       -> SchedulerStats
//   candidate <- scheduler: (start_atom, BuildId, key), (waited_atom, BuildId, OutcomePtr)
//   domain:     (tool_atom, ToolCall, actor sink)                  -> ToolResult
//               (build_atom, BuildRequest, actor sink)             -> ToolResult  (CLI path)
//               (summary_atom, CandidateSummary)                   from its candidates
//               (pushed_atom, std::vector<PushedRef>)              a push landed (issue 18)
//   candidate:  (build_atom, BuildRequest, actor sink)             -> ToolResult
//               (status_atom)                                      -> ToolResult
//               (lookup_atom, BuildId or "")                       -> ToolResult
//                   {build_id, candidate, commit, image, digest, order} of that build
//                   (or of the latest successful one); is_error when not deployable
//   domain <- deploy worker: (deploy_prog_atom, deploy_id, line),
//                            (deploy_done_atom, deploy_id, DeployResult)
//               (log_atom, BuildId, offset, limit, tail)           -> ToolResult
//               (cancel_atom, BuildId)                             -> ToolResult
//   sink (the caller's bridge) <- candidate:
//               (progress_atom, ToolProgress), (started_atom, BuildId)
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/build_types.h"
#include "actors/on_push_policy.h"
#include "actors/scheduler_core.h"
#include "common/status.h"
#include "deploy/deployer.h"
#include "core/tool_backend.h"

namespace kiln {

using submit_atom = caf::atom_constant<caf::atom("k_submit")>;
using finished_atom = caf::atom_constant<caf::atom("k_finish")>;
using cancel_atom = caf::atom_constant<caf::atom("k_cancel")>;
using push_atom = caf::atom_constant<caf::atom("k_push")>;
using release_atom = caf::atom_constant<caf::atom("k_release")>;
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

/// What the domain actor keeps about each candidate for list_candidates.
struct CandidateSummary {
  std::string candidate;
  nlohmann::json json;  // {"candidate", "state", "latest_build": {...} | null, ...}
};

/// Results of a worker thread, sent back to the candidate actor.
struct WorkDone {
  BuildId id;
  std::string phase;  // "resolve", "build", "push"
  Status status;
  bool compile_failed = false;
  std::string failure_kind;              // the builder's own classification, "" when none
  std::string commit, tree, source_id;   // resolve
  std::string image_id;                  // build
  std::vector<Diagnostic> diagnostics;   // build
  std::string digest, ref;               // push
  int64_t elapsed_ms = 0;
  std::map<std::string, int64_t> parts;  // build: per-part timings (issue 18)
};

}  // namespace kiln

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::BuildRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::JobRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::SubmitReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::SchedulerStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::OutcomePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::ToolProgress)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::CandidateSummary)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::WorkDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::DeployResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kiln::PushedRef>)
