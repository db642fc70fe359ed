#include "actors/domain_actor.h"

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
#include "actors/candidate_actor.h"
#include "actors/candidate_work.h"
#include "actors/domain_core.h"
#include "actors/domain_env.h"
#include "actors/protocol.h"
#include "actors/tool_views.h"
#include "state/state_store.h"

namespace kiln {
namespace {

struct DomainState {
  std::shared_ptr<const DomainEnv> env;
  SchedulerActor scheduler;
  std::map<std::string, CandidateActor> candidates;
  std::unique_ptr<DomainCore> core;
  Callers callers;  // and the deploy answers waiting for their journal record
  static inline const char* name = "kiln.domain";
};
using Self = DomainActor::stateful_pointer<DomainState>;

// Returns the candidate's actor, spawning it on first use; null when the limit is reached.
CandidateActor Candidate(Self self, const std::string& name, bool create) {
  auto& s = self->state;
  auto it = s.candidates.find(name);
  if (it != s.candidates.end()) return it->second;
  if (!create || !s.core->MayAdd()) return CandidateActor{};
  auto a =
      SpawnCandidate(self->system(), s.env, name, s.scheduler, caf::actor_cast<DomainActor>(self));
  self->link_to(a);
  s.candidates[name] = a;
  s.core->AddCandidate(name);
  return a;
}

caf::result<ToolResult> Build(Self self, BuildRequest& req, caf::actor& sink) {
  auto cand = Candidate(self, req.candidate, true);
  if (!cand) return self->state.core->TooManyCandidates();
  return self->delegate(cand, build_atom::value, std::move(req), std::move(sink));
}

// A request about one build, delegated to the candidate that owns it.
template <class... Ts>
caf::result<ToolResult> ByBuildId(Self self, const BuildId& id, Ts... xs) {
  auto owner = self->state.core->OwnerOf(id);
  auto& env = *self->state.env;  // issue 19: a build the domain forgot, from the journal
  if (!owner)
    if (StateStore* journal = env.journal())
      if (auto b = JournalRecordOf(journal->Build(id), env.domain)) owner = b->candidate;
  auto cand = owner ? Candidate(self, *owner, true) : CandidateActor{};
  if (!cand) return ToolError("build '" + id + "' not found");
  return self->delegate(cand, xs...);
}

// Carries out the core's deploy effects.
void Carry(Self self, DomainEffects effects) {
  auto& s = self->state;
  for (auto& effect : effects)
    std::visit(
        [&](auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, DeployAnswerEffect>) {
            s.callers.Answer(e.record, std::move(e.result), e.waiters);
            s.callers.DropSinks(e.done_sinks);
          } else if constexpr (std::is_same_v<E, DeployProgressEffect>) {
            s.callers.Progress(e.sinks, e.progress);
          } else if constexpr (std::is_same_v<E, DeployStartEffect>) {
            auto me = caf::actor_cast<DomainActor>(self);
            s.env->work->Run([me, deployer = s.env->deployer, cancel = e.cancel, req = e.req] {
              DeployResult res = DeployPhase(
                  *deployer, req, cancel.get(), [me, id = req.deploy_id](const std::string& line) {
                    caf::anon_send(me, deploy_prog_atom::value, id, line);
                  });
              caf::anon_send(me, deploy_done_atom::value, req.deploy_id, res);
            });
          }
        },
        effect);
}

// deploy_candidate and apply: look the build up in its candidate, then admit the deploy.
caf::result<ToolResult> Deploy(Self self, const std::string& candidate,
                               const std::optional<std::string>& build_id, bool wait,
                               const caf::actor& sink) {
  auto cand = Candidate(self, candidate, false);
  if (auto no = self->state.core->DeployRefusal(candidate, build_id, bool(cand))) return *no;
  const uint64_t arrival = self->state.core->Arrive();
  auto rp = self->make_response_promise<ToolResult>();
  self->request(cand, kQuickReply, lookup_atom::value, build_id.value_or(""))
      .then(
          [=](ToolResult& r) mutable {
            if (r.is_error) {
              rp.deliver(DomainCore::NotDeployable(std::move(r)));
              return;
            }
            auto& s = self->state;
            Carry(self, s.core->AdmitDeploy(arrival, r.structured, wait, s.callers.AddWaiter(rp),
                                            s.callers.AddSink(sink)));
          },
          [=](caf::error& e) mutable {
            rp.deliver(ToolError("internal error: " + caf::to_string(e)));
          });
  return rp;
}

caf::result<ToolResult> CandidateStatus(Self self, const std::string& c) {
  auto cand = Candidate(self, c, false);
  if (!cand) return self->state.core->UnknownCandidateStatus(c);  // never built (or unknown)
  auto rp = self->make_response_promise<ToolResult>();
  self->request(cand, kQuickReply, status_atom::value)
      .then(
          [=](ToolResult& r) mutable {
            rp.deliver(self->state.core->WithDeployedBuild(std::move(r), c));
          },
          [=](caf::error& e) mutable {
            rp.deliver(ToolError("internal error: " + caf::to_string(e)));
          });
  return rp;
}

// Issue 17 (MCP tasks/get of a deploy): the deploy's result; the journal's records of the
// domain (its newest and its deployed deploy) answer for deploys the core no longer holds.
ToolResult DeployResultById(Self self, const std::string& id) {
  const DomainEnv& env = *self->state.env;
  std::vector<JournaledDeploy> journaled;
  if (StateStore* journal = env.journal())
    for (auto rec : {journal->LatestDeploy(env.domain), journal->Deployed(env.domain)})
      if (rec) {
        auto build = journal->Build(rec->build_id);
        journaled.push_back({*rec, build ? std::optional(build->candidate) : std::nullopt});
      }
  return self->state.core->DeployResultFor(id, journaled);
}

// One tool call, routed and parsed by the core (DomainCore::Parse).
caf::result<ToolResult> Tool(Self self, const ToolCall& call, caf::actor& sink) {
  auto parsed = DomainCore::Parse(call);
  if (auto* refused = std::get_if<ToolResult>(&parsed)) return std::move(*refused);
  DomainRequest& r = std::get<DomainRequest>(parsed);
  DomainCore& core = *self->state.core;
  switch (r.tool) {
    case DomainTool::kBuildCandidate:
      return Build(self, r.build, sink);
    case DomainTool::kCandidateStatus:
      return CandidateStatus(self, *r.candidate);
    case DomainTool::kDeployCandidate:
      return Deploy(self, *r.candidate, r.build_id, r.wait, sink);
    case DomainTool::kApply: {
      ToolResult nothing;
      auto chosen = core.ChooseApply(r.candidate, &nothing);
      if (!chosen) return nothing;
      return Deploy(self, *chosen, std::nullopt, true, sink);
    }
    case DomainTool::kDomainStatus:
      return ToolResult{core.DomainStatus(), false};
    case DomainTool::kBuildLog:
      return ByBuildId(self, *r.build_id, log_atom::value, *r.build_id, r.offset, r.limit, r.tail);
    case DomainTool::kBuildResult:
      // The task names its candidate: route there (also for builds older than the ones the
      // core remembers); the candidate knows only its own builds.
      if (auto cand = r.candidate ? Candidate(self, *r.candidate, false) : CandidateActor{})
        return self->delegate(cand, status_atom::value, *r.build_id);
      return ByBuildId(self, *r.build_id, status_atom::value, *r.build_id);
    case DomainTool::kCancelBuild:
      return ByBuildId(self, *r.build_id, cancel_atom::value, *r.build_id);
    case DomainTool::kCancelDeploy:
      core.CancelDeploy(r.deploy_id);
      [[fallthrough]];
    case DomainTool::kDeployResult:
      return DeployResultById(self, r.deploy_id);
    case DomainTool::kListCandidates:
      return core.ListCandidates();
  }
  return ToolError("unknown tool '" + call.tool.substr(0, 64) + "'");
}

// Issue 18: build on push. Each pushed candidate branch starts its build through the same path
// as build_candidate (candidate actor -> scheduler), in the push's order; the candidate actor
// lets a later build_candidate join it.
void BuildOnPush(Self self, const std::vector<PushedRef>& refs) {
  const DomainEnv& env = *self->state.env;
  if (self->state.core->stopping()) return;
  for (BuildRequest& req : PushBuilds(refs, env.dc && env.dc->build.on_push)) {
    auto cand = Candidate(self, req.candidate, true);
    if (!cand) {
      spdlog::warn("domain {}: push to {} not built on push: too many candidates (limit {})",
                   env.domain, req.candidate, env.max_candidates);
      continue;
    }
    spdlog::info("domain {}: push to {} ({}) -> build on push", env.domain, req.candidate,
                 req.commit->substr(0, 12));
    caf::anon_send(cand, build_atom::value, std::move(req), caf::actor{});
  }
}

DomainActor::behavior_type DomainBehavior(Self self, std::shared_ptr<const DomainEnv> env,
                                          SchedulerActor scheduler) {
  InstallHandlers(self, "domain");
  DomainState& st = self->state;
  st.env = std::move(env);
  st.scheduler = std::move(scheduler);
  st.core = std::make_unique<DomainCore>(DomainOptions(*st.env));
  st.callers.Journal(st.env->store, st.env->writer, caf::actor_cast<caf::actor>(self));
  // After a restart: the deployed build, and the candidates (so list_candidates, apply and
  // candidate_status answer as before). Reads are in memory (the store loaded at start).
  if (StateStore* journal = st.env->journal())
    if (auto d = journal->Deployed(st.env->domain))
      st.core->RestoreDeployed(*d, journal->Build(d->build_id));
  for (const auto& c : st.env->known_candidates) Candidate(self, c, true);
  return {
      [=](tool_atom, ToolCall& call, caf::actor& sink) -> caf::result<ToolResult> {
        return Tool(self, call, sink);
      },
      [=](build_atom, BuildRequest& req, caf::actor& sink) -> caf::result<ToolResult> {
        return Build(self, req, sink);
      },
      [=](summary_atom, CandidateSummary& sum) { self->state.core->OnSummary(std::move(sum)); },
      [=](pushed_atom, std::vector<PushedRef>& refs) { BuildOnPush(self, refs); },
      [=](deploy_prog_atom, const std::string& id, const std::string& line) {
        Carry(self, self->state.core->DeployProgress(id, line));
      },
      [=](deploy_done_atom, const std::string& id, DeployResult& res) {
        Carry(self, self->state.core->DeployDone(id, std::move(res)));
      },
      [=](journaled_atom, uint64_t ticket) { self->state.callers.Journaled(ticket); },
      [=](shutdown_atom) {
        self->state.core->Shutdown();
        for (auto& [n, a] : self->state.candidates) self->send(a, shutdown_atom::value);
      },
  };
}

}  // namespace

DomainActor SpawnDomain(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                        SchedulerActor scheduler) {
  return sys.spawn(DomainBehavior, std::move(env), std::move(scheduler));
}

}  // namespace kiln
