#include "actors/mcp_transport_actor.h"

#include <spdlog/spdlog.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <memory>

#include "actors/tool_views.h"
#include "common/json_text.h"

namespace kiln {

namespace {

using quit_sink_atom = caf::atom_constant<caf::atom("k_sinkquit")>;

struct TransportState {
  std::map<std::string, caf::actor> domains;
  std::map<std::string, CallTimeouts> timeouts;
  // Shared with the exit functor, which answers what is left when the actor stops.
  std::shared_ptr<McpCallTable> calls = std::make_shared<McpCallTable>();
  std::unordered_map<uint64_t, caf::actor> sinks;  // handle -> progress sink (waiting calls)
  // The session revisions' session table (ServeMcpSessions); shared with the done callbacks of
  // session calls, which the exit functor may run after the state is gone.
  McpHandlerPtr sessions;
  uint64_t next_session_handle = uint64_t{1} << 63;  // Runtime::Call's handles stay below
};

using TransportPtr = mcp_transport_actor::stateful_pointer<TransportState>;

ToolResult ErrorResult(const std::string& msg) { return {ErrorJson(msg), true}; }

// Runs `done` once with `r`, made valid UTF-8 (build and program bytes may be ill-formed);
// when rendering or delivering throws, the caller gets an internal error instead.
void Deliver(const std::string& tool, const ToolBackend::DoneFn& done, ToolResult r) {
  if (!done) return;
  try {
    MakeValidUtf8(&r.structured);
    done(std::move(r));
    return;
  } catch (const std::exception& e) {
    spdlog::error("call {}: rendering the result failed: {}", tool, e.what());
  }
  try {
    done(ErrorResult("kiln could not render the result of " + tool +
                     " (internal error); retry the call, and tell the operator if it persists"));
  } catch (const std::exception& e) {
    spdlog::error("call {}: delivering the error result failed: {}", tool, e.what());
  }
}

// Answers call `handle` (once) and stops its progress sink.
void Finish(TransportPtr self, uint64_t handle, ToolResult r) {
  auto& s = self->state;
  auto sink = s.sinks.find(handle);
  if (sink != s.sinks.end()) {
    caf::anon_send(sink->second, quit_sink_atom::value);
    s.sinks.erase(sink);
  }
  auto e = s.calls->Finish(handle);
  if (!e) return;  // already answered (a late reply after the deadline)
  Deliver(e->tool, e->done, std::move(r));
}

void SendCancel(TransportPtr self, const std::string& domain, const std::string& build_id) {
  auto d = self->state.domains.find(domain);
  if (d == self->state.domains.end()) return;
  ToolCall c{domain, "cancel_build", {{"build_id", build_id}}};
  caf::anon_send(d->second, tool_atom::value, std::move(c), caf::actor{});
}

// Tags the domain's progress/started messages with the call's handle.
caf::behavior SinkBehavior(caf::event_based_actor* self, mcp_transport_actor transport,
                           uint64_t handle) {
  return {
      [=](progress_atom, ToolProgress& p) {
        self->send(transport, progress_atom::value, handle, std::move(p));
      },
      [=](started_atom, const BuildId& id) {
        self->send(transport, started_atom::value, handle, id);
      },
      [=](quit_sink_atom) { self->quit(); },
  };
}

// Routes call `handle` to its domain with the call's deadline (see McpCallTable).
void StartCall(TransportPtr self, uint64_t handle, ToolCall call, McpCallCallbacks cb) {
  auto& s = self->state;
  auto dom = s.domains.find(call.domain);
  if (dom == s.domains.end()) {
    Deliver(call.tool, cb.done, ErrorResult("unknown domain"));
    return;
  }
  McpCallTable::Entry entry{call.domain,        call.tool, std::move(cb.progress),
                            std::move(cb.done), {},        false};
  if (!s.calls->Add(handle, std::move(entry))) {
    spdlog::error("MCP transport: call handle {} reused; call {} refused", handle, call.tool);
    return;
  }
  auto t = s.timeouts.find(call.domain);
  std::chrono::seconds timeout =
      CallTimeout(call, t == s.timeouts.end() ? CallTimeouts{} : t->second);
  caf::actor sink;
  if (CallWaitsForWork(call)) {
    sink = self->spawn(SinkBehavior, caf::actor_cast<mcp_transport_actor>(self), handle);
    s.sinks[handle] = sink;
  }
  ToolCall probe{call.domain, call.tool, nlohmann::json::object()};
  if (call.arguments.is_object() && call.arguments.contains("wait"))
    probe.arguments["wait"] = call.arguments["wait"];
  self->request(dom->second, timeout, tool_atom::value, std::move(call), sink)
      .then([=](ToolResult& r) { Finish(self, handle, std::move(r)); },
            [=](caf::error& e) {
              if (e == caf::sec::request_timeout) {
                spdlog::warn("call {} (domain {}): no answer within {} s", probe.tool, probe.domain,
                             timeout.count());
                Finish(self, handle, CallTimeoutResult(probe, timeout));
                return;
              }
              spdlog::warn("call {}: the domain did not answer: {}", probe.tool, caf::to_string(e));
              Finish(self, handle,
                     ErrorResult("kiln could not complete " + probe.tool +
                                 " (the domain did not answer); retry the call, and tell the "
                                 "operator if it persists"));
            });
}

void CancelCall(TransportPtr self, uint64_t handle) {
  auto& s = self->state;
  if (auto id = s.calls->Cancel(handle)) SendCancel(self, s.calls->Find(handle)->domain, *id);
}

// A session-era request: the session table decides, the HTTP layer is told (and hands back
// where each call reports), the calls start here. Session calls get handles from the upper
// half of the handle space.
void HandleSessionWork(TransportPtr self, McpSessionWork& w) {
  auto& s = self->state;
  McpDecision d;
  if (!s.sessions) {
    d.metric_method = "unavailable";
    d.reply.status = 503;
    d.reply.content_type = "application/json";
    d.reply.body = DumpJson(
        JsonRpcError(nullptr, rpc::kServerError, "kiln's MCP sessions are not ready yet; retry"));
  } else {
    d = s.sessions->HandleSession(w.request, std::move(w.pre));
  }
  std::vector<McpCallSink> sinks;
  try {
    sinks = w.decided(d);
  } catch (const std::exception& e) {
    spdlog::error("MCP transport: answering a session request failed: {}", e.what());
  }
  McpHandlerPtr sessions = s.sessions;
  McpSessionDispatch dispatch;
  dispatch.call = [self](const ToolCall& c, ToolBackend::ProgressFn p, ToolBackend::DoneFn f) {
    uint64_t handle = self->state.next_session_handle++;
    StartCall(self, handle, c, McpCallCallbacks{std::move(p), std::move(f)});
    return handle;
  };
  dispatch.cancel = [self](uint64_t handle) { CancelCall(self, handle); };
  // Both run in this actor (a call's done runs in Finish, or in the exit functor).
  dispatch.finished = [sessions](const std::string& session, const PendingCall& call) {
    return sessions->CallFinished(session, call);
  };
  dispatch.started = [sessions](const std::string& session, const PendingCall& call,
                                uint64_t handle) {
    return sessions->CallStarted(session, call, handle);
  };
  DispatchSessionCalls(d, std::move(sinks), dispatch);
}

mcp_transport_actor::behavior_type TransportBehavior(TransportPtr self,
                                                     std::map<std::string, caf::actor> domains,
                                                     std::map<std::string, CallTimeouts> timeouts) {
  self->state.domains = std::move(domains);
  self->state.timeouts = std::move(timeouts);
  std::shared_ptr<McpCallTable> calls = self->state.calls;
  self->attach_functor([calls](const caf::error&) {
    for (auto& e : calls->TakeAll())
      Deliver(e.tool, e.done,
              ErrorResult("kiln stopped before the call finished; retry once it is back"));
  });
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      spdlog::error("MCP transport actor failed: {}", e.what());
    } catch (...) {
      spdlog::error("MCP transport actor failed: unknown exception");
    }
    return caf::make_error(caf::sec::runtime_error);  // the exit functor answers every call
  });
  return {
      [=](mcp_call_atom, uint64_t handle, ToolCall& call, McpCallCallbacks& cb) {
        StartCall(self, handle, std::move(call), std::move(cb));
      },
      [=](cancel_atom, uint64_t handle) { CancelCall(self, handle); },
      [=](disconnect_atom, uint64_t handle) {
        auto& s = self->state;
        const McpCallTable::Entry* e = s.calls->Find(handle);
        if (!e) return;
        auto t = s.timeouts.find(e->domain);
        bool cancel = t != s.timeouts.end() && t->second.cancel_on_disconnect;
        if (auto id = s.calls->Disconnect(handle, cancel)) {
          spdlog::info(
              "call {} (domain {}): stream closed; cancelling build {} (cancel_on_disconnect)",
              e->tool, e->domain, *id);
          SendCancel(self, e->domain, *id);
        }
      },
      [=](progress_atom, uint64_t handle, ToolProgress& p) {
        const McpCallTable::Entry* e = self->state.calls->Find(handle);
        if (e && e->progress) e->progress(p);
      },
      [=](started_atom, uint64_t handle, const BuildId& id) {
        auto& s = self->state;
        if (auto cancel = s.calls->Started(handle, id))
          SendCancel(self, s.calls->Find(handle)->domain, *cancel);
      },
      [=](stats_atom) -> uint64_t { return self->state.calls->size(); },
      [=](sessions_atom, McpHandlerPtr& sessions) -> bool {
        self->state.sessions = std::move(sessions);
        return true;
      },
      [=](mcp_session_atom, McpSessionWork& w) { HandleSessionWork(self, w); },
      [=](evict_atom) {
        if (!self->state.sessions) return;
        size_t n = self->state.sessions->EvictIdle();
        if (n) spdlog::info("mcp: evicted {} idle sessions", n);
      },
  };
}

}  // namespace

