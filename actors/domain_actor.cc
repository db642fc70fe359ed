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
#include "actors/build_failure.h"
#include "actors/build_history.h"  // issue 19
#include "actors/candidate_actor.h"
#include "actors/candidate_work.h"
#include "actors/domain_core.h"
#include "actors/domain_env.h"
#include "actors/journaled_answers.h"
#include "actors/protocol.h"
#include "actors/state_writer.h"
#include "actors/tool_views.h"
#include "state/state_store.h"

namespace kiln {
namespace {

struct DomainState {
  std::shared_ptr<const DomainEnv> env;
  SchedulerActor scheduler;
  std::map<std::string, CandidateActor> candidates;
  std::unique_ptr<DomainCore> core;
  Callers callers;
  JournaledAnswers answers;  // deploy answers waiting for their journal record
  static inline const char* name = "kiln.domain";
};
using Self = DomainActor::stateful_pointer<DomainState>;

ToolResult Error(const std::string& m) { return ToolError(m); }

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
  if (!owner && env.store)
    if (auto b = JournalRecordOf(env.store->Build(id), env.domain)) owner = b->candidate;
  auto cand = owner ? Candidate(self, *owner, true) : CandidateActor{};
  if (!cand) return Error("build '" + id + "' not found");
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
            auto store = s.env->store;
            std::function<void()> write = [] {};
            if (e.record)
              write = [store, rec = *e.record]() mutable {
                Status st = store->RecordDeploy(&rec);
                if (!st.ok())
                  spdlog::error("state journal: cannot record deploy {}: {}", rec.deploy_id,
                                st.message());
              };
            s.callers.Answer(s.answers, store && e.record ? s.env->writer.get() : nullptr,
                             caf::actor_cast<caf::actor>(self), std::move(write),
                             std::move(e.result), e.waiters);
            s.callers.DropSinks(e.done_sinks);
          } else if constexpr (std::is_same_v<E, DeployProgressEffect>) {
            s.callers.Progress(e.sinks, e.progress);
          } else if constexpr (std::is_same_v<E, DeployStartEffect>) {
            spdlog::info("deploy {} domain={} candidate={} build={} -> rolling out {}",
                         e.req.deploy_id, s.env->domain, e.req.candidate, e.req.build_id,
                         e.req.image);
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
  auto& s = self->state;
  if (!s.env->deployer)
    return Error("domain '" + s.env->domain + "' has no deploy target (deploy.type is \"none\")");
  auto cand = Candidate(self, candidate, false);
  if (auto refusal = s.core->DeployRefusal(candidate, build_id, bool(cand))) return *refusal;
  const uint64_t arrival = s.core->Arrive();
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
            rp.deliver(Error("internal error: " + caf::to_string(e)));
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
            const auto& deployed = self->state.core->deployed();
            if (deployed.is_object() && deployed.value("candidate", "") == c)
              r.structured["deployed_build"] = deployed;
            rp.deliver(r);
          },
          [=](caf::error& e) mutable {
            rp.deliver(Error("internal error: " + caf::to_string(e)));
          });
  return rp;
}

// Issue 17 (MCP tasks/get of a deploy): the deploy `id` as deploy_candidate reports it; after a
// restart from the journal (the domain's newest deploy and its deployed one). A deploy that was
// in progress when kiln stopped is failed (Interrupted).
ToolResult DeployResultById(Self self, const std::string& id) {
  auto& s = self->state;
  if (auto known = s.core->DeployById(id)) return *known;
  if (s.env->store)
    for (auto rec :
         {s.env->store->LatestDeploy(s.env->domain), s.env->store->Deployed(s.env->domain)}) {
      if (!rec || rec->deploy_id != id) continue;
      nlohmann::json j = {
          {"deploy_id", rec->deploy_id},
          {"build_id", rec->build_id},
          {"image", {{"ref", rec->image}}},
          {"status", rec->status},
          {"reason", rec->reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(rec->reason)}};
      if (auto b = s.env->store->Build(rec->build_id)) j["candidate"] = b->candidate;
      if (rec->status == "in_progress") {
        j["status"] = "failed";
        j["reason"] = "Interrupted";
        j["error"] = "kiln stopped while this deploy was in progress";
        j["error_kind"] = "infrastructure";
        j["next_step"] = "deploy the build again (deploy_candidate)";
      }
      return ToolResult{j, j["status"] != "rolled_out"};
    }
  return Error("deploy '" + id.substr(0, 64) + "' not found");  // the caller's id, bounded
}

