// JournaledAnswers: write-ahead answers for an actor. An answer that reports a journal record
// (a build id, a build's end, a deploy's outcome) is held until the StateWriter has written
// that record, so a caller never holds an answer a crash could take back (docs/state.md).
//
// Used through Callers (actors/actor_glue.h), in an actor whose behavior has
//   [=](journaled_atom, uint64_t ticket) { self->state.callers.Journaled(ticket); }
// Callers calls `After(writer, me, write, result, promises)`: `write` runs on the writer thread
// (after everything posted before it), then the actor gets `journaled` and the promises get
// `result`. With no writer (no state journal) there is nothing to wait for: the promises get
// `result` at once and `write` is dropped.
//
// Ownership: lives in the actor's state. Thread-safety: actor-confined (not thread-safe).
#pragma once

#include <caf/actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "actors/protocol.h"
#include "actors/state_writer.h"
#include "core/tool_backend.h"

namespace kiln {

class JournaledAnswers {
 public:
  void After(StateWriter* writer, const caf::actor& me, std::function<void()> write,
             ToolResult result, std::vector<caf::response_promise> promises) {
    if (!writer) {
      for (auto& p : promises) p.deliver(result);
      return;
    }
    if (promises.empty()) {
      writer->Post(std::move(write));
      return;
    }
    const uint64_t ticket = next_ticket_++;
    held_[ticket] = {std::move(result), std::move(promises)};
    writer->Post([write = std::move(write), me, ticket] {
      write();
      caf::anon_send(me, journaled_atom::value, ticket);
    });
  }

  /// The record of `ticket` is written: delivers its answer.
  void Release(uint64_t ticket) {
    auto it = held_.find(ticket);
    if (it == held_.end()) return;
    for (auto& p : it->second.second) p.deliver(it->second.first);
    held_.erase(it);
  }

 private:
  std::map<uint64_t, std::pair<ToolResult, std::vector<caf::response_promise>>> held_;
  uint64_t next_ticket_ = 1;
};

}  // namespace kiln
