// McpSessionHost: the owner of the session revisions' state (McpHandler's session table) as
// the HTTP layer sees it. The HTTP layer decides what McpFront can (stateless), hands every
// other request to the host, and gets the decision back through a callback; it then only moves
// bytes: a reply, or a response stream whose calls the host dispatched.
//
// Two hosts: the MCP transport actor (actors/mcp_transport_actor.h, through Runtime) in kiln,
// and LocalMcpSessionHost below (a mutex around an McpHandler, calls through a ToolBackend) for
// tests and the fake server.
//
// Thread-safety: implementations are thread-safe; Handle and EvictIdle must return at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tool_backend.h"
#include "transport/mcp_handler.h"

namespace kiln {

/// Where one dispatched call's progress and answer go (the HTTP layer's response stream).
/// `cancelled`: the client cancelled the call (notifications/cancelled) before it finished.
struct McpCallSink {
  ToolBackend::ProgressFn progress;
  std::function<void(ToolResult result, bool cancelled)> done;
};

/// Receives a session request's decision, once, on any thread (must not block). For a decision
/// with calls it returns one sink per `decision.calls` entry, in order; the host then
/// dispatches the calls and reports to those sinks.
using McpDecidedFn = std::function<std::vector<McpCallSink>(const McpDecision& decision)>;

class McpSessionHost {
 public:
  virtual ~McpSessionHost() = default;
  /// Decides a request McpFront::Preflight left undecided and dispatches its calls. `decided`
  /// runs exactly once while the host lives (never when it is gone: the caller's deadline
  /// answers then).
  virtual void Handle(McpRequest request, McpPreflight pre, McpDecidedFn decided) = 0;
  /// Drops sessions idle past the idle timeout (periodically, from the HTTP layer's timer).
  virtual void EvictIdle() = 0;
  virtual size_t SessionCount() const = 0;
  virtual size_t InflightCalls() const = 0;
};

/// Dispatches `decision`'s calls after `sinks` were handed out. The plain part of a host,
/// shared by both hosts: `call` starts one call (returns its handle) with the wrapped sink,
/// `cancel` cancels a handle; `finished`/`started` run McpHandler::CallFinished/CallStarted in
/// the host's serialization (under its lock, or in its actor).
struct McpSessionDispatch {
  std::function<uint64_t(const ToolCall&, ToolBackend::ProgressFn, ToolBackend::DoneFn)> call;
  std::function<void(uint64_t handle)> cancel;
  std::function<bool(const std::string& session, const PendingCall&)> finished;
  std::function<bool(const std::string& session, const PendingCall&, uint64_t)> started;
};
void DispatchSessionCalls(const McpDecision& decision, std::vector<McpCallSink> sinks,
                          const McpSessionDispatch& dispatch);

/// An McpHandler behind a mutex, calls through `backend` (tests, the fake server).
class LocalMcpSessionHost : public McpSessionHost {
 public:
  LocalMcpSessionHost(McpOptions options, ToolBackend& backend);
  void Handle(McpRequest request, McpPreflight pre, McpDecidedFn decided) override;
  void EvictIdle() override;
  size_t SessionCount() const override { return state_->handler.SessionCount(); }
  size_t InflightCalls() const override { return state_->handler.InflightCalls(); }

 private:
  struct State {
    explicit State(McpOptions o) : handler(std::move(o)) {}
    std::mutex mu;
    McpHandler handler;  // guarded by mu
  };
  std::shared_ptr<State> state_;
  ToolBackend& backend_;
};

}  // namespace kiln
