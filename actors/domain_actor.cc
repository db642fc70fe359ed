#include "actors/domain_actor.h"
#include "actors/build_failure.h"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <caf/response_promise.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <deque>
#include <map>
#include <random>

#include <spdlog/spdlog.h>

#include "actors/candidate_actor.h"
#include "actors/deploy_order.h"
#include "actors/domain_env.h"
#include "actors/journaled_answers.h"
#include "actors/protocol.h"
#include "actors/state_writer.h"
#include "state/state_store.h"
#include "actors/tool_views.h"
#include "common/json_text.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

// One deploy: requested, queued, running or finished.
struct DeployRun {
  std::string id;
  DeployRequest req;
  std::shared_ptr<CancelToken> cancel = std::make_shared<CancelToken>();
  std::vector<caf::response_promise> waiters;
  std::vector<caf::actor> sinks;
  double progress = 0;
  Clock::time_point created = Clock::now();
  std::optional<DeployResult> result;  // set once finished
  std::string superseded_by;           // set when a newer deploy cancelled this one
};

struct DomainState {
  std::shared_ptr<const DomainEnv> env;
  caf::actor scheduler;
  std::map<std::string, caf::actor> candidates;
  std::map<std::string, nlohmann::json> summaries;
  // Routes build_log/cancel_build by build id; bounded by RememberBuild.
  std::map<BuildId, std::string> build_candidate;
  std::deque<BuildId> build_order;  // oldest first
  // Deploys.
  DeployOrder order;
  std::map<std::string, DeployRun> deploys;  // running, queued and the last finished ones
  std::deque<std::string> finished_deploys;   // oldest first, bounded
  nlohmann::json deployed = nullptr;          // the last rolled-out deploy of this domain
  std::map<std::string, int64_t> success_seq; // candidate -> when its latest success was seen
  std::map<std::string, std::string> success_id;
  int64_t success_clock = 0;
  bool stopping = false;
  JournaledAnswers answers;  // deploy answers waiting for their journal record
  static inline const char* name = "kiln.domain";
};
using Self = caf::stateful_actor<DomainState>;

// A tool-level error in the failure vocabulary (actors/build_failure.h): the agent's
// arguments by default; "internal error" replies are kiln's side.
ToolResult Error(const std::string& m, const std::string& kind = "", const std::string& candidate = "") {
  nlohmann::json j = ErrorJson(m);
  const std::string k = !kind.empty() ? kind : m.rfind("internal error", 0) == 0 ? "infrastructure" : "invalid_argument";
  j["error_kind"] = k;
  j["next_step"] = NextStepFor(k, candidate);
  return {j, true};
}

// Issue 16: an error whose next step may name this domain's exact git remote.
ToolResult DomainError(Self* self, const std::string& m, const std::string& kind, const std::string& candidate) {
  ToolResult r = Error(m, kind, candidate);
  r.structured["next_step"] =
      NextStepFor(kind, candidate, GitRemoteUrl(self->state.env->config->server, self->state.env->domain));
  return r;
}

// "'a', 'b' and 2 more" of the domain's known candidates (bounded), "none yet" when empty.
std::string KnownCandidates(Self* self) {
  std::string out;
  size_t n = 0;
  for (const auto& [name, actor] : self->state.candidates) {
    if (n == 20) {
      out += " and " + std::to_string(self->state.candidates.size() - n) + " more";
      break;
    }
    out += (n ? ", '" : "'") + name + "'";
    ++n;
  }
  return out.empty() ? std::string("none yet") : out;
}

// Remembers which candidate a build belongs to, forgetting the oldest beyond what the
// candidates keep anyway (history_per_candidate each), so memory stays flat over a long loop.
void RememberBuild(Self* self, const BuildId& id, const std::string& candidate) {
  auto& s = self->state;
  if (!s.build_candidate.emplace(id, candidate).second) return;
  s.build_order.push_back(id);
  const size_t cap = 2 * s.env->history_per_candidate * std::max<size_t>(1, s.candidates.size());
  while (s.build_order.size() > cap) {
    s.build_candidate.erase(s.build_order.front());
    s.build_order.pop_front();
  }
}

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

std::string NewDeployId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "d-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

