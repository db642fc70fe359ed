#include "actors/domain_actor.h"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <map>

#include <spdlog/spdlog.h>

#include "actors/candidate_actor.h"
#include "actors/domain_env.h"
#include "actors/protocol.h"
#include "actors/tool_views.h"

namespace kiln {
namespace {

struct DomainState {
  std::shared_ptr<const DomainEnv> env;
  caf::actor scheduler;
  std::map<std::string, caf::actor> candidates;
  std::map<std::string, nlohmann::json> summaries;
  std::map<BuildId, std::string> build_candidate;  // bounded by history trimming below
  static inline const char* name = "kiln.domain";
};
using Self = caf::stateful_actor<DomainState>;

ToolResult Error(const std::string& m) { return {ErrorJson(m), true}; }

// Returns the candidate's actor, spawning it on first use; null when the limit is reached.
caf::actor Candidate(Self* self, const std::string& name, bool create) {
  auto& s = self->state;
  auto it = s.candidates.find(name);
  if (it != s.candidates.end()) return it->second;
  if (!create || s.candidates.size() >= s.env->max_candidates) return caf::actor{};
  auto a = SpawnCandidate(self->system(), s.env, name, s.scheduler, caf::actor_cast<caf::actor>(self));
  self->link_to(a);
  s.candidates[name] = a;
  return a;
}

caf::result<ToolResult> Build(Self* self, BuildRequest& req, caf::actor& sink) {
  auto& s = self->state;
  auto cand = Candidate(self, req.candidate, true);
  if (!cand)
    return Error("too many candidates in domain '" + s.env->domain + "' (limit " +
                 std::to_string(s.env->max_candidates) + ")");
  self->delegate(cand, build_atom::value, std::move(req), std::move(sink));
  return caf::delegated<ToolResult>{};
}

caf::result<ToolResult> ByBuildId(Self* self, const BuildId& id, caf::message msg) {
  auto& s = self->state;
  auto it = s.build_candidate.find(id);
  if (it == s.build_candidate.end()) return Error("build '" + id + "' not found");
  auto cand = Candidate(self, it->second, false);
  if (!cand) return Error("build '" + id + "' not found");
  self->delegate(cand, std::move(msg));
  return caf::delegated<ToolResult>{};
}

caf::behavior DomainBehavior(Self* self, std::shared_ptr<const DomainEnv> env, caf::actor scheduler) {
  self->attach_functor([](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown && reason != caf::exit_reason::unreachable)
      spdlog::warn("domain actor exited: {}", caf::to_string(reason));
  });
  self->set_default_handler(caf::drop);
  self->set_error_handler([](caf::scheduled_actor*, caf::error& err) {
    spdlog::warn("domain actor: unhandled error {}", caf::to_string(err));
  });
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      spdlog::error("domain actor failed: {}", e.what());
    }
    return caf::make_error(caf::sec::runtime_error);
  });
  self->state.env = std::move(env);
  self->state.scheduler = std::move(scheduler);
  return {
      [=](tool_atom, ToolCall& call, caf::actor& sink) -> caf::result<ToolResult> {
        auto& s = self->state;
        const std::string& tool = call.tool;
        if (tool == "build_candidate") {
          BuildRequest req;
          Status st = ParseBuildArgs(call.arguments, &req);
          if (!st.ok()) return Error(st.message());
          return Build(self, req, sink);
        }
        if (tool == "candidate_status") {
          std::string c;
          Status st = ParseCandidateArg(call.arguments, &c);
          if (!st.ok()) return Error(st.message());
          auto cand = Candidate(self, c, false);
          if (!cand)
            return ToolResult{{{"candidate", c},
                               {"state", "idle"},
                               {"latest_build", nullptr},
                               {"latest_successful_build", nullptr},
                               {"deployed_build", nullptr},
                               {"queue_position", nullptr}},
                              false};
          self->delegate(cand, status_atom::value);
          return caf::delegated<ToolResult>{};
        }
        if (tool == "build_log") {
          std::string id;
          size_t offset = 0, limit = 0;
          Status st = ParseLogArgs(call.arguments, &id, &offset, &limit);
          if (!st.ok()) return Error(st.message());
          return ByBuildId(self, id,
                           caf::make_message(log_atom::value, id, static_cast<uint64_t>(offset),
                                             static_cast<uint64_t>(limit)));
        }
        if (tool == "cancel_build") {
          std::string id;
          Status st = ParseBuildIdArg(call.arguments, &id);
          if (!st.ok()) return Error(st.message());
          return ByBuildId(self, id, caf::make_message(cancel_atom::value, id));
        }
        if (tool == "list_candidates") {
          if (!call.arguments.is_object() || !call.arguments.empty())
            return Error("list_candidates takes no arguments");
          nlohmann::json list = nlohmann::json::array();
          for (const auto& [name, j] : s.summaries) list.push_back(j);
          return ToolResult{{{"domain", s.env->domain}, {"candidates", list}}, false};
        }
        return Error("unknown tool '" + tool.substr(0, 64) + "'");
      },
      [=](build_atom, BuildRequest& req, caf::actor& sink) -> caf::result<ToolResult> {
        return Build(self, req, sink);
      },
      [=](summary_atom, CandidateSummary& sum) {
        auto& s = self->state;
        if (sum.json.contains("latest_build") && sum.json["latest_build"].is_object())
          s.build_candidate[sum.json["latest_build"]["build_id"].get<std::string>()] = sum.candidate;
        s.summaries[sum.candidate] = std::move(sum.json);
      },
      [=](started_atom, const BuildId& id, const std::string& candidate) {
        self->state.build_candidate[id] = candidate;
      },
      [=](shutdown_atom) {
        for (auto& [n, a] : self->state.candidates) self->send(a, shutdown_atom::value);
      },
  };
}

}  // namespace

caf::actor SpawnDomain(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                       caf::actor scheduler) {
  return sys.spawn(DomainBehavior, std::move(env), std::move(scheduler));
}

}  // namespace kiln
