// McpCallTable: the MCP transport's in-flight tool calls and their cancellations, as a plain
// class (no CAF, no I/O). The transport actor (actors/mcp_transport_actor.h) owns one and
// does what its answers say; the decisions are unit-tested here without an actor system.
//
// A call is added when it is dispatched and leaves the table exactly once (Finish or
// TakeAll), so its `done` runs exactly once. A cancellation that arrives before the call's
// build id is known is remembered and answered by Started. A closed stream (Disconnect)
// cancels the build only when the domain says so and no other call still waits for it.
//
// CallTimeouts also carries the domain's disconnect policy.
//
// CallTimeout: every request the transport sends to a domain has a deadline. Quick tools get
// `quick`; calls that wait for a build (build_candidate without wait:false) get `build`, and
// calls that wait for a deploy (deploy_candidate without wait:false) get `deploy`. A call past
// its deadline is answered with an error that says the work may still be running.
//
// Thread-safety: not thread-safe (one owner: the transport actor).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tool_backend.h"

namespace kiln {

struct CallTimeouts {
  std::chrono::seconds quick{60};
  std::chrono::seconds build{600 + 1800};  // build.timeout_s plus time in the queue
  std::chrono::seconds deploy{300 + 300};  // rollout timeout plus the build lookup and push
  bool cancel_on_disconnect = false;       // the domain's build.cancel_on_disconnect
};

/// Which deadline applies to `call` (see the header comment).
std::chrono::seconds CallTimeout(const ToolCall& call, const CallTimeouts& timeouts);

/// True for calls that may report progress and a build id (they get a progress sink).
bool CallWaitsForWork(const ToolCall& call);

/// The answer to a call that passed its deadline, in the agent's terms.
ToolResult CallTimeoutResult(const ToolCall& call, std::chrono::seconds timeout);

class McpCallTable {
 public:
  struct Entry {
    std::string domain;
    std::string tool;
    ToolBackend::ProgressFn progress;
    ToolBackend::DoneFn done;
    std::string build_id;               // known once the domain reported it (started)
    bool cancel_pending = false;        // cancelled before the build id was known
    bool disconnected = false;          // the client closed the call's stream (waits no more)
    bool cancel_on_disconnect = false;  // ... and the domain says cancel (build id not known yet)
  };

  /// Records a dispatched call. Returns false (and changes nothing) when `handle` is in use.
  bool Add(uint64_t handle, Entry entry);

  /// The domain reported the call's build id. Returns the build id to cancel now when the
  /// call was cancelled before (nullopt otherwise, also for unknown handles).
  std::optional<std::string> Started(uint64_t handle, const std::string& build_id);

  /// The client cancelled the call. Returns the build id to cancel now; nullopt when the call
  /// is unknown or finished, or when its build id is not known yet (then Started returns it).
  std::optional<std::string> Cancel(uint64_t handle);

  /// The client closed the call's stream: it waits no more. With `cancel` (the domain's
  /// build.cancel_on_disconnect) returns the build id to cancel now when no other call in the
  /// table still waits for the same build; when the build id is not known yet, Started
  /// decides. The call stays in the table until the domain answers.
  std::optional<std::string> Disconnect(uint64_t handle, bool cancel);

  /// The in-flight call (null when unknown or finished). Valid until the table changes.
  const Entry* Find(uint64_t handle) const;

  /// Removes the call and returns it; nullopt when it already left the table (a late answer
  /// after a timeout, or the other way round): the caller must not answer again.
  std::optional<Entry> Finish(uint64_t handle);

  /// Removes every call (the transport stops): the caller answers each one.
  std::vector<Entry> TakeAll();

  size_t size() const { return calls_.size(); }
  /// In-flight calls of `domain`.
  size_t size(const std::string& domain) const;

 private:
  bool OthersWaitFor(uint64_t handle, const std::string& build_id) const;
  std::unordered_map<uint64_t, Entry> calls_;
};

}  // namespace kiln