nlohmann::json DeployJson(const DeployRun& run) {
  nlohmann::json j;
  j["deploy_id"] = run.id;
  j["build_id"] = run.req.build_id;
  j["candidate"] = run.req.candidate;
  j["image"] = {{"ref", run.req.image}, {"digest", run.req.digest}};
  if (run.result) {
    j["status"] = DeployStateName(run.result->state);
    j["reason"] = run.result->reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.result->reason);
    if (!run.result->message.empty()) j["message"] = run.result->message;
    j["changed"] = run.result->changed;
    if (run.result->state == DeployState::kFailed) {
      // The classified failure (Kubernetes: deploy_crash, deploy_unready, deploy_image, ...);
      // other targets by their reason.
      nlohmann::json f = DeployFailureJson(*run.result);
      if (f.empty()) {
        const std::string& r = run.result->reason;
        std::string kind = r == "Superseded"          ? "superseded"
                           : r == "StartFailed"       ? "deploy_crash"
                           : r == "HealthCheckFailed" ? "deploy_unready"
                           : r == "Timeout"           ? "deploy_unready"
                           : r == "ImagePullBackOff" || r == "ErrImagePull" ? "deploy_image"
                           : r == "CrashLoopBackOff"  ? "deploy_crash"
                                                      : "infrastructure";
        f["error"] = run.result->message.empty() ? "the deploy failed (" + r + ")" : run.result->message;
        f["error_kind"] = kind;
        f["next_step"] =
            kind == "deploy_crash"     ? "the program exits or crashes at start: read message, fix the code, build and deploy again"
            : kind == "deploy_unready" ? "the program runs but never became healthy: check its health endpoint and start-up time, build and deploy again"
            : kind == "deploy_image"   ? "the image cannot be pulled: build the candidate again, then deploy the new build"
            : kind == "superseded"     ? "a newer deploy is in progress: wait for it (candidate_status)"
                                       : NextStepFor("infrastructure", run.req.candidate);
      }
      for (auto& [k, v] : f.items()) j[k] = v;
    }
  } else {
    j["status"] = "in_progress";
    j["reason"] = nullptr;
  }
  j["elapsed_ms"] = ElapsedMs(run.created);
  return j;
}

void StartDeploy(Self* self, DeployRun& run) {
  auto& s = self->state;
  spdlog::info("deploy {} domain={} candidate={} build={} -> rolling out {}", run.id, s.env->domain,
               run.req.candidate, run.req.build_id, run.req.image);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto deployer = s.env->deployer;
  auto cancel = run.cancel;
  DeployRequest req = run.req;
  s.env->work->Run([me, deployer, cancel, req] {
    DeployResult res;
    try {
      res = deployer->Deploy(
          req, [me, id = req.deploy_id](const std::string& line) {
            caf::anon_send(me, deploy_prog_atom::value, id, line);
          },
          cancel.get());
    } catch (const std::exception& e) {
      res.state = DeployState::kFailed;
      res.reason = "Internal";
      res.message = std::string("deployer failed: ") + e.what();
    }
    caf::anon_send(me, deploy_done_atom::value, req.deploy_id, res);
  });
}

