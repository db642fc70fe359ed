// The MCP transport actor: one per endpoint (kiln's /mcp, owned by the Runtime). It owns the
// protocol state: the session revisions' session table (an McpHandler: ids, negotiated
// versions, log levels, per-session calls and caps, per domain and global), the dispatched
// tool calls — in flight, their cancellations and the build ids their builds run under — and
// routes each call to its domain actor with a deadline on every request
// (transport/mcp_call_table.h). The HTTP layer hands it session requests (McpSessionHost, from
// ServeMcpSessions) and 2026-07-28 calls and closed streams (through Runtime, a ToolBackend),
// and is answered through callbacks; the decisions are the plain McpHandler and McpCallTable,
// tested without CAF.
//
// Typed interface (mcp_transport_actor):
//   (mcp_call_atom, handle, ToolCall, McpCallCallbacks)  a call; `done` runs exactly once
//   (cancel_atom, handle)                                 the client cancelled the call
//   (disconnect_atom, handle)                             the call's stream closed: cancels
//                                                         its build when the domain's
//                                                         cancel_on_disconnect says so and
//                                                         no other call waits for it
//   (progress_atom, handle, ToolProgress)                 from the call's progress sink
//   (started_atom, handle, BuildId)                       from the call's progress sink
//   (stats_atom) -> uint64_t                              calls in flight
//   (sessions_atom, McpHandlerPtr) -> bool                takes the session table (once, at
//                                                         start: ServeMcpSessions)
//   (mcp_session_atom, McpSessionWork)                    a session request: decided with the
//                                                         table, `decided` told, calls dispatched
//   (evict_atom)                                          drops idle sessions
// The domain actors' message stays (tool_atom, ToolCall, caf::actor sink) -> ToolResult. Calls
// that wait for work (CallWaitsForWork) get a small forwarding sink actor that tags the
// domain's progress/started messages with the call's handle; quick calls get none.
//
// When the actor exits (kiln stops) every call still in flight is answered "kiln stopped".
// The callbacks run on a CAF worker thread and must not block.
//
// Thread-safety: the handle is a CAF actor handle (send from any thread).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <map>
#include <memory>
#include <string>

#include "actors/protocol.h"
#include "core/tool_backend.h"
#include "transport/mcp_call_table.h"
#include "transport/mcp_handler.h"
#include "transport/mcp_session_host.h"

namespace kiln {

using mcp_call_atom = caf::atom_constant<caf::atom("k_mcall")>;
using disconnect_atom = caf::atom_constant<caf::atom("k_discon")>;
using mcp_session_atom = caf::atom_constant<caf::atom("k_msess")>;
using sessions_atom = caf::atom_constant<caf::atom("k_sessions")>;
using evict_atom = caf::atom_constant<caf::atom("k_evict")>;

using McpHandlerPtr = std::shared_ptr<McpHandler>;

/// One session-era request for the transport actor's session table.
struct McpSessionWork {
  McpRequest request;
  McpPreflight pre;
  McpDecidedFn decided;
};

struct McpCallCallbacks {
  ToolBackend::ProgressFn progress;
  ToolBackend::DoneFn done;
};

using mcp_transport_actor = caf::typed_actor<
    caf::reacts_to<mcp_call_atom, uint64_t, ToolCall, McpCallCallbacks>,
    caf::reacts_to<cancel_atom, uint64_t>, caf::reacts_to<disconnect_atom, uint64_t>,
    caf::reacts_to<progress_atom, uint64_t, ToolProgress>,
    caf::reacts_to<started_atom, uint64_t, BuildId>, caf::replies_to<stats_atom>::with<uint64_t>,
    caf::replies_to<sessions_atom, McpHandlerPtr>::with<bool>,
    caf::reacts_to<mcp_session_atom, McpSessionWork>, caf::reacts_to<evict_atom>>;

/// Spawns the transport actor over `domains` (name -> domain actor) with each domain's
/// deadlines and disconnect policy (`timeouts`; domains not listed get CallTimeouts{}).
mcp_transport_actor SpawnMcpTransport(caf::actor_system& sys,
                                      std::map<std::string, caf::actor> domains,
                                      std::map<std::string, CallTimeouts> timeouts);

/// Hands the session table (an McpHandler made from `options`) to `transport` and returns the
/// HTTP layer's view of it. Waits (at most kQuickReply) for the actor to take it; null when it
/// did not. Call once, before the HTTP server serves.
std::shared_ptr<McpSessionHost> ServeMcpSessions(caf::actor_system& sys,
                                                 mcp_transport_actor transport, McpOptions options);

}  // namespace kiln

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::McpCallCallbacks)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::McpSessionWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::McpHandlerPtr)
