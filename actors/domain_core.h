// DomainCore: the pure decisions of one domain actor.
//   - the tool routing table (data: tool name -> route), so an unknown name is one lookup;
//   - which candidate owns a build id (bounded: the oldest are forgotten beyond what the
//     candidates keep anyway), for build_log / cancel_build / build_result;
//   - the candidates' summaries (list_candidates) and the success order as data (each
//     candidate's latest successful build and its request order, from the typed summary);
//   - the apply choice: which candidate's latest successful build `apply` deploys;
//   - the deploys: admitting a request (DeployOrder), joining, superseding, finishing, the
//     bounded history of finished deploys and the domain's deployed build.
// Deploy entry points return effects (value types) for the actor to carry out: start a deploy
// on a worker, answer waiters after the deploy's journal record, send progress. Waiters and
// sinks are opaque ids the actor maps to its promises and actors.
//
// No CAF, no I/O; the clock and the deploy-id source are injected. Logs through spdlog.
// Thread-safety: none; owned by one domain actor.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "actors/candidate_builds.h"
#include "actors/deploy_order.h"
#include "core/tool_backend.h"
#include "deploy/deployer.h"
#include "state/state_store.h"

namespace kiln {

class CancelToken;

/// Every tool a domain answers.
enum class DomainTool {
  kBuildCandidate,
  kCandidateStatus,
  kDeployCandidate,
  kApply,         // operator API only (/v1); not an MCP tool
  kDomainStatus,  // operator API only (/v1)
  kBuildLog,
  kBuildResult,  // issue 17: MCP tasks/get (not an MCP tool)
  kCancelBuild,
  kListCandidates,
  kDeployResult,  // issue 17: MCP tasks/get of a deploy (not an MCP tool)
  kCancelDeploy,  // issue 17: MCP tasks/cancel of a deploy (not an MCP tool)
};

/// A tool call, routed and its arguments parsed (actors/tool_views.h): what the actor acts on.
struct DomainRequest {
  DomainTool tool = DomainTool::kDomainStatus;
  BuildRequest build;  // build_candidate
  // candidate_status and deploy_candidate: always; apply and build_result: when named.
  std::optional<std::string> candidate;
  // deploy_candidate: when named; build_log, build_result, cancel_build: always.
  std::optional<BuildId> build_id;
  std::string deploy_id;                     // deploy_result, cancel_deploy
  bool wait = true;                          // deploy_candidate
  uint64_t offset = 0, limit = 0, tail = 0;  // build_log
};

// --- deploy effects ---
struct DeployAnswerEffect {  // journal `record` (when set), then answer `waiters`
  std::optional<DeployRecord> record;
  ToolResult result;
  std::vector<WaiterId> waiters;
  std::vector<SinkId> done_sinks;  // sinks that get nothing more
};
struct DeployStartEffect {  // run the deploy on a worker: answer with DeployDone
  DeployRequest req;
  std::shared_ptr<CancelToken> cancel;
};
struct DeployProgressEffect {
  std::vector<SinkId> sinks;
  ToolProgress progress;
};
using DomainEffect = std::variant<DeployAnswerEffect, DeployStartEffect, DeployProgressEffect>;
using DomainEffects = std::vector<DomainEffect>;

/// A deploy record of the state journal and the candidate of its build (nullopt when the
/// journal no longer knows the build).
struct JournaledDeploy {
  DeployRecord record;
  std::optional<std::string> candidate;
};

class DomainCore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string domain;
    std::string deploy_type = "none";
    std::string remote;  // the domain's git remote (next steps of not_pushed)
    size_t history_per_candidate = 50;
    size_t history_per_domain = 400;  // issue 19 (actors/build_history.h)
    size_t max_candidates = 256;
    size_t finished_deploys = 32;  // finished deploys kept for joins and status
    bool has_deployer = false;     // false: deploy_candidate and apply are refused
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
    std::function<std::string()> new_deploy_id;  // default: "d-" + 16 random hex
  };
  explicit DomainCore(Options opts);

  /// The routing table: the route of a tool name; nullopt for an unknown one.
  static std::optional<DomainTool> Route(const std::string& tool);
  /// Routes `call` and parses its arguments. An error result for an unknown tool (its name
  /// bounded) or for invalid arguments (the parser's message).
  static std::variant<DomainRequest, ToolResult> Parse(const ToolCall& call);

  // --- candidates and builds ---
  /// Whether one more candidate may be added (the domain's max_candidates).
  bool MayAdd() const { return candidates_.size() < opts_.max_candidates; }
  void AddCandidate(const std::string& name) { candidates_.insert(name); }
  /// "'a', 'b' and 2 more" of the known candidates (bounded), "none yet" when empty.
  std::string KnownCandidates() const;
  std::optional<std::string> OwnerOf(const BuildId& id) const;
  /// The answer when no candidate may be added (max_candidates).
  ToolResult TooManyCandidates() const;
  /// candidate_status of a candidate without builds: says so, and how to start.
  ToolResult UnknownCandidateStatus(const std::string& candidate) const;
  /// deploy_candidate checks before the lookup: a domain without a deploy target refuses;
  /// another candidate's build names its owner (issue 16); an unknown candidate lists the
  /// known ones. nullopt: go on.
  std::optional<ToolResult> DeployRefusal(const std::string& candidate,
                                          const std::optional<BuildId>& build_id, bool known) const;
  /// The candidate's lookup refused the build: its answer, in the failure vocabulary.
  static ToolResult NotDeployable(ToolResult lookup);
  /// A candidate's summary after a transition: list_candidates, build owners, success order.
  void OnSummary(CandidateSummary sum);
  nlohmann::json CandidateList() const;
  /// list_candidates.
  ToolResult ListCandidates() const;
  /// candidate_status of a known candidate: the candidate's own `status`, with the domain's
  /// deployed build when it is one of this candidate's.
  ToolResult WithDeployedBuild(ToolResult status, const std::string& candidate) const;

  /// apply: the candidate whose latest successful build apply deploys (`asked`, or the one
  /// whose success was requested last); nullopt with the "nothing_built" answer otherwise.
  std::optional<std::string> ChooseApply(const std::optional<std::string>& asked,
                                         ToolResult* nothing_built) const;

  // --- deploys ---
  /// Call when a deploy request arrives (before the candidate's lookup).
  uint64_t Arrive() { return order_.Arrive(); }
  /// The build to deploy is known (`info`: the candidate's lookup): order it, join or run it.
  DomainEffects AdmitDeploy(uint64_t arrival, const nlohmann::json& info, bool wait,
                            WaiterId waiter, SinkId sink);
  /// A deploy this core still remembers, as deploy_candidate reports it (nullopt: unknown here;
  /// the journal may know it).
  std::optional<ToolResult> DeployById(const std::string& deploy_id) const;
  /// Cancels a running or queued deploy (it ends failed, Cancelled); false when not running.
  bool CancelDeploy(const std::string& deploy_id);
  DomainEffects DeployProgress(const std::string& deploy_id, const std::string& line);
  DomainEffects DeployDone(const std::string& deploy_id, DeployResult res);
  /// kiln stops: running deploys are cancelled, new ones refused.
  void Shutdown();
  bool stopping() const { return stopping_; }
  /// After a restart: the domain's deployed build (from the journal) and that build's record
  /// (nullopt when the journal no longer has it: candidate, digest and commit stay "").
  void RestoreDeployed(const DeployRecord& deployed, const std::optional<BuildRecord>& build);
  /// deploy_result (issue 17, MCP tasks/get of a deploy): a deploy this core remembers, else
  /// one of `journaled` (the domain's newest and deployed records, e.g. after a restart; one
  /// still in progress there was cut short by kiln stopping: failed, Interrupted). An error
  /// result naming the id (bounded) when neither knows it.
  ToolResult DeployResultFor(const std::string& deploy_id,
                             const std::vector<JournaledDeploy>& journaled) const;
  const nlohmann::json& deployed() const { return deployed_; }
  /// domain_status.
  nlohmann::json DomainStatus() const;

 private:
  struct DeployRun {
    std::string id;
    DeployRequest req;
    std::shared_ptr<CancelToken> cancel;
    std::vector<WaiterId> waiters;
    std::vector<SinkId> sinks;
    double progress = 0;
    Clock::time_point created;
    std::optional<DeployResult> result;  // set once finished
    std::string superseded_by;           // set when a newer deploy cancelled this one
  };
  nlohmann::json View(const DeployRun& run) const;
  void Finish(DeployRun& run, DeployResult res, DomainEffects* out);
  void Start(const DeployRun& run, DomainEffects* out) const;  // logs, then DeployStartEffect
  void Attach(DeployRun& run, bool wait, WaiterId waiter, SinkId sink, DomainEffects* out);
  void RememberBuild(const BuildId& id, const std::string& candidate);

  Options opts_;
  std::set<std::string> candidates_;
  std::map<std::string, nlohmann::json> summaries_;
  std::map<BuildId, std::string> build_candidate_;
  std::deque<BuildId> build_order_;  // oldest first
  // Success order: candidate -> (its latest successful build, when it was requested).
  std::map<std::string, std::pair<BuildId, int64_t>> success_;
  int64_t success_clock_ = 0;
  DeployOrder order_;
  std::map<std::string, DeployRun> deploys_;  // running, queued and the last finished ones
  std::deque<std::string> finished_;          // oldest first, bounded
  nlohmann::json deployed_ = nullptr;         // the last rolled-out deploy of this domain
  bool stopping_ = false;
};

}  // namespace kiln
