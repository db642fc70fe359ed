// MCP tasks (the `io.modelcontextprotocol/tasks` extension of protocol 2026-07-28) for kiln's
// builds: task ids and the task state machine, as pure functions (no CAF, no I/O).
//
// A build task needs no durable state of its own: its id is an opaque encoding of the caller's
// domain, the candidate, the journaled build id and the creation time. The build record (in
// the state journal) is the task's state, so a task id survives a kiln restart exactly as long
// as the build stays in the candidate's history (scheduler.history_per_candidate). A task id
// decodes only for the domain it was issued to: another domain's id is "not found".
//
// State machine (build status -> task status):
//   queued, running                     -> working   (statusMessage: phase, queue position)
//   succeeded, failed, interrupted,
//   cancelled by supersession/shutdown  -> completed (result: the build_candidate result; a
//                                                     failed build has isError: true)
//   cancelled by request (tasks/cancel,
//   cancel_build)                       -> cancelled
//
// A deploy task (deploy_candidate) works the same way on the deploy record (journaled
// in_progress when admitted, then its outcome):
//   in_progress                         -> working   (statusMessage: "phase: deploying")
//   rolled_out, failed                  -> completed (result: the deploy_candidate result; a
//                                                     failed deploy has isError: true)
//   failed with reason Cancelled        -> cancelled (tasks/cancel, or kiln shutting down)
//
// Thread-safety: free functions on values; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/tool_backend.h"

namespace kiln {

inline constexpr const char* kMcpTasksExtension = "io.modelcontextprotocol/tasks";

/// What a task id names.
struct TaskRef {
  std::string domain;
  std::string kind;  // "build" or "deploy"
  std::string candidate;
  std::string build_id;    // the build (of a deploy: the build it deploys)
  int64_t created_ms = 0;  // Unix epoch milliseconds
  std::string deploy_id;   // kind "deploy": the deploy
};

/// URL-safe Base64 without padding, and back (nullopt on any other character or bad length).
std::string Base64UrlEncode(std::string_view bytes);
std::optional<std::string> Base64UrlDecode(std::string_view text);

/// "kt1." + base64url(JSON of the reference).
std::string EncodeTaskId(const TaskRef& ref);
/// The reference behind `task_id` when it is well-formed and was issued to `domain`; nullopt
/// otherwise (callers answer "task not found" either way: ids of other domains are not
/// distinguishable from unknown ones).
std::optional<TaskRef> DecodeTaskId(std::string_view task_id, const std::string& domain);

/// ISO 8601 UTC with milliseconds ("2026-12-02T01:02:03.456Z").
std::string IsoTime(int64_t epoch_ms);

struct TaskTiming {
  int64_t now_ms = 0;
  int64_t ttl_ms = 3600000;
  int64_t poll_interval_ms = 1000;
};

/// True when a build_candidate result describes a build that is still queued or running.
bool BuildIsActive(const nlohmann::json& build);
/// True when a deploy_candidate result describes a deploy still in progress.
bool DeployIsActive(const nlohmann::json& deploy);
/// Task status ("working", "completed", "cancelled") and statusMessage of a deploy result.
std::string TaskStatusForDeploy(const nlohmann::json& deploy);
std::string DeployTaskStatusMessage(const nlohmann::json& deploy);

/// Task status name ("working", "completed", "cancelled") for a build_candidate result.
std::string TaskStatusForBuild(const nlohmann::json& build);

/// statusMessage for a build result: "phase: queued (queue position 2)", "phase: building",
/// "build succeeded", "build failed (compile_error): ...".
std::string TaskStatusMessage(const nlohmann::json& build);

/// The task object (taskId, status, statusMessage, createdAt, lastUpdatedAt, ttlMs,
/// pollIntervalMs) for `work` (a build result, or a deploy result when ref.kind is "deploy");
/// with `result` (a CallToolResult with resultType "complete") when the status is completed.
/// No resultType/_meta: the caller adds those.
nlohmann::json TaskJson(const TaskRef& ref, const ToolResult& work, const TaskTiming& timing);

}  // namespace kiln
