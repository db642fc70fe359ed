// What the event-based actors share as glue: their error, exception and exit handlers, and
// the table of callers (response promises and progress sinks) behind the opaque WaiterId and
// SinkId a pure core names in its effects (actors/candidate_builds.h, actors/domain_core.h),
// which also holds an answer back until its journal record is durable (JournaledAnswers).
// Ownership: a Callers lives in one actor's state. Thread-safety: actor-confined.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "actors/candidate_builds.h"
#include "actors/journaled_answers.h"
#include "state/state_store.h"

namespace kiln {

/// Logs an unexpected exit, unhandled error or exception of the actor `what` ("candidate").
void InstallHandlers(caf::scheduled_actor* self, const char* what);

/// The journal write behind an answer, as a closure for the state writer: a build's start, its
/// end (bringing the start along when that was lost; a barrier writes nothing), a deploy
/// record. A failed write is logged; the answer still goes out (StateWriter).
std::function<void()> JournalWriteOf(std::shared_ptr<StateStore> store, const JournalWrite& w);
std::function<void()> JournalWriteOf(std::shared_ptr<StateStore> store, const DeployRecord& rec);

class Callers {
 public:
  /// Answers with a journal write wait for it when `store` is journaled and `writer` set (both
  /// or neither); otherwise every answer goes out at once. Call once, before any Answer.
  void Journal(std::shared_ptr<StateStore> store, std::shared_ptr<StateWriter> writer,
               caf::actor me) {
    if (store && store->journaled() && writer) {
      store_ = std::move(store);
      writer_ = std::move(writer);
    }
    me_ = std::move(me);
  }
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
  /// Answers `waiters` with `result` once `write` (when set) is durable, and forgets them.
  template <class Write>
  void Answer(const std::optional<Write>& write, ToolResult result,
              const std::vector<WaiterId>& waiters) {
    const bool journaled = write && store_;
    answers_.After(journaled ? writer_.get() : nullptr, me_,
                   journaled ? JournalWriteOf(store_, *write) : std::function<void()>(),
                   std::move(result), Take(waiters));
  }
  /// The journal record of `ticket` is written (journaled_atom): its answer goes out.
  void Journaled(uint64_t ticket) { answers_.Release(ticket); }
  /// Sends (progress_atom, progress) to each of `sinks` still known.
  void Progress(const std::vector<SinkId>& sinks, const ToolProgress& progress) const;
  /// Sends (started_atom, id) to `sink`.
  void Started(SinkId sink, const BuildId& id) const;
  void DropSinks(const std::vector<SinkId>& sinks) {
    for (SinkId id : sinks) sinks_.erase(id);
  }

 private:
  std::vector<caf::response_promise> Take(const std::vector<WaiterId>& waiters);

  std::shared_ptr<StateStore> store_;  // null: answers go out at once
  std::shared_ptr<StateWriter> writer_;
  caf::actor me_;  // gets journaled_atom
  JournaledAnswers answers_;
  std::map<WaiterId, caf::response_promise> waiters_;
  std::map<SinkId, caf::actor> sinks_;
  uint64_t next_ = 1;
};

}  // namespace kiln