// One tool call, by the routing table (DomainCore::Route).
caf::result<ToolResult> Tool(Self self, ToolCall& call, caf::actor& sink) {
  auto& s = self->state;
  auto route = DomainCore::Route(call.tool);
  if (!route) return Error("unknown tool '" + call.tool.substr(0, 64) + "'");
  const nlohmann::json& args = call.arguments;
  std::string id, c;
  Status st;
  switch (*route) {
    case DomainTool::kBuildCandidate: {
      BuildRequest req;
      if (!(st = ParseBuildArgs(args, &req)).ok()) return Error(st.message());
      return Build(self, req, sink);
    }
    case DomainTool::kCandidateStatus:
      if (!(st = ParseCandidateArg(args, &c)).ok()) return Error(st.message());
      return CandidateStatus(self, c);
    case DomainTool::kDeployCandidate: {
      DeployArgs a;
      if (!(st = ParseDeployArgs(args, &a)).ok()) return Error(st.message());
      return Deploy(self, a.candidate, a.build_id, a.wait, sink);
    }
    case DomainTool::kApply: {
      std::optional<std::string> asked;
      if (!(st = ParseApplyArgs(args, &asked)).ok()) return Error(st.message());
      ToolResult nothing;
      auto chosen = s.core->ChooseApply(asked, &nothing);
      if (!chosen) return nothing;
      return Deploy(self, *chosen, std::nullopt, true, sink);
    }
    case DomainTool::kDomainStatus:
      return ToolResult{s.core->DomainStatus(), false};
    case DomainTool::kBuildLog: {
      size_t offset = 0, limit = 0, tail = 0;
      if (!(st = ParseLogArgs(args, &id, &offset, &limit, &tail)).ok()) return Error(st.message());
      return ByBuildId(self, id, log_atom::value, id, uint64_t{offset}, uint64_t{limit},
                       uint64_t{tail});
    }
    case DomainTool::kBuildResult: {
      nlohmann::json rest = args;
      if (rest.is_object() && rest.contains("candidate")) {
        if (rest["candidate"].is_string()) c = rest["candidate"].get<std::string>();
        rest.erase("candidate");
      }
      if (!(st = ParseBuildIdArg(rest, &id)).ok()) return Error(st.message());
      // The task names its candidate: route there (also for builds older than the ones the
      // core remembers); the candidate knows only its own builds.
      if (auto cand = c.empty() ? CandidateActor{} : Candidate(self, c, false))
        return self->delegate(cand, status_atom::value, id);
      return ByBuildId(self, id, status_atom::value, id);
    }
    case DomainTool::kCancelBuild:
      if (!(st = ParseBuildIdArg(args, &id)).ok()) return Error(st.message());
      return ByBuildId(self, id, cancel_atom::value, id);
    case DomainTool::kDeployResult:
    case DomainTool::kCancelDeploy: {
      if (!args.is_object() || !args.contains("deploy_id") || !args["deploy_id"].is_string())
        return Error(call.tool + " needs deploy_id (string)");
      id = args["deploy_id"].get<std::string>();
      if (*route == DomainTool::kCancelDeploy) s.core->CancelDeploy(id);
      return DeployResultById(self, id);
    }
    case DomainTool::kListCandidates:
      if (!args.is_object() || !args.empty()) return Error("list_candidates takes no arguments");
      return ToolResult{{{"domain", s.env->domain}, {"candidates", s.core->CandidateList()}},
                        false};
  }
  return Error("unknown tool '" + call.tool.substr(0, 64) + "'");
}

DomainActor::behavior_type DomainBehavior(Self self, std::shared_ptr<const DomainEnv> env,
                                          SchedulerActor scheduler) {
  InstallHandlers(self, "domain");
  auto& s = self->state;
  s.env = std::move(env);
  s.scheduler = std::move(scheduler);
  DomainCore::Options o;
  o.domain = s.env->domain;
  o.deploy_type = s.env->dc ? s.env->dc->deploy.type : "none";
  o.remote = GitRemoteUrl(s.env->config->server, s.env->domain);
  o.history_per_candidate = s.env->history_per_candidate;
  o.max_candidates = s.env->max_candidates;
  s.core = std::make_unique<DomainCore>(o);
  // After a restart: the deployed build, and the candidates (so list_candidates, apply and
  // candidate_status answer as before). Reads are in memory (the store loaded at start).
  if (s.env->store)
    if (auto d = s.env->store->Deployed(s.env->domain)) {
      auto b = s.env->store->Build(d->build_id);
      s.core->SetDeployed({{"deploy_id", d->deploy_id},
                           {"build_id", d->build_id},
                           {"image", d->image},
                           {"status", "rolled_out"},
                           {"candidate", b ? b->candidate : ""},
                           {"digest", b ? b->digest : ""},
                           {"commit", b ? b->commit : ""}});
    }
  for (const auto& c : s.env->known_candidates) Candidate(self, c, true);
  return {
      [=](tool_atom, ToolCall& call, caf::actor& sink) -> caf::result<ToolResult> {
        return Tool(self, call, sink);
      },
      [=](build_atom, BuildRequest& req, caf::actor& sink) -> caf::result<ToolResult> {
        return Build(self, req, sink);
      },
      [=](summary_atom, CandidateSummary& sum) { self->state.core->OnSummary(std::move(sum)); },
      [=](pushed_atom, std::vector<PushedRef>& refs) {
        // Issue 18: build on push. Each pushed candidate branch starts its build through the
        // same path as build_candidate (candidate actor -> scheduler); the push's order is the
        // order of the requests. The candidate actor lets a later build_candidate join it.
        auto& s = self->state;
        if (s.core->stopping()) return;
        for (BuildRequest& req : PushBuilds(refs, s.env->dc && s.env->dc->build.on_push)) {
          auto cand = Candidate(self, req.candidate, true);
          if (!cand) {
            spdlog::warn("domain {}: push to {} not built on push: too many candidates (limit {})",
                         s.env->domain, req.candidate, s.env->max_candidates);
            continue;
          }
          spdlog::info("domain {}: push to {} ({}) -> build on push", s.env->domain, req.candidate,
                       req.commit->substr(0, 12));
          caf::anon_send(cand, build_atom::value, std::move(req), caf::actor{});
        }
      },
      [=](deploy_prog_atom, const std::string& id, const std::string& line) {
        Carry(self, self->state.core->DeployProgress(id, line));
      },
      [=](deploy_done_atom, const std::string& id, DeployResult& res) {
        Carry(self, self->state.core->DeployDone(id, std::move(res)));
      },
      [=](journaled_atom, uint64_t ticket) { self->state.answers.Release(ticket); },
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
