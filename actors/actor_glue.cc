#include "actors/actor_glue.h"

#include <spdlog/spdlog.h>

#include <caf/exit_reason.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/send.hpp>
#include <string>

#include "actors/protocol.h"

namespace kiln {

void InstallHandlers(caf::scheduled_actor* self, const char* what) {
  const std::string name = what;
  self->attach_functor([name](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown &&
        reason != caf::exit_reason::unreachable)
      spdlog::warn("{} actor exited: {}", name, caf::to_string(reason));
  });
  self->set_default_handler(caf::drop);
  self->set_error_handler([name](caf::scheduled_actor*, caf::error& err) {
    spdlog::warn("{} actor: unhandled error {}", name, caf::to_string(err));
  });
  self->set_exception_handler(
      [name](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
        try {
          std::rethrow_exception(eptr);
        } catch (const std::exception& e) {
          spdlog::error("{} actor failed: {}", name, e.what());
        }
        return caf::make_error(caf::sec::runtime_error);
      });
}

void Callers::Answer(JournaledAnswers& answers, StateWriter* writer, const caf::actor& me,
                     std::function<void()> write, ToolResult result,
                     const std::vector<WaiterId>& waiters) {
  std::vector<caf::response_promise> promises;
  for (WaiterId w : waiters)
    if (auto it = waiters_.find(w); it != waiters_.end()) {
      promises.push_back(std::move(it->second));
      waiters_.erase(it);
    }
  answers.After(writer, me, std::move(write), std::move(result), std::move(promises));
}

void Callers::Progress(const std::vector<SinkId>& sinks, const ToolProgress& progress) const {
  for (SinkId id : sinks)
    if (auto it = sinks_.find(id); it != sinks_.end())
      caf::anon_send(it->second, progress_atom::value, progress);
}

void Callers::Started(SinkId sink, const BuildId& id) const {
  if (auto it = sinks_.find(sink); it != sinks_.end())
    caf::anon_send(it->second, started_atom::value, id);
}

}  // namespace kiln
