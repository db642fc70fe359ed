// Tool argument parsing and result rendering: pure functions between the MCP tools' JSON and
// kiln's plain types. Every agent-supplied value is validated here, with a clear message.
// Thread-safe (no state).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "builder/log_buffer.h"
#include "common/status.h"
#include "core/build_types.h"
#include "core/tool_backend.h"

namespace kiln {

/// A point-in-time view of one build, rendered as the build_candidate result.
struct BuildSnapshot {
  BuildId id;
  std::string candidate;
  std::string commit;
  BuildStatus status = BuildStatus::kQueued;
  bool cache_hit = false;
  bool deduplicated = false;
  OutcomePtr outcome;      // set when final (except for early failures)
  std::string error;       // failure reason when no outcome carries it
  std::string error_kind;  // its kind (actors/build_failure.h)
  std::string log_tail;
  std::optional<int64_t> queue_position;
  BuildTimings timings;
  // --- issue 18: build on push ---
  bool started_on_push = false;      // kiln started it when the push landed
  bool joined = false;               // this caller joined a build already in progress/done
  std::optional<int64_t> waited_ms;  // this caller's call -> answer; null: nobody asked yet
  // --- end issue 18 ---
  std::string remote;  // issue 16: the domain's git remote, for not_pushed's next_step
};

/// build_candidate arguments: candidate (required), ref?, commit?, wait? (bool).
/// Returns InvalidArgument naming the offending field.
Status ParseBuildArgs(const nlohmann::json& args, BuildRequest* out);
/// deploy_candidate arguments: candidate (required), build_id?, wait? (default true).
struct DeployArgs {
  std::string candidate;
  std::optional<std::string> build_id;
  bool wait = true;
};
Status ParseDeployArgs(const nlohmann::json& args, DeployArgs* out);
/// The operator's apply (internal tool "apply", /v1 only): candidate? .
Status ParseApplyArgs(const nlohmann::json& args, std::optional<std::string>* candidate);
/// candidate_status arguments: candidate.
Status ParseCandidateArg(const nlohmann::json& args, std::string* candidate);
/// build_log / cancel_build: build_id (and offset >= 0, 1 <= limit <= 1 MiB, default 64 KiB).
Status ParseBuildIdArg(const nlohmann::json& args, std::string* build_id);
/// build_result (issue 17, MCP tasks/get): build_id, and the task's candidate when it names
/// one (a non-string candidate is ignored; *candidate is "" then). ParseBuildIdArg's errors.
Status ParseBuildResultArgs(const nlohmann::json& args, std::string* candidate,
                            std::string* build_id);
/// deploy_result / cancel_deploy (issue 17): deploy_id (string). InvalidArgument
/// "<tool> needs deploy_id (string)" otherwise.
Status ParseDeployIdArg(const std::string& tool, const nlohmann::json& args,
                        std::string* deploy_id);
/// list_candidates: no arguments (an empty object). InvalidArgument otherwise.
Status ParseNoArgs(const std::string& tool, const nlohmann::json& args);
Status ParseLogArgs(const nlohmann::json& args, std::string* build_id, size_t* offset,
                    size_t* limit);
/// Issue 16: also `tail` (1..1 MiB: the last `tail` bytes; not with offset/limit). *tail is 0
/// when not given.
Status ParseLogArgs(const nlohmann::json& args, std::string* build_id, size_t* offset,
                    size_t* limit, size_t* tail);
/// Build ids look like "b-" + 16 lowercase hex.
bool IsValidBuildId(const std::string& id);

/// The build_candidate / candidate_status view of a build. Every string in it is valid UTF-8
/// (ill-formed bytes from the build are replaced by U+FFFD), so it always serialises.
nlohmann::json BuildJson(const BuildSnapshot& b);
/// The summary a candidate sends its domain after every transition (list_candidates):
/// {candidate, state, latest_build: {build_id, status, commit} | null,
///  latest_successful_build: {build_id, commit, image, digest, order} | null}.
nlohmann::json CandidateSummaryJson(const std::string& candidate, const BuildSnapshot* latest,
                                    const BuildSnapshot* latest_success, int64_t success_order);
/// candidate_status: {candidate, state, latest_build, latest_successful_build (both as
/// build_candidate renders them, or null), deployed_build: null, queue_position (null if < 0)}.
nlohmann::json CandidateStatusJson(const std::string& candidate, const BuildSnapshot* latest,
                                   nlohmann::json latest_view, nlohmann::json success_view,
                                   int64_t position);
/// A deployable build, for the domain's deploy: {build_id, candidate, commit, image, digest,
/// order}. `b` must have succeeded with an outcome.
nlohmann::json DeployableJson(const BuildSnapshot& b, int64_t order);
/// build_log: {build_id, text, offset, next_offset, complete, dropped_bytes}.
nlohmann::json LogChunkJson(const BuildId& id, const LogBuffer::Chunk& c);

/// A tool-level error result in the failure vocabulary (actors/build_failure.h): {error,
/// error_kind, next_step}. The kind defaults to the agent's arguments ("invalid_argument"),
/// or kiln's side ("infrastructure") for a message starting "internal error". `remote`
/// (issue 16): the domain's git remote, for a next step that names it.
ToolResult ToolError(const std::string& message, const std::string& kind = "",
                     const std::string& candidate = "", const std::string& remote = "");

/// A tool-level error result body: {"error": message}, message made valid UTF-8.
nlohmann::json ErrorJson(const std::string& message);

}  // namespace kiln
