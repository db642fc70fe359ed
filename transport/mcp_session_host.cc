#include "transport/mcp_session_host.h"

#include <utility>

namespace kiln {

void DispatchSessionCalls(const McpDecision& decision, std::vector<McpCallSink> sinks,
                          const McpSessionDispatch& dispatch) {
  for (uint64_t h : decision.cancel) dispatch.cancel(h);
  for (size_t i = 0; i < decision.calls.size(); ++i) {
    McpCallSink sink = i < sinks.size() ? std::move(sinks[i]) : McpCallSink{};
    const PendingCall& call = decision.calls[i];
    auto finished = dispatch.finished;
    auto done = [finished, session = decision.session_id, call,
                 sink_done = std::move(sink.done)](ToolResult r) {
      bool cancelled = finished(session, call);
      if (sink_done) sink_done(std::move(r), cancelled);
    };
    uint64_t handle = dispatch.call(call.call, std::move(sink.progress), std::move(done));
    if (dispatch.started(decision.session_id, call, handle)) dispatch.cancel(handle);
  }
}

LocalMcpSessionHost::LocalMcpSessionHost(McpOptions options, ToolBackend& backend)
    : state_(std::make_shared<State>(std::move(options))), backend_(backend) {}

void LocalMcpSessionHost::Handle(McpRequest request, McpPreflight pre, McpDecidedFn decided) {
  McpDecision d;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    d = state_->handler.HandleSession(request, std::move(pre));
  }
  std::vector<McpCallSink> sinks = decided(d);
  std::shared_ptr<State> st = state_;
  ToolBackend* backend = &backend_;
  McpSessionDispatch dispatch;
  dispatch.call = [backend](const ToolCall& c, ToolBackend::ProgressFn p, ToolBackend::DoneFn f) {
    return backend->Call(c, std::move(p), std::move(f));
  };
  dispatch.cancel = [backend](uint64_t h) { backend->Cancel(h); };
  dispatch.finished = [st](const std::string& session, const PendingCall& call) {
    std::lock_guard<std::mutex> lock(st->mu);
    return st->handler.CallFinished(session, call);
  };
  dispatch.started = [st](const std::string& session, const PendingCall& call, uint64_t h) {
    std::lock_guard<std::mutex> lock(st->mu);
    return st->handler.CallStarted(session, call, h);
  };
  DispatchSessionCalls(d, std::move(sinks), dispatch);
}

void LocalMcpSessionHost::EvictIdle() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->handler.EvictIdle();
}

}  // namespace kiln