namespace {

// The HTTP layer's view of the transport actor's session table.
class ActorSessionHost : public McpSessionHost {
 public:
  ActorSessionHost(mcp_transport_actor transport, McpHandlerPtr sessions)
      : transport_(std::move(transport)), sessions_(std::move(sessions)) {}
  void Handle(McpRequest request, McpPreflight pre, McpDecidedFn decided) override {
    caf::anon_send(transport_, mcp_session_atom::value,
                   McpSessionWork{std::move(request), std::move(pre), std::move(decided)});
  }
  void EvictIdle() override { caf::anon_send(transport_, evict_atom::value); }
  // The handler's gauges are atomics: readable here while the actor owns the table.
  size_t SessionCount() const override { return sessions_->SessionCount(); }
  size_t InflightCalls() const override { return sessions_->InflightCalls(); }

 private:
  mcp_transport_actor transport_;
  McpHandlerPtr sessions_;
};

}  // namespace

std::shared_ptr<McpSessionHost> ServeMcpSessions(caf::actor_system& sys,
                                                 mcp_transport_actor transport,
                                                 McpOptions options) {
  auto sessions = std::make_shared<McpHandler>(std::move(options));
  bool taken = false;
  caf::scoped_actor self{sys};
  self->request(transport, kQuickReply, sessions_atom::value, sessions)
      .receive([&](bool ok) { taken = ok; },
               [&](caf::error& e) {
                 spdlog::error("MCP transport did not take the session table: {}",
                               caf::to_string(e));
               });
  if (!taken) return nullptr;
  return std::make_shared<ActorSessionHost>(std::move(transport), std::move(sessions));
}

mcp_transport_actor SpawnMcpTransport(caf::actor_system& sys,
                                      std::map<std::string, caf::actor> domains,
                                      std::map<std::string, CallTimeouts> timeouts) {
  return sys.spawn(TransportBehavior, std::move(domains), std::move(timeouts));
}

}  // namespace kiln