void FinishDeploy(Self* self, DeployRun& run, DeployResult res) {
  auto& s = self->state;
  if (run.result) return;
  res.elapsed_ms = ElapsedMs(run.created);
  res.reason = ToValidUtf8(res.reason);  // a deployed program's output may be any bytes
  res.message = ToValidUtf8(res.message);
  run.result = res;
  if (res.state == DeployState::kRolledOut) {
    s.deployed = {{"deploy_id", run.id},       {"build_id", run.req.build_id},
                  {"candidate", run.req.candidate}, {"image", run.req.image},
                  {"digest", run.req.digest},  {"commit", run.req.commit},
                  {"status", "rolled_out"}};
    spdlog::info("deploy {} domain={} candidate={} build={} -> rolled_out{} in {} ms", run.id,
                 s.env->domain, run.req.candidate, run.req.build_id,
                 res.changed ? "" : " (already deployed)", res.elapsed_ms);
  } else {
    spdlog::warn("deploy {} domain={} candidate={} build={} -> failed: {}: {}", run.id, s.env->domain,
                 run.req.candidate, run.req.build_id, res.reason, res.message);
  }
  // Write-ahead: the callers hear of the deploy only once its record is durable.
  DeployRecord rec;
  rec.deploy_id = run.id;
  rec.domain = s.env->domain;
  rec.build_id = run.req.build_id;
  rec.image = run.req.image;
  rec.status = DeployStateName(res.state);
  rec.reason = res.reason;
  auto store = s.env->store;
  s.answers.After(store ? s.env->writer.get() : nullptr, caf::actor_cast<caf::actor>(self),
                  [store, rec]() mutable {
                    Status st = store->RecordDeploy(&rec);
                    if (!st.ok())
                      spdlog::error("state journal: cannot record deploy {}: {}", rec.deploy_id,
                                    st.message());
                  },
                  ToolResult{DeployJson(run), res.state != DeployState::kRolledOut},
                  std::move(run.waiters));
  run.waiters.clear();
  run.sinks.clear();
  s.finished_deploys.push_back(run.id);
  while (s.finished_deploys.size() > 32) {
    s.deploys.erase(s.finished_deploys.front());
    s.finished_deploys.pop_front();
  }
}

// Attaches a caller to a deploy: waits for it, or gets its current state at once.
void Attach(DeployRun& run, bool wait, const caf::actor& sink, caf::response_promise rp) {
  if (!wait || run.result) {
    rp.deliver(ToolResult{DeployJson(run), run.result && run.result->state != DeployState::kRolledOut});
    return;
  }
  run.waiters.push_back(rp);
  if (sink) run.sinks.push_back(sink);
}

// Issue 17: the in_progress record of a new deploy; `promises` hear of it once it is durable.
void JournalDeployStart(Self* self, const DeployRun& run, std::vector<caf::response_promise> promises) {
  auto& s = self->state;
  DeployRecord rec;
  rec.deploy_id = run.id;
  rec.domain = s.env->domain;
  rec.build_id = run.req.build_id;
  rec.image = run.req.image;
  rec.status = DeployStateName(DeployState::kInProgress);
  auto store = s.env->store;
  s.answers.After(store ? s.env->writer.get() : nullptr, caf::actor_cast<caf::actor>(self),
                  [store, rec]() mutable {
                    Status st = store->RecordDeploy(&rec);
                    if (!st.ok())
                      spdlog::error("state journal: cannot record deploy {}: {}", rec.deploy_id, st.message());
                  },
                  ToolResult{DeployJson(run), false}, std::move(promises));
}

