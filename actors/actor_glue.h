// What the event-based actors share as glue: their error, exception and exit handlers, and
// the table of callers (response promises and progress sinks) behind the opaque WaiterId and
// SinkId a pure core names in its effects (actors/candidate_builds.h, actors/domain_core.h).
// Ownership: a Callers lives in one actor's state. Thread-safety: actor-confined.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "actors/candidate_builds.h"
#include "actors/journaled_answers.h"

namespace kiln {

/// Logs an unexpected exit, unhandled error or exception of the actor `what` ("candidate").
void InstallHandlers(caf::scheduled_actor* self, const char* what);

class Callers {
 public:
  WaiterId AddWaiter(caf::response_promise rp) {
    const WaiterId id = next_++;
    waiters_[id] = std::move(rp);
    return id;
  }
  /// 0 for a null sink (nothing to tell).
  SinkId AddSink(const caf::actor& sink) {
    if (!sink) return 0;
    const SinkId id = next_++;
    sinks_[id] = sink;
    return id;
  }
  /// Answers `waiters` with `result` once `write` is durable (JournaledAnswers; at once
  /// without a writer) and forgets them.
  void Answer(JournaledAnswers& answers, StateWriter* writer, const caf::actor& me,
              std::function<void()> write, ToolResult result, const std::vector<WaiterId>& waiters);
  /// Sends (progress_atom, progress) to each of `sinks` still known.
  void Progress(const std::vector<SinkId>& sinks, const ToolProgress& progress) const;
  /// Sends (started_atom, id) to `sink`.
  void Started(SinkId sink, const BuildId& id) const;
  void DropSinks(const std::vector<SinkId>& sinks) {
    for (SinkId id : sinks) sinks_.erase(id);
  }

 private:
  std::map<WaiterId, caf::response_promise> waiters_;
  std::map<SinkId, caf::actor> sinks_;
  uint64_t next_ = 1;
};

}  // namespace kiln
