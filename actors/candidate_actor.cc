#include "actors/candidate_actor.h"

#include <spdlog/spdlog.h>

#include <caf/actor_system.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <map>
#include <type_traits>

#include "actors/actor_glue.h"
#include "actors/build_history.h"  // issue 19
#include "actors/build_metrics.h"
#include "actors/candidate_builds.h"
#include "actors/candidate_work.h"
#include "actors/domain_env.h"
#include "actors/protocol.h"
#include "actors/tool_views.h"
#include "state/state_store.h"
#include "storage/lease_table.h"  // issue 19

namespace kiln {
namespace {

struct CandidateState {
  std::shared_ptr<const DomainEnv> env;
  std::string name;
  SchedulerActor scheduler;
  DomainActor domain;
  std::unique_ptr<CandidateBuilds> core;
  Callers callers;  // and the answers waiting for their journal record
};
using Self = CandidateActor::stateful_pointer<CandidateState>;

void Carry(Self self, Effects effects);

// Runs `phase` on a blocking-work thread and hands its WorkDone to this actor.
template <class Phase>
void RunPhase(Self self, Phase phase) {
  auto env = self->state.env;
  auto me = caf::actor_cast<CandidateActor>(self);
  env->work->Run([env, me, phase = std::move(phase)] { caf::anon_send(me, phase(*env)); });
}

// Carries out one effect of the core.
void CarryOne(Self self, Effect& effect) {
  auto& s = self->state;
  const DomainEnv& env = *s.env;
  std::visit(
      [&](auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, AnswerEffect>) {
          s.callers.Answer(e.write, std::move(e.result), e.waiters);
        } else if constexpr (std::is_same_v<E, ProgressEffect>) {
          s.callers.Progress(e.sinks, e.progress);
        } else if constexpr (std::is_same_v<E, StartedEffect>) {
          s.callers.Started(e.sink, e.id);
        } else if constexpr (std::is_same_v<E, DropSinksEffect>) {
          s.callers.DropSinks(e.sinks);
        } else if constexpr (std::is_same_v<E, ResolveEffect>) {
          RunPhase(self, [name = s.name, e](const DomainEnv& de) {
            return ResolvePhase(de, name, e.id, e.req);
          });
        } else if constexpr (std::is_same_v<E, SubmitEffect>) {
          const BuildId id = e.job.id;
          self->request(s.scheduler, kQuickReply, submit_atom::value, e.job,
                        caf::actor_cast<CandidateActor>(self))
              .then(
                  [=](const SubmitReply& r) {
                    Carry(self,
                          self->state.core->Submitted(id, r.kind, r.cached, r.owner, r.position));
                  },
                  [=](caf::error& err) {
                    spdlog::error("build {}: the scheduler did not answer: {}", id,
                                  caf::to_string(err));
                    Carry(self,
                          self->state.core->SubmitFailed(id,
                                                         "internal error: kiln's scheduler did not "
                                                         "answer; build the candidate again"));
                  });
        } else if constexpr (std::is_same_v<E, BuildPhaseEffect>) {
          RunPhase(self,
                   [name = s.name, e](const DomainEnv& de) { return BuildPhase(de, name, e); });
        } else if constexpr (std::is_same_v<E, LaneEffect>) {
          const BuildId id = e.id;
          const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
              e.deadline - std::chrono::steady_clock::now() + kLaneMargin);
          self->request(s.scheduler, std::max(wait, std::chrono::milliseconds(kLaneMargin)),
                        push_atom::value, PushLane(env), id)
              .then([=](granted_atom) { Carry(self, self->state.core->LaneGranted(id)); },
                    [=](caf::error&) {
                      Carry(self,
                            self->state.core->LaneFailed(id,
                                                         "the push did not get its turn at the "
                                                         "registry within the build's timeout"));
                    });
        } else if constexpr (std::is_same_v<E, PushPhaseEffect>) {
          RunPhase(self,
                   [name = s.name, e](const DomainEnv& de) { return PushPhase(de, name, e); });
        } else if constexpr (std::is_same_v<E, ReserveLaneEffect>) {
          const BuildId id = e.id;
          self->request(s.scheduler, kQuickReply, reserve_atom::value, PushLane(env), id)
              .then([=](bool granted) { Carry(self, self->state.core->LaneReserved(id, granted)); },
                    [=](caf::error&) {  // the blob stage, then the lane is asked for as usual
                      Carry(self, self->state.core->LaneReserved(id, false));
                    });
        } else if constexpr (std::is_same_v<E, ReleaseLaneEffect>) {
          self->send(s.scheduler, release_atom::value, PushLane(env), e.id);
        } else if constexpr (std::is_same_v<E, FinishedEffect>) {
          self->send(s.scheduler, finished_atom::value, e.key, e.id, e.outcome);
        } else if constexpr (std::is_same_v<E, CancelQueuedEffect>) {
          self->send(s.scheduler, cancel_atom::value, e.id);
        } else if constexpr (std::is_same_v<E, SaveKeyEffect>) {
          env.work->Run([store = env.store, key = e.key, outcome = e.outcome] {
            Status st = store->SaveBuildKey(key, outcome);
            if (!st.ok()) spdlog::warn("build-key cache: {}", st.message());
          });
        } else if constexpr (std::is_same_v<E, SummaryEffect>) {
          self->send(s.domain, summary_atom::value, std::move(e.summary));
        } else if constexpr (std::is_same_v<E, BusyAddEffect>) {
          env.busy->Add(env.domain, e.branch, e.id);
        } else if constexpr (std::is_same_v<E, BuildEndedEffect>) {
          if (env.busy) env.busy->Remove(env.domain, e.id);
          if (env.storage_leases) env.storage_leases->Drop(env.domain, s.name, e.id);  // issue 19
          if (env.metrics)
            env.metrics->BuildFinished(env.domain, env.dc->build.mode, StatusWireName(e.status),
                                       e.build_s, e.push_s, e.cache_hit);
        } else if constexpr (std::is_same_v<E, LeaseEffect>) {
          if (env.storage_leases) env.storage_leases->Hold(env.domain, s.name, e.id);
        }
      },
      effect);
}

