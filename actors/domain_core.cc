#include "actors/domain_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "actors/build_failure.h"
#include "actors/build_history.h"
#include "actors/tool_views.h"
#include "common/json_text.h"
#include "core/cancel_token.h"

namespace kiln {
namespace {

std::string RandomDeployId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "d-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// The classified failure of a deploy whose target does not classify its own (Kubernetes does:
// deploy_crash, deploy_unready, deploy_image, ...): by its reason.
nlohmann::json ReasonFailureJson(const DeployResult& res, const std::string& candidate) {
  static const std::map<std::string, std::string> kKinds = {{"Superseded", "superseded"},
                                                            {"StartFailed", "deploy_crash"},
                                                            {"HealthCheckFailed", "deploy_unready"},
                                                            {"Timeout", "deploy_unready"},
                                                            {"ImagePullBackOff", "deploy_image"},
                                                            {"ErrImagePull", "deploy_image"},
                                                            {"CrashLoopBackOff", "deploy_crash"}};
  static const std::map<std::string, std::string> kNextSteps = {
      {"deploy_crash",
       "the program exits or crashes at start: read message, fix the code, build and deploy again"},
      {"deploy_unready",
       "the program runs but never became healthy: check its health endpoint and start-up time, "
       "build and deploy again"},
      {"deploy_image",
       "the image cannot be pulled: build the candidate again, then deploy the new build"},
      {"superseded", "a newer deploy is in progress: wait for it (candidate_status)"}};
  const std::string& r = res.reason;
  auto k = kKinds.find(r);
  const std::string kind = k == kKinds.end() ? "infrastructure" : k->second;
  auto n = kNextSteps.find(kind);
  nlohmann::json f;
  f["error"] = res.message.empty() ? "the deploy failed (" + r + ")" : res.message;
  f["error_kind"] = kind;
  f["next_step"] = n == kNextSteps.end() ? NextStepFor("infrastructure", candidate) : n->second;
  return f;
}

nlohmann::json RefusedJson(const DeployRequest& req, const std::string& reason) {
  return {{"deploy_id", nullptr},
          {"build_id", req.build_id},
          {"candidate", req.candidate},
          {"image", {{"ref", req.image}, {"digest", req.digest}}},
          {"status", "failed"},
          {"reason", "Superseded"},
          {"message", reason},
          {"changed", false},
          {"elapsed_ms", 0}};
}

}  // namespace

DomainCore::DomainCore(Options opts) : opts_(std::move(opts)) {
  if (!opts_.new_deploy_id) opts_.new_deploy_id = RandomDeployId;
  if (!opts_.now) opts_.now = [] { return Clock::now(); };
}

std::optional<DomainTool> DomainCore::Route(const std::string& tool) {
  static const std::map<std::string, DomainTool> kRoutes = {
      {"build_candidate", DomainTool::kBuildCandidate},
      {"candidate_status", DomainTool::kCandidateStatus},
      {"deploy_candidate", DomainTool::kDeployCandidate},
      {"apply", DomainTool::kApply},
      {"domain_status", DomainTool::kDomainStatus},
      {"build_log", DomainTool::kBuildLog},
      {"build_result", DomainTool::kBuildResult},
      {"cancel_build", DomainTool::kCancelBuild},
      {"list_candidates", DomainTool::kListCandidates},
      {"deploy_result", DomainTool::kDeployResult},  // issue 17: MCP tasks/get of a deploy
      {"cancel_deploy", DomainTool::kCancelDeploy},  // issue 17: MCP tasks/cancel of a deploy
  };
  auto it = kRoutes.find(tool);
  if (it == kRoutes.end()) return std::nullopt;
  return it->second;
}

std::variant<DomainRequest, ToolResult> DomainCore::Parse(const ToolCall& call) {
  auto route = Route(call.tool);
  if (!route) return ToolError("unknown tool '" + call.tool.substr(0, 64) + "'");
  const nlohmann::json& args = call.arguments;
  DomainRequest r;
  r.tool = *route;
  std::string id, c;
  size_t offset = 0, limit = 0, tail = 0;
  Status st;
  switch (*route) {
    case DomainTool::kBuildCandidate:
      st = ParseBuildArgs(args, &r.build);
      break;
    case DomainTool::kCandidateStatus:
      if ((st = ParseCandidateArg(args, &c)).ok()) r.candidate = c;
      break;
    case DomainTool::kDeployCandidate: {
      DeployArgs a;
      if ((st = ParseDeployArgs(args, &a)).ok())
        r.candidate = a.candidate, r.build_id = a.build_id, r.wait = a.wait;
      break;
    }
    case DomainTool::kApply:
      st = ParseApplyArgs(args, &r.candidate);
      break;
    case DomainTool::kDomainStatus:
      break;  // takes what it is given (operator API)
    case DomainTool::kBuildLog:
      if ((st = ParseLogArgs(args, &id, &offset, &limit, &tail)).ok())
        r.build_id = id, r.offset = offset, r.limit = limit, r.tail = tail;
      break;
    case DomainTool::kBuildResult:
      if ((st = ParseBuildResultArgs(args, &c, &id)).ok()) {
        r.build_id = id;
        if (!c.empty()) r.candidate = c;
      }
      break;
    case DomainTool::kCancelBuild:
      if ((st = ParseBuildIdArg(args, &id)).ok()) r.build_id = id;
      break;
    case DomainTool::kDeployResult:
    case DomainTool::kCancelDeploy:
      st = ParseDeployIdArg(call.tool, args, &r.deploy_id);
      break;
    case DomainTool::kListCandidates:
      st = ParseNoArgs(call.tool, args);
      break;
  }
  if (!st.ok()) return ToolError(st.message());
  return r;
}

std::string DomainCore::KnownCandidates() const {
  std::string out;
  size_t n = 0;
  for (const auto& name : candidates_) {
    if (n == 20) {
      out += " and " + std::to_string(candidates_.size() - n) + " more";
      break;
    }
    out += (n ? ", '" : "'") + name + "'";
    ++n;
  }
  return out.empty() ? std::string("none yet") : out;
}

std::optional<std::string> DomainCore::OwnerOf(const BuildId& id) const {
  auto it = build_candidate_.find(id);
  if (it == build_candidate_.end()) return std::nullopt;
  return it->second;
}

// Remembers which candidate a build belongs to, forgetting the oldest beyond what the
// candidates keep anyway (their share of the domain's bound each), so memory stays flat over a
// long loop; a forgotten build is found through the journal (issue 19).
void DomainCore::RememberBuild(const BuildId& id, const std::string& candidate) {
  if (!build_candidate_.emplace(id, candidate).second) return;
  build_order_.push_back(id);
  const size_t n = std::max<size_t>(1, candidates_.size());
  const size_t cap =
      2 * n * HistoryPerCandidate(opts_.history_per_candidate, opts_.history_per_domain, n);
  while (build_order_.size() > cap) {
    build_candidate_.erase(build_order_.front());
    build_order_.pop_front();
  }
}

ToolResult DomainCore::TooManyCandidates() const {
  return ToolError("too many candidates in domain '" + opts_.domain + "' (limit " +
                   std::to_string(opts_.max_candidates) + ")");
}

ToolResult DomainCore::UnknownCandidateStatus(const std::string& c) const {
  ToolResult r =
      ToolError("candidate '" + c +
                    "' has no builds in this domain (known candidates: " + KnownCandidates() + ")",
                "not_pushed", c, opts_.remote);
  for (const char* k :
       {"latest_build", "latest_successful_build", "deployed_build", "queue_position"})
    r.structured[k] = nullptr;
  r.structured["candidate"] = c;
  r.structured["state"] = "unknown";
  return r;
}

std::optional<ToolResult> DomainCore::DeployRefusal(const std::string& candidate,
                                                    const std::optional<BuildId>& build_id,
                                                    bool known) const {
  if (!opts_.has_deployer)
    return ToolError("domain '" + opts_.domain +
                     "' has no deploy target (deploy.type is \"none\")");
  if (auto owner = build_id ? OwnerOf(*build_id) : std::nullopt; owner && *owner != candidate) {
    ToolResult r = ToolError("build " + *build_id + " belongs to candidate '" + *owner +
                             "', not '" + candidate + "'; deploy it with candidate=" + *owner);
    r.structured["next_step"] =
        "call deploy_candidate with candidate=" + *owner + " and build_id=" + *build_id;
    return r;
  }
  if (known) return std::nullopt;
  return ToolError("candidate '" + candidate +
                       "' has no successful build to deploy: it is not known in domain '" +
                       opts_.domain + "' (known candidates: " + KnownCandidates() +
                       "); build it first",
                   "not_pushed", candidate, opts_.remote);
}

ToolResult DomainCore::NotDeployable(ToolResult r) {
  if (!r.structured.contains("error_kind")) {
    r.structured["error_kind"] = "invalid_argument";
    r.structured["next_step"] =
        "build the candidate (build_candidate) and deploy a succeeded build; candidate_status "
        "lists its builds";
  }
  return r;
}

void DomainCore::OnSummary(CandidateSummary sum) {
  if (sum.latest_success) {
    auto& [id, order] = success_[sum.candidate];
    if (id != *sum.latest_success) {
      id = *sum.latest_success;
      // Most recently requested successful build wins (also across restarts).
      order = sum.latest_success_order ? sum.latest_success_order : ++success_clock_;
    }
  }
  if (sum.latest_build) RememberBuild(*sum.latest_build, sum.candidate);
  summaries_[sum.candidate] = std::move(sum.json);
}

nlohmann::json DomainCore::CandidateList() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, j] : summaries_) list.push_back(j);
  return list;
}

