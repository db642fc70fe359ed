// ToolBackend: what the MCP transport needs from kiln's core.
//
// Part of the vocabulary library (core/): the transport calls it, kiln's runtime implements it.
// The real implementation (`Runtime`, actors/runtime.h) routes calls to the domain, scheduler
// and candidate actors; tests use transport/fake_tool_backend.h. Implementations must be
// thread-safe: Call and Cancel may be invoked from any thread (the HTTP io threads), and must
// never block. The callbacks may run on any thread and must not block either (post back to your
// own executor).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln {

struct ToolCall {
  std::string domain;        // the authenticated caller's domain
  std::string tool;          // canonical tool name (aliases already resolved by the transport)
  nlohmann::json arguments;  // always a JSON object (the transport checks this)
};

struct ToolProgress {
  double progress = 0;  // strictly increasing per call
  std::optional<double> total;
  std::string message;
};

struct ToolResult {
  nlohmann::json structured;  // structuredContent (an object); also sent as the text block
  bool is_error = false;      // tool-level failure (failed build, bad argument value, not found)
};

class ToolBackend {
 public:
  using ProgressFn = std::function<void(const ToolProgress&)>;
  using DoneFn = std::function<void(ToolResult)>;

  virtual ~ToolBackend() = default;

  /// Starts a tool call. `done` is called exactly once (also after Cancel). `progress` may be
  /// called zero or more times before `done`, never after. Returns a handle for Cancel.
  /// Unknown tool names yield done({"error": ...}, is_error=true); the transport checks tool
  /// names against its own list before calling, so this is a backstop.
  virtual uint64_t Call(ToolCall call, ProgressFn progress, DoneFn done) = 0;

  /// Cancels the call (for build_candidate with wait: it cancels the build). Unknown or finished
  /// handles are ignored.
  virtual void Cancel(uint64_t handle) = 0;

  /// Issue 17: the client closed the stream of the call's request (MCP 2026-07-28): it waits
  /// no more. What happens to its build is the domain's choice (build.cancel_on_disconnect);
  /// `done` is still called. Unknown or finished handles are ignored. Default: nothing.
  virtual void Disconnected(uint64_t handle) { (void)handle; }

  /// Readiness for /readyz: name -> (ok, detail). Must answer quickly (cached by the backend).
  virtual nlohmann::json Readiness() = 0;

  /// Extra Prometheus text (build metrics) appended to /metrics.
  virtual std::string MetricsText() = 0;
};

}  // namespace kiln