void Carry(Self self, Effects effects) {
  for (auto& e : effects) CarryOne(self, e);
}

// Asks the scheduler for `id`'s queue position, then answers `rp` with `render(position)`
// (-1 when the scheduler did not answer in time).
template <class Render>
caf::result<ToolResult> WithPosition(Self self, const BuildId& id, Render render) {
  auto rp = self->make_response_promise<ToolResult>();
  self->request(self->state.scheduler, kPositionReply, position_atom::value, id)
      .then([=](int64_t pos) mutable { rp.deliver(render(pos)); },
            [=](caf::error&) mutable { rp.deliver(render(-1)); });
  return rp;
}

CandidateActor::behavior_type CandidateBehavior(Self self, std::shared_ptr<const DomainEnv> env,
                                                std::string name, SchedulerActor scheduler,
                                                DomainActor domain) {
  InstallHandlers(self, "candidate");
  CandidateState& st = self->state;
  st.env = std::move(env);
  st.name = std::move(name);
  st.scheduler = std::move(scheduler);
  st.domain = std::move(domain);
  if (st.env->history) st.env->history->Join();  // issue 19: the domain's history bound
  st.core = std::make_unique<CandidateBuilds>(CandidateOptions(*st.env, st.name));
  st.callers.Journal(st.env->store, st.env->writer, caf::actor_cast<caf::actor>(self));
  // After a restart: the candidate's recent builds from the journal.
  if (StateStore* journal = st.env->journal())
    Carry(self, st.core->Restore(journal->Builds(st.env->domain, st.name,
                                                 st.env->history ? st.env->history->PerCandidate()
                                                                 : st.env->history_per_candidate)));
  return {
      [=](build_atom, BuildRequest& req, caf::actor& sink) -> caf::result<ToolResult> {
        auto& s = self->state;
        auto rp = self->make_response_promise<ToolResult>();
        const WaiterId waiter = s.callers.AddWaiter(rp);
        const uint64_t pushes = s.env->busy ? s.env->busy->Pushes(s.env->domain) : 0;
        Carry(self, s.core->Request(req, waiter, s.callers.AddSink(sink), pushes));
        return rp;
      },
      [=](status_atom) -> caf::result<ToolResult> {
        auto active = self->state.core->active();
        if (!active) return ToolResult{self->state.core->StatusJson(-1), false};
        return WithPosition(self, *active, [=](int64_t pos) {
          return ToolResult{self->state.core->StatusJson(pos), false};
        });
      },
      // Issue 17 (MCP tasks/get): that build's result, as build_candidate renders it (with its
      // queue position while queued).
      [=](status_atom, const BuildId& id) -> caf::result<ToolResult> {
        bool queued = false;
        auto r = self->state.core->Result(id, &queued);
        if (!r) return ToolResult{ErrorJson("build '" + id + "' not found"), true};
        if (!queued) return *r;
        return WithPosition(self, id, [r = *r](int64_t pos) {
          ToolResult out = r;
          if (pos >= 0) out.structured["queue_position"] = pos;
          return out;
        });
      },
      [=](lookup_atom, const BuildId& id) -> ToolResult { return self->state.core->Lookup(id); },
      [=](log_atom, const BuildId& id, uint64_t offset, uint64_t limit,
          uint64_t tail) -> ToolResult { return self->state.core->Log(id, offset, limit, tail); },
      [=](cancel_atom, const BuildId& id) -> ToolResult {
        Effects out;
        ToolResult r = self->state.core->CancelBuild(id, &out);
        Carry(self, std::move(out));
        return r;
      },
      [=](start_atom, const BuildId& id, const std::string& key) {
        Carry(self, self->state.core->Start(id, key));
      },
      [=](waited_atom, const BuildId& id, const OutcomePtr& o) {
        Carry(self, self->state.core->Waited(id, o));
      },
      [=](const WorkDone& d) {
        spdlog::debug("candidate {}: work {} done for {}: {}", self->state.name, d.phase, d.id,
                      d.status.ToString());
        Carry(self, self->state.core->WorkFinished(d));
      },
      [=](journaled_atom, uint64_t ticket) { self->state.callers.Journaled(ticket); },
      [=](shutdown_atom) { Carry(self, self->state.core->Shutdown()); },
  };
}

}  // namespace

CandidateActor SpawnCandidate(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                              std::string candidate, SchedulerActor scheduler, DomainActor domain) {
  // No file system work here (this runs inside the domain actor): the checkout and the builder
  // create the candidate's directories on their worker threads.
  return sys.spawn(CandidateBehavior, std::move(env), std::move(candidate), std::move(scheduler),
                   std::move(domain));
}

}  // namespace kiln
