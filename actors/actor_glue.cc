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

std::function<void()> JournalWriteOf(std::shared_ptr<StateStore> store, const JournalWrite& w) {
  if (w.kind == JournalWrite::Kind::kStart)
    return [store, b = w.start]() mutable {
      Status st = store->RecordBuildStarted(&b);
      if (!st.ok()) spdlog::error("state journal: cannot record build {}: {}", b.id, st.message());
    };
  if (w.kind == JournalWrite::Kind::kFinish)
    return [store, f = w.finish, start = w.start]() mutable {
      Status st = store->RecordBuildFinished(f);
      if (st.code() == Status::Code::kNotFound && store->RecordBuildStarted(&start).ok())
        st = store->RecordBuildFinished(f);
      if (!st.ok())
        spdlog::error("state journal: cannot record the end of build {}: {}", f.id, st.message());
    };
  return [] {};  // a barrier: after everything posted before it
}

std::function<void()> JournalWriteOf(std::shared_ptr<StateStore> store, const DeployRecord& rec) {
  return [store, r = rec]() mutable {
    Status st = store->RecordDeploy(&r);
    if (!st.ok())
      spdlog::error("state journal: cannot record deploy {}: {}", r.deploy_id, st.message());
  };
}

std::vector<caf::response_promise> Callers::Take(const std::vector<WaiterId>& waiters) {
  std::vector<caf::response_promise> promises;
  for (WaiterId w : waiters)
    if (auto it = waiters_.find(w); it != waiters_.end()) {
      promises.push_back(std::move(it->second));
      waiters_.erase(it);
    }
  return promises;
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