// Issue 17 (MCP tasks/get of a deploy): the deploy `id` as deploy_candidate reports it; after a
// restart from the journal (the domain's newest deploy and its deployed one). A deploy that was
// in progress when kiln stopped is failed (Interrupted). Error without "status" when unknown.
ToolResult DeployResultById(Self* self, const std::string& id) {
  auto& s = self->state;
  auto it = s.deploys.find(id);
  if (it != s.deploys.end())
    return ToolResult{DeployJson(it->second),
                      it->second.result && it->second.result->state != DeployState::kRolledOut};
  if (s.env->store) {
    for (auto rec : {s.env->store->LatestDeploy(s.env->domain), s.env->store->Deployed(s.env->domain)}) {
      if (!rec || rec->deploy_id != id) continue;
      nlohmann::json j = {{"deploy_id", rec->deploy_id}, {"build_id", rec->build_id},
                          {"image", {{"ref", rec->image}}}, {"status", rec->status},
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
  }
  return Error("deploy '" + id + "' not found");
}

// The build to deploy is known (`info` from the candidate's lookup): order it and run it.
void AdmitDeploy(Self* self, uint64_t arrival, const nlohmann::json& info, bool wait,
                 const caf::actor& sink, caf::response_promise rp) {
  auto& s = self->state;
  if (s.stopping) {
    rp.deliver(Error("kiln is shutting down"));
    return;
  }
  DeployRequest req;
  req.domain = s.env->domain;
  req.candidate = info.value("candidate", "");
  req.build_id = info.value("build_id", "");
  req.commit = info.value("commit", "");
  req.image = info.value("image", "");
  req.digest = info.value("digest", "");
  int64_t build_order = info.value("order", int64_t{0});
  req.deploy_id = NewDeployId();
  while (s.deploys.count(req.deploy_id)) req.deploy_id = NewDeployId();
  auto d = s.order.Admit(arrival, req.build_id, build_order, req.deploy_id);
  if (d.action == DeployOrder::Action::kRefuse) {
    rp.deliver(ToolResult{{{"deploy_id", nullptr},
                           {"build_id", req.build_id},
                           {"candidate", req.candidate},
                           {"image", {{"ref", req.image}, {"digest", req.digest}}},
                           {"status", "failed"},
                           {"reason", "Superseded"},
                           {"message", d.reason},
                           {"changed", false},
                           {"elapsed_ms", 0}},
                          true});
    return;
  }
  if (d.action == DeployOrder::Action::kJoin) {
    Attach(s.deploys.at(d.deploy_id), wait, sink, rp);
    return;
  }
  DeployRun& run = s.deploys[req.deploy_id];
  run.id = req.deploy_id;
  run.req = req;
  if (d.superseded) {
    auto it = s.deploys.find(*d.superseded);
    if (it != s.deploys.end())
      FinishDeploy(self, it->second,
                   DeployResult{DeployState::kFailed, "Superseded",
                                "superseded by deploy " + run.id + " of build " + req.build_id, false, 0});
  }
  if (d.cancel) {
    auto it = s.deploys.find(*d.cancel);
    if (it != s.deploys.end()) {
      spdlog::info("deploy {} superseded by {} (newer build {})", *d.cancel, run.id, req.build_id);
      it->second.superseded_by = run.id;
      it->second.cancel->Cancel();
    }
  }
  // Issue 17: a new deploy is journaled (in_progress) before a caller that does not wait hears
  // of it, so an MCP task for it resolves right after (and after a restart).
  if (wait) Attach(run, wait, sink, rp);
  JournalDeployStart(self, run, wait ? std::vector<caf::response_promise>{} : std::vector<caf::response_promise>{rp});
  if (d.action == DeployOrder::Action::kStart) StartDeploy(self, run);
}

// deploy_candidate and apply: look the build up in its candidate, then admit the deploy.
caf::result<ToolResult> Deploy(Self* self, const std::string& candidate,
                               const std::optional<std::string>& build_id, bool wait,
                               const caf::actor& sink) {
  auto& s = self->state;
  if (!s.env->deployer)
    return Error("domain '" + s.env->domain + "' has no deploy target (deploy.type is \"none\")");
  // Issue 16: another candidate's build names that candidate; unknown candidates list the known.
  if (build_id) {
    auto owner = s.build_candidate.find(*build_id);
    if (owner != s.build_candidate.end() && owner->second != candidate) {
      ToolResult r = Error("build " + *build_id + " belongs to candidate '" + owner->second +
                           "', not '" + candidate + "'; deploy it with candidate=" + owner->second);
      r.structured["next_step"] = "call deploy_candidate with candidate=" + owner->second + " and build_id=" + *build_id;
      return r;
    }
  }
  auto cand = Candidate(self, candidate, false);
  if (!cand)
    return DomainError(self, "candidate '" + candidate + "' has no successful build to deploy: it is not known in domain '" +
                           s.env->domain + "' (known candidates: " + KnownCandidates(self) + "); build it first",
                       "not_pushed", candidate);
  uint64_t arrival = s.order.Arrive();
  caf::response_promise rp = self->make_response_promise();
  self->request(cand, std::chrono::seconds(30), lookup_atom::value, build_id.value_or(""))
      .then(
          [=](ToolResult& r) mutable {
            if (r.is_error) {
              if (!r.structured.contains("error_kind")) {
                r.structured["error_kind"] = "invalid_argument";
                r.structured["next_step"] =
                    "build the candidate (build_candidate) and deploy a succeeded build; candidate_status lists its builds";
              }
              rp.deliver(r);
              return;
            }
            AdmitDeploy(self, arrival, r.structured, wait, sink, rp);
          },
          [=](caf::error& e) mutable { rp.deliver(Error("internal error: " + caf::to_string(e))); });
  return rp;
}

nlohmann::json DomainStatusJson(Self* self) {
  auto& s = self->state;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, j] : s.summaries) list.push_back(j);
  nlohmann::json in_progress = nullptr;
  if (auto r = s.order.running(); r && s.deploys.count(*r)) in_progress = DeployJson(s.deploys.at(*r));
  return {{"domain", s.env->domain},
          {"deploy_type", s.env->dc ? s.env->dc->deploy.type : "none"},
          {"candidates", list},
          {"deployed", s.deployed},
          {"deploy_in_progress", in_progress}};
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
  {
    auto& s = self->state;
    // After a restart: the deployed build, and the candidates (so list_candidates, apply and
    // candidate_status answer as before). Reads are in memory (the store loaded at start).
    if (s.env->store) {
      if (auto d = s.env->store->Deployed(s.env->domain)) {
        nlohmann::json j = {{"deploy_id", d->deploy_id}, {"build_id", d->build_id},
                            {"image", d->image},         {"status", "rolled_out"},
                            {"candidate", ""},           {"digest", ""},
                            {"commit", ""}};
        if (auto b = s.env->store->Build(d->build_id)) {
          j["candidate"] = b->candidate;
          j["digest"] = b->digest;
          j["commit"] = b->commit;
        }
        s.deployed = j;
      }
    }
    for (const auto& c : s.env->known_candidates) Candidate(self, c, true);
  }
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
          if (!cand)  // never built (or unknown): say so, and how to start
            return ToolResult{{{"candidate", c},
                               {"state", "unknown"},
                               {"latest_build", nullptr},
                               {"latest_successful_build", nullptr},
                               {"deployed_build", nullptr},
                               {"queue_position", nullptr},
                               {"error", "candidate '" + c + "' has no builds in this domain (known candidates: " +
                                             KnownCandidates(self) + ")"},
                               {"error_kind", "not_pushed"},
                               {"next_step", NextStepFor("not_pushed", c, GitRemoteUrl(s.env->config->server, s.env->domain))}},
                              true};
          caf::response_promise rp = self->make_response_promise();
          self->request(cand, std::chrono::seconds(30), status_atom::value)
              .then(
                  [=](ToolResult& r) mutable {
                    auto& s = self->state;
                    if (s.deployed.is_object() && s.deployed.value("candidate", "") == c)
                      r.structured["deployed_build"] = s.deployed;
                    rp.deliver(r);
                  },
                  [=](caf::error& e) mutable { rp.deliver(Error("internal error: " + caf::to_string(e))); });
          return rp;
        }
        if (tool == "deploy_candidate") {
          DeployArgs a;
          Status st = ParseDeployArgs(call.arguments, &a);
          if (!st.ok()) return Error(st.message());
          return Deploy(self, a.candidate, a.build_id, a.wait, sink);
        }
        if (tool == "apply") {  // operator API only (/v1); not an MCP tool
          std::optional<std::string> c;
          Status st = ParseApplyArgs(call.arguments, &c);
          if (!st.ok()) return Error(st.message());
          if (!c) {
            int64_t best = -1;
            for (const auto& [name, seq] : s.success_seq)
              if (seq > best) best = seq, c = name;
          }
          if (!c || !s.success_seq.count(*c))
            return ToolResult{{{"domain", s.env->domain},
                               {"status", "nothing_built"},
                               {"message", c ? "candidate '" + *c + "' has no successful build"
                                             : "no candidate of domain '" + s.env->domain +
                                                   "' has a successful build"}},
                              false};
          return Deploy(self, *c, std::nullopt, true, sink);
        }
        if (tool == "domain_status") {  // operator API only (/v1)
          return ToolResult{DomainStatusJson(self), false};
        }
        if (tool == "build_log") {
          std::string id;
          size_t offset = 0, limit = 0, tail = 0;
          Status st = ParseLogArgs(call.arguments, &id, &offset, &limit, &tail);
          if (!st.ok()) return Error(st.message());
          return ByBuildId(self, id,
                           caf::make_message(log_atom::value, id, static_cast<uint64_t>(offset),
                                             static_cast<uint64_t>(limit), static_cast<uint64_t>(tail)));
        }
        if (tool == "build_result") {  // issue 17: MCP tasks/get (not an MCP tool)
          std::string id;
          nlohmann::json args = call.arguments;
          std::string candidate;
          if (args.is_object() && args.contains("candidate")) {
            if (args["candidate"].is_string()) candidate = args["candidate"].get<std::string>();
            args.erase("candidate");
          }
          Status st = ParseBuildIdArg(args, &id);
          if (!st.ok()) return Error(st.message());
          // The task names its candidate: route there (also for builds older than the ones
          // RememberBuild keeps); the candidate knows only its own builds.
          if (!candidate.empty()) {
            if (auto cand = Candidate(self, candidate, false)) {
              self->delegate(cand, status_atom::value, id);
              return caf::delegated<ToolResult>{};
            }
          }
          return ByBuildId(self, id, caf::make_message(status_atom::value, id));
        }
        if (tool == "deploy_result" || tool == "cancel_deploy") {  // issue 17: MCP deploy tasks
          const nlohmann::json& a = call.arguments;
          if (!a.is_object() || !a.contains("deploy_id") || !a["deploy_id"].is_string())
            return Error(tool + " needs deploy_id (string)");
          const std::string id = a["deploy_id"].get<std::string>();
          auto run = s.deploys.find(id);
          if (tool == "cancel_deploy" && run != s.deploys.end() && !run->second.result)
            run->second.cancel->Cancel();  // the deploy ends failed (Cancelled)
          return DeployResultById(self, id);
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
        if (sum.json.contains("latest_successful_build") && sum.json["latest_successful_build"].is_object()) {
          std::string id = sum.json["latest_successful_build"].value("build_id", "");
          if (s.success_id[sum.candidate] != id) {
            s.success_id[sum.candidate] = id;
            // Most recently requested successful build wins (also across restarts).
            s.success_seq[sum.candidate] = sum.json["latest_successful_build"].value("order", ++s.success_clock);
          }
        }
        if (sum.json.contains("latest_build") && sum.json["latest_build"].is_object())
          RememberBuild(self, sum.json["latest_build"]["build_id"].get<std::string>(), sum.candidate);
        s.summaries[sum.candidate] = std::move(sum.json);
      },
      [=](pushed_atom, std::vector<PushedRef>& refs) {
        // Issue 18: build on push. Each pushed candidate branch starts its build through the
        // same path as build_candidate (candidate actor -> scheduler); the push's order is the
        // order of the requests. The candidate actor lets a later build_candidate join it.
        auto& s = self->state;
        if (s.stopping) return;
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
      [=](shutdown_atom) {
        auto& s = self->state;
        s.stopping = true;
        for (auto& [n, a] : s.candidates) self->send(a, shutdown_atom::value);
        for (auto& [id, run] : s.deploys)
          if (!run.result) run.cancel->Cancel();
      },
      [=](deploy_prog_atom, const std::string& id, const std::string& line) {
        auto it = self->state.deploys.find(id);
        if (it == self->state.deploys.end() || it->second.result) return;
        DeployRun& run = it->second;
        run.progress += 1;
        for (auto& sink : run.sinks)
          self->send(sink, progress_atom::value,
                     ToolProgress{run.progress, std::nullopt, ToValidUtf8(line)});
      },
      [=](journaled_atom, uint64_t ticket) { self->state.answers.Release(ticket); },
      [=](deploy_done_atom, const std::string& id, DeployResult& res) {
        auto& s = self->state;
        auto it = s.deploys.find(id);
        if (it != s.deploys.end()) {
          if (res.state == DeployState::kFailed && res.reason == "Cancelled" && !it->second.superseded_by.empty()) {
            res.reason = "Superseded";
            res.message = "superseded by deploy " + it->second.superseded_by + " of a newer build";
          }
          FinishDeploy(self, it->second, res);
        }
        if (auto next = s.order.Finished(id)) {
          auto n = s.deploys.find(*next);
          if (n != s.deploys.end() && !n->second.result) StartDeploy(self, n->second);
        }
      },
  };
}

}  // namespace

caf::actor SpawnDomain(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                       caf::actor scheduler) {
  return sys.spawn(DomainBehavior, std::move(env), std::move(scheduler));
}

}  // namespace kiln