ToolResult DomainCore::ListCandidates() const {
  return {{{"domain", opts_.domain}, {"candidates", CandidateList()}}, false};
}

ToolResult DomainCore::WithDeployedBuild(ToolResult status, const std::string& candidate) const {
  if (deployed_.is_object() && deployed_.value("candidate", "") == candidate)
    status.structured["deployed_build"] = deployed_;
  return status;
}

std::optional<std::string> DomainCore::ChooseApply(const std::optional<std::string>& asked,
                                                   ToolResult* nothing_built) const {
  std::optional<std::string> c = asked;
  if (!c) {
    int64_t best = -1;
    for (const auto& [name, success] : success_)
      if (success.second > best) best = success.second, c = name;
  }
  if (c && success_.count(*c)) return c;
  *nothing_built = {
      {{"domain", opts_.domain},
       {"status", "nothing_built"},
       {"message", c ? "candidate '" + *c + "' has no successful build"
                     : "no candidate of domain '" + opts_.domain + "' has a successful build"}},
      false};
  return std::nullopt;
}

nlohmann::json DomainCore::View(const DeployRun& run) const {
  nlohmann::json j;
  j["deploy_id"] = run.id;
  j["build_id"] = run.req.build_id;
  j["candidate"] = run.req.candidate;
  j["image"] = {{"ref", run.req.image}, {"digest", run.req.digest}};
  if (run.result) {
    const DeployResult& res = *run.result;
    j["status"] = DeployStateName(res.state);
    j["reason"] = res.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(res.reason);
    if (!res.message.empty()) j["message"] = res.message;
    j["changed"] = res.changed;
    if (res.state == DeployState::kFailed) {
      nlohmann::json f = DeployFailureJson(res);
      if (f.empty()) f = ReasonFailureJson(res, run.req.candidate);
      for (auto& [k, v] : f.items()) j[k] = v;
    }
  } else {
    j["status"] = "in_progress";
    j["reason"] = nullptr;
  }
  j["elapsed_ms"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(opts_.now() - run.created).count();
  return j;
}

void DomainCore::Start(const DeployRun& run, DomainEffects* out) const {
  spdlog::info("deploy {} domain={} candidate={} build={} -> rolling out {}", run.id, opts_.domain,
               run.req.candidate, run.req.build_id, run.req.image);
  out->push_back(DeployStartEffect{run.req, run.cancel});
}

// Attaches a caller to a deploy: waits for it, or gets its current state at once.
void DomainCore::Attach(DeployRun& run, bool wait, WaiterId waiter, SinkId sink,
                        DomainEffects* out) {
  if (!wait || run.result) {
    out->push_back(DeployAnswerEffect{
        std::nullopt,
        ToolResult{View(run), run.result && run.result->state != DeployState::kRolledOut},
        {waiter},
        sink ? std::vector<SinkId>{sink} : std::vector<SinkId>{}});
    return;
  }
  run.waiters.push_back(waiter);
  if (sink) run.sinks.push_back(sink);
}

DomainEffects DomainCore::AdmitDeploy(uint64_t arrival, const nlohmann::json& info, bool wait,
                                      WaiterId waiter, SinkId sink) {
  DomainEffects out;
  if (stopping_) {
    out.push_back(
        DeployAnswerEffect{std::nullopt, ToolError("kiln is shutting down"), {waiter}, {sink}});
    return out;
  }
  DeployRequest req;
  req.domain = opts_.domain;
  req.candidate = info.value("candidate", "");
  req.build_id = info.value("build_id", "");
  req.commit = info.value("commit", "");
  req.image = info.value("image", "");
  req.digest = info.value("digest", "");
  const int64_t build_order = info.value("order", int64_t{0});
  req.deploy_id = opts_.new_deploy_id();
  while (deploys_.count(req.deploy_id)) req.deploy_id = opts_.new_deploy_id();
  auto d = order_.Admit(arrival, req.build_id, build_order, req.deploy_id);
  if (d.action == DeployOrder::Action::kRefuse) {
    out.push_back(
        DeployAnswerEffect{std::nullopt, {RefusedJson(req, d.reason), true}, {waiter}, {sink}});
    return out;
  }
  if (d.action == DeployOrder::Action::kJoin) {
    Attach(deploys_.at(d.deploy_id), wait, waiter, sink, &out);
    return out;
  }
  DeployRun& run = deploys_[req.deploy_id];
  run.id = req.deploy_id;
  run.req = req;
  run.cancel = std::make_shared<CancelToken>();
  run.created = opts_.now();
  if (d.superseded) {
    auto it = deploys_.find(*d.superseded);
    if (it != deploys_.end())
      Finish(it->second,
             DeployResult{DeployState::kFailed, "Superseded",
                          "superseded by deploy " + run.id + " of build " + req.build_id, false, 0},
             &out);
  }
  if (d.cancel) {
    auto it = deploys_.find(*d.cancel);
    if (it != deploys_.end()) {
      spdlog::info("deploy {} superseded by {} (newer build {})", *d.cancel, run.id, req.build_id);
      it->second.superseded_by = run.id;
      it->second.cancel->Cancel();
    }
  }
  // Issue 17: a new deploy is journaled (in_progress) before a caller that does not wait hears
  // of it, so an MCP task for it resolves right after (and after a restart).
  DeployRecord rec;
  rec.deploy_id = run.id;
  rec.domain = opts_.domain;
  rec.build_id = req.build_id;
  rec.image = req.image;
  rec.status = DeployStateName(DeployState::kInProgress);
  if (wait) {
    Attach(run, wait, waiter, sink, &out);
    out.push_back(DeployAnswerEffect{rec, ToolResult{View(run), false}, {}, {}});
  } else {
    out.push_back(DeployAnswerEffect{rec,
                                     ToolResult{View(run), false},
                                     {waiter},
                                     sink ? std::vector<SinkId>{sink} : std::vector<SinkId>{}});
  }
  if (d.action == DeployOrder::Action::kStart) Start(run, &out);
  return out;
}

std::optional<ToolResult> DomainCore::DeployById(const std::string& deploy_id) const {
  auto it = deploys_.find(deploy_id);
  if (it == deploys_.end()) return std::nullopt;
  const DeployRun& run = it->second;
  return ToolResult{View(run), run.result && run.result->state != DeployState::kRolledOut};
}

ToolResult DomainCore::DeployResultFor(const std::string& deploy_id,
                                       const std::vector<JournaledDeploy>& journaled) const {
  if (auto known = DeployById(deploy_id)) return *known;
  for (const auto& [rec, candidate] : journaled) {
    if (rec.deploy_id != deploy_id) continue;
    nlohmann::json j = {
        {"deploy_id", rec.deploy_id},
        {"build_id", rec.build_id},
        {"image", {{"ref", rec.image}}},
        {"status", rec.status},
        {"reason", rec.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(rec.reason)}};
    if (candidate) j["candidate"] = *candidate;
    if (rec.status == DeployStateName(DeployState::kInProgress)) {
      j["status"] = "failed";
      j["reason"] = "Interrupted";
      j["error"] = "kiln stopped while this deploy was in progress";
      j["error_kind"] = "infrastructure";
      j["next_step"] = "deploy the build again (deploy_candidate)";
    }
    return ToolResult{j, j["status"] != "rolled_out"};
  }
  return ToolError("deploy '" + deploy_id.substr(0, 64) + "' not found");  // bounded echo
}

void DomainCore::RestoreDeployed(const DeployRecord& d, const std::optional<BuildRecord>& b) {
  deployed_ = {{"deploy_id", d.deploy_id},
               {"build_id", d.build_id},
               {"image", d.image},
               {"status", "rolled_out"},
               {"candidate", b ? b->candidate : ""},
               {"digest", b ? b->digest : ""},
               {"commit", b ? b->commit : ""}};
}

bool DomainCore::CancelDeploy(const std::string& deploy_id) {
  auto it = deploys_.find(deploy_id);
  if (it == deploys_.end() || it->second.result) return false;
  it->second.cancel->Cancel();  // the deploy ends failed (Cancelled)
  return true;
}

void DomainCore::Finish(DeployRun& run, DeployResult res, DomainEffects* out) {
  if (run.result) return;
  res.elapsed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(opts_.now() - run.created).count();
  res.reason = ToValidUtf8(res.reason);  // a deployed program's output may be any bytes
  res.message = ToValidUtf8(res.message);
  run.result = res;
  if (res.state == DeployState::kRolledOut) {
    deployed_ = {
        {"deploy_id", run.id},    {"build_id", run.req.build_id}, {"candidate", run.req.candidate},
        {"image", run.req.image}, {"digest", run.req.digest},     {"commit", run.req.commit},
        {"status", "rolled_out"}};
    spdlog::info("deploy {} domain={} candidate={} build={} -> rolled_out{} in {} ms", run.id,
                 opts_.domain, run.req.candidate, run.req.build_id,
                 res.changed ? "" : " (already deployed)", res.elapsed_ms);
  } else {
    spdlog::warn("deploy {} domain={} candidate={} build={} -> failed: {}: {}", run.id,
                 opts_.domain, run.req.candidate, run.req.build_id, res.reason, res.message);
  }
  // Write-ahead: the callers hear of the deploy only once its record is durable.
  DeployRecord rec;
  rec.deploy_id = run.id;
  rec.domain = opts_.domain;
  rec.build_id = run.req.build_id;
  rec.image = run.req.image;
  rec.status = DeployStateName(res.state);
  rec.reason = res.reason;
  out->push_back(DeployAnswerEffect{rec,
                                    ToolResult{View(run), res.state != DeployState::kRolledOut},
                                    std::move(run.waiters), std::move(run.sinks)});
  run.waiters.clear();
  run.sinks.clear();
  finished_.push_back(run.id);
  while (finished_.size() > opts_.finished_deploys) {
    deploys_.erase(finished_.front());
    finished_.pop_front();
  }
}

DomainEffects DomainCore::DeployProgress(const std::string& deploy_id, const std::string& line) {
  DomainEffects out;
  auto it = deploys_.find(deploy_id);
  if (it == deploys_.end() || it->second.result) return out;
  DeployRun& run = it->second;
  run.progress += 1;
  if (!run.sinks.empty())
    out.push_back(DeployProgressEffect{run.sinks, {run.progress, std::nullopt, ToValidUtf8(line)}});
  return out;
}

DomainEffects DomainCore::DeployDone(const std::string& deploy_id, DeployResult res) {
  DomainEffects out;
  auto it = deploys_.find(deploy_id);
  if (it != deploys_.end()) {
    if (res.state == DeployState::kFailed && res.reason == "Cancelled" &&
        !it->second.superseded_by.empty()) {
      res.reason = "Superseded";
      res.message = "superseded by deploy " + it->second.superseded_by + " of a newer build";
    }
    Finish(it->second, std::move(res), &out);
  }
  if (auto next = order_.Finished(deploy_id)) {
    auto n = deploys_.find(*next);
    if (n != deploys_.end() && !n->second.result) Start(n->second, &out);
  }
  return out;
}

void DomainCore::Shutdown() {
  stopping_ = true;
  for (auto& [id, run] : deploys_)
    if (!run.result) run.cancel->Cancel();
}

nlohmann::json DomainCore::DomainStatus() const {
  nlohmann::json in_progress = nullptr;
  if (auto r = order_.running(); r && deploys_.count(*r)) in_progress = View(deploys_.at(*r));
  return {{"domain", opts_.domain},
          {"deploy_type", opts_.deploy_type},
          {"candidates", CandidateList()},
          {"deployed", deployed_},
          {"deploy_in_progress", in_progress}};
}

}  // namespace kiln
