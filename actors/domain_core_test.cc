// DomainCore: the domain actor's decisions without an actor system (routing table, build
// owners, success order and the apply choice, deploy admission and bookkeeping).
#include "actors/domain_core.h"

#include <gtest/gtest.h>

#include "core/cancel_token.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

template <class T>
std::vector<T> All(const DomainEffects& fx) {
  std::vector<T> out;
  for (const auto& e : fx)
    if (auto* p = std::get_if<T>(&e)) out.push_back(*p);
  return out;
}
const DeployAnswerEffect* AnswerFor(const DomainEffects& fx, WaiterId w) {
  for (const auto& e : fx)
    if (auto* a = std::get_if<DeployAnswerEffect>(&e))
      for (WaiterId x : a->waiters)
        if (x == w) return a;
  return nullptr;
}

CandidateSummary Summary(const std::string& cand, const std::string& latest,
                         std::optional<std::string> success = std::nullopt, int64_t order = 0) {
  CandidateSummary s;
  s.candidate = cand;
  s.json = {{"candidate", cand}, {"state", "succeeded"}};
  s.latest_build = latest;
  s.latest_success = success;
  s.latest_success_order = order;
  return s;
}

nlohmann::json Info(const std::string& cand, const std::string& build, int64_t order) {
  return {{"candidate", cand},           {"build_id", build},    {"commit", "c"},
          {"image", "reg/app@sha256:x"}, {"digest", "sha256:x"}, {"order", order}};
}

class DomainCoreTest : public ::testing::Test {
 protected:
  DomainCore Make(size_t history = 50, size_t max_candidates = 256) {
    DomainCore::Options o;
    o.domain = "dom";
    o.deploy_type = "local";
    o.remote = "https://kiln.example/git/dom";
    o.history_per_candidate = history;
    o.max_candidates = max_candidates;
    o.has_deployer = true;
    o.now = [this] { return now_; };
    o.new_deploy_id = [this] { return "d-" + std::to_string(++ids_); };
    return DomainCore(o);
  }
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  int ids_ = 0;
};

TEST(DomainCoreRoute, EveryToolHasItsRouteAndUnknownNamesNone) {
  EXPECT_EQ(DomainCore::Route("build_candidate"), DomainTool::kBuildCandidate);
  EXPECT_EQ(DomainCore::Route("candidate_status"), DomainTool::kCandidateStatus);
  EXPECT_EQ(DomainCore::Route("deploy_candidate"), DomainTool::kDeployCandidate);
  EXPECT_EQ(DomainCore::Route("apply"), DomainTool::kApply);
  EXPECT_EQ(DomainCore::Route("domain_status"), DomainTool::kDomainStatus);
  EXPECT_EQ(DomainCore::Route("build_log"), DomainTool::kBuildLog);
  EXPECT_EQ(DomainCore::Route("build_result"), DomainTool::kBuildResult);
  EXPECT_EQ(DomainCore::Route("cancel_build"), DomainTool::kCancelBuild);
  EXPECT_EQ(DomainCore::Route("list_candidates"), DomainTool::kListCandidates);
  EXPECT_EQ(DomainCore::Route("deploy_result"), DomainTool::kDeployResult);
  EXPECT_EQ(DomainCore::Route("cancel_deploy"), DomainTool::kCancelDeploy);
  EXPECT_FALSE(DomainCore::Route("Build_Candidate"));
  EXPECT_FALSE(DomainCore::Route(""));
  EXPECT_FALSE(DomainCore::Route("rm -rf"));
}

TEST_F(DomainCoreTest, CandidatesAreBoundedAndListedByName) {
  auto c = Make(50, 2);
  EXPECT_EQ(c.KnownCandidates(), "none yet");
  c.AddCandidate("bob");
  EXPECT_TRUE(c.MayAdd());
  c.AddCandidate("alice");
  EXPECT_FALSE(c.MayAdd());
  EXPECT_EQ(c.KnownCandidates(), "'alice', 'bob'");
}

TEST_F(DomainCoreTest, KnownCandidatesNamesTwentyAndCountsTheRest) {
  auto c = Make();
  for (int i = 0; i < 25; ++i) c.AddCandidate("c" + std::to_string(100 + i));
  EXPECT_NE(c.KnownCandidates().find("and 5 more"), std::string::npos);
}

TEST_F(DomainCoreTest, SummariesRouteBuildIdsAndForgetTheOldest) {
  auto c = Make(/*history=*/1);
  c.AddCandidate("alice");
  c.OnSummary(Summary("alice", "b-1"));
  c.OnSummary(Summary("alice", "b-2"));
  EXPECT_EQ(c.OwnerOf("b-1"), "alice");
  c.OnSummary(Summary("alice", "b-3"));  // cap: 2 * 1 * 1 candidates
  EXPECT_FALSE(c.OwnerOf("b-1"));
  EXPECT_EQ(c.OwnerOf("b-3"), "alice");
  EXPECT_EQ(c.CandidateList().size(), 1u);
}

TEST_F(DomainCoreTest, ApplyChoosesTheMostRecentlyRequestedSuccess) {
  auto c = Make();
  ToolResult nothing;
  EXPECT_FALSE(c.ChooseApply(std::nullopt, &nothing));
  EXPECT_EQ(nothing.structured["status"], "nothing_built");
  EXPECT_FALSE(nothing.is_error);
  c.OnSummary(Summary("alice", "b-1", "b-1", 200));
  c.OnSummary(Summary("bob", "b-2", "b-2", 100));  // finished later, requested earlier
  EXPECT_EQ(c.ChooseApply(std::nullopt, &nothing), "alice");
  c.OnSummary(Summary("bob", "b-3", "b-3", 300));
  EXPECT_EQ(c.ChooseApply(std::nullopt, &nothing), "bob");
  // The same success reported again keeps its order.
  c.OnSummary(Summary("alice", "b-4", "b-1", 999));
  EXPECT_EQ(c.ChooseApply(std::nullopt, &nothing), "bob");
  EXPECT_EQ(c.ChooseApply(std::string("alice"), &nothing), "alice");
  EXPECT_FALSE(c.ChooseApply(std::string("carol"), &nothing));
  EXPECT_EQ(nothing.structured["message"], "candidate 'carol' has no successful build");
}

TEST_F(DomainCoreTest, DeployStartsJournalsAndAnswersWhenDone) {
  auto c = Make();
  uint64_t a = c.Arrive();
  DomainEffects fx = c.AdmitDeploy(a, Info("alice", "b-1", 10), true, 1, 5);
  auto start = All<DeployStartEffect>(fx);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].req.deploy_id, "d-1");
  EXPECT_EQ(start[0].req.build_id, "b-1");
  EXPECT_EQ(start[0].req.domain, "dom");
  EXPECT_FALSE(AnswerFor(fx, 1));
  EXPECT_EQ(c.DomainStatus()["deploy_in_progress"]["deploy_id"], "d-1");
  fx = c.DeployProgress("d-1", "pulling");
  auto prog = All<DeployProgressEffect>(fx);
  ASSERT_EQ(prog.size(), 1u);
  EXPECT_EQ(prog[0].sinks, std::vector<SinkId>{5});
  now_ += std::chrono::milliseconds(70);
  fx = c.DeployDone("d-1", DeployResult{DeployState::kRolledOut, "", "", true, 0});
  const DeployAnswerEffect* ans = AnswerFor(fx, 1);
  ASSERT_TRUE(ans);
  ASSERT_TRUE(ans->record);
  EXPECT_EQ(ans->record->status, "rolled_out");
  EXPECT_EQ(ans->result.structured["status"], "rolled_out");
  EXPECT_EQ(ans->result.structured["elapsed_ms"], 70);
  EXPECT_FALSE(ans->result.is_error);
  EXPECT_EQ(c.deployed()["build_id"], "b-1");
  EXPECT_TRUE(c.DeployProgress("d-1", "late").empty());
}

TEST_F(DomainCoreTest, NoWaitAnswersInProgressAndTheSameBuildJoins) {
  auto c = Make();
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), false, 1, 0);
  ASSERT_TRUE(AnswerFor(fx, 1));
  EXPECT_EQ(AnswerFor(fx, 1)->result.structured["status"], "in_progress");
  // Issue 17: journaled (in_progress) before the caller hears of it (an MCP task resolves).
  ASSERT_TRUE(AnswerFor(fx, 1)->record);
  EXPECT_EQ(AnswerFor(fx, 1)->record->status, "in_progress");
  EXPECT_EQ(AnswerFor(fx, 1)->record->deploy_id, "d-1");
  fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), true, 2, 0);
  EXPECT_TRUE(All<DeployStartEffect>(fx).empty());  // joined
  fx = c.DeployDone("d-1", DeployResult{DeployState::kFailed, "StartFailed", "exited 1", true, 0});
  const DeployAnswerEffect* ans = AnswerFor(fx, 2);
  ASSERT_TRUE(ans);
  EXPECT_TRUE(ans->result.is_error);
  EXPECT_EQ(ans->result.structured["error_kind"], "deploy_crash");
  EXPECT_EQ(ans->result.structured["deploy_id"], "d-1");
}

TEST_F(DomainCoreTest, AWaitedDeployIsJournaledInProgressBeforeItStarts) {
  auto c = Make();
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), true, 1, 0);
  ASSERT_GE(fx.size(), 2u);
  const auto* journal = std::get_if<DeployAnswerEffect>(&fx[0]);
  ASSERT_TRUE(journal);
  ASSERT_TRUE(journal->record);
  EXPECT_EQ(journal->record->status, "in_progress");
  EXPECT_TRUE(journal->waiters.empty());  // the waiter hears only at the end
  EXPECT_TRUE(std::holds_alternative<DeployStartEffect>(fx.back()));
}

TEST_F(DomainCoreTest, DeployByIdAndCancelDeploy) {
  auto c = Make();
  EXPECT_FALSE(c.DeployById("d-1"));
  EXPECT_FALSE(c.CancelDeploy("d-1"));
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), false, 1, 0);
  auto run = All<DeployStartEffect>(fx).at(0);
  auto known = c.DeployById("d-1");
  ASSERT_TRUE(known);
  EXPECT_EQ(known->structured["status"], "in_progress");
  EXPECT_FALSE(known->is_error);
  EXPECT_TRUE(c.CancelDeploy("d-1"));
  EXPECT_TRUE(run.cancel->cancelled());
  c.DeployDone("d-1", DeployResult{DeployState::kFailed, "Cancelled", "cancelled", false, 0});
  EXPECT_FALSE(c.CancelDeploy("d-1"));  // finished: nothing to cancel
  known = c.DeployById("d-1");
  ASSERT_TRUE(known);
  EXPECT_TRUE(known->is_error);
  EXPECT_EQ(known->structured["status"], "failed");
}

TEST_F(DomainCoreTest, NewerBuildCancelsTheRunningDeployAndStartsAfterIt) {
  auto c = Make();
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), true, 1, 0);
  auto first = All<DeployStartEffect>(fx).at(0);
  fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-2", 20), true, 2, 0);
  EXPECT_TRUE(first.cancel->cancelled());
  EXPECT_TRUE(All<DeployStartEffect>(fx).empty());  // queued behind the cancelled one
  fx = c.DeployDone("d-1", DeployResult{DeployState::kFailed, "Cancelled", "cancelled", false, 0});
  const DeployAnswerEffect* old = AnswerFor(fx, 1);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->result.structured["reason"], "Superseded");
  EXPECT_EQ(old->result.structured["error_kind"], "superseded");
  auto next = All<DeployStartEffect>(fx);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].req.build_id, "b-2");
}

TEST_F(DomainCoreTest, OlderBuildIsRefusedWhileANewerOneDeploys) {
  auto c = Make();
  c.AdmitDeploy(c.Arrive(), Info("alice", "b-2", 20), true, 1, 0);
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), true, 2, 0);
  const DeployAnswerEffect* ans = AnswerFor(fx, 2);
  ASSERT_TRUE(ans);
  EXPECT_TRUE(ans->result.is_error);
  EXPECT_EQ(ans->result.structured["reason"], "Superseded");
  EXPECT_TRUE(ans->result.structured["deploy_id"].is_null());
}

TEST_F(DomainCoreTest, ShutdownCancelsRunningDeploysAndRefusesNewOnes) {
  auto c = Make();
  DomainEffects fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), true, 1, 0);
  auto run = All<DeployStartEffect>(fx).at(0);
  c.Shutdown();
  EXPECT_TRUE(c.stopping());
  EXPECT_TRUE(run.cancel->cancelled());
  fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-2", 20), true, 2, 0);
  ASSERT_TRUE(AnswerFor(fx, 2));
  EXPECT_EQ(AnswerFor(fx, 2)->result.structured["error"], "kiln is shutting down");
}

TEST_F(DomainCoreTest, FinishedDeploysAreBounded) {
  auto c = Make();
  for (int i = 1; i <= 40; ++i) {
    auto fx = c.AdmitDeploy(c.Arrive(), Info("alice", "b-" + std::to_string(i), i), true, i, 0);
    c.DeployDone(All<DeployStartEffect>(fx).at(0).req.deploy_id,
                 DeployResult{DeployState::kRolledOut, "", "", true, 0});
  }
  // d-1 was forgotten (32 kept): a done report for it changes nothing.
  EXPECT_TRUE(c.DeployDone("d-1", DeployResult{DeployState::kFailed, "x", "", false, 0}).empty());
  EXPECT_EQ(c.deployed()["build_id"], "b-40");
}

TEST_F(DomainCoreTest, DeployRefusalsNameTheOwnerOrTheKnownCandidates) {
  auto c = Make();
  c.AddCandidate("alice");
  c.OnSummary(Summary("alice", "b-1"));
  auto wrong = c.DeployRefusal("bob", std::string("b-1"), true);
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->structured["next_step"],
            "call deploy_candidate with candidate=alice and build_id=b-1");
  EXPECT_EQ(wrong->structured["error_kind"], "invalid_argument");
  auto unknown = c.DeployRefusal("carol", std::nullopt, false);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->structured["error_kind"], "not_pushed");
  EXPECT_NE(unknown->structured["error"].get<std::string>().find("known candidates: 'alice'"),
            std::string::npos);
  EXPECT_NE(
      unknown->structured["next_step"].get<std::string>().find("https://kiln.example/git/dom"),
      std::string::npos);
  EXPECT_FALSE(c.DeployRefusal("alice", std::string("b-1"), true));
  EXPECT_FALSE(c.DeployRefusal("alice", std::nullopt, true));
}

TEST_F(DomainCoreTest, UnknownCandidateStatusSaysHowToStart) {
  auto c = Make();
  ToolResult r = c.UnknownCandidateStatus("zed");
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["state"], "unknown");
  EXPECT_EQ(r.structured["error_kind"], "not_pushed");
  EXPECT_TRUE(r.structured["latest_build"].is_null());
  EXPECT_TRUE(r.structured["queue_position"].is_null());
}

TEST_F(DomainCoreTest, ALookupRefusalGetsAKindUnlessItHasOne) {
  ToolResult plain{{{"error", "build 'b-1' is failed; only a succeeded build can be deployed"}},
                   true};
  EXPECT_EQ(DomainCore::NotDeployable(plain).structured["error_kind"], "invalid_argument");
  ToolResult kinded{{{"error", "x"}, {"error_kind", "not_pushed"}}, true};
  EXPECT_EQ(DomainCore::NotDeployable(kinded).structured["error_kind"], "not_pushed");
}

ToolCall Call(const std::string& tool, nlohmann::json args) {
  ToolCall c;
  c.tool = tool;
  c.arguments = std::move(args);
  return c;
}
DomainRequest Parsed(const std::string& tool, nlohmann::json args) {
  auto p = DomainCore::Parse(Call(tool, std::move(args)));
  EXPECT_TRUE(std::holds_alternative<DomainRequest>(p)) << tool;
  return std::holds_alternative<DomainRequest>(p) ? std::get<DomainRequest>(p) : DomainRequest{};
}
std::string Refused(const std::string& tool, nlohmann::json args) {
  auto p = DomainCore::Parse(Call(tool, std::move(args)));
  if (!std::holds_alternative<ToolResult>(p)) return "(parsed)";
  EXPECT_TRUE(std::get<ToolResult>(p).is_error);
  return std::get<ToolResult>(p).structured.value("error", "");
}

TEST(DomainCoreParse, EachToolGetsItsArguments) {
  const std::string id = "b-00000000000000a1";
  auto build = Parsed("build_candidate", {{"candidate", "alice"}, {"ref", "main"}});
  EXPECT_EQ(build.tool, DomainTool::kBuildCandidate);
  EXPECT_EQ(build.build.candidate, "alice");
  auto status = Parsed("candidate_status", {{"candidate", "alice"}});
  EXPECT_EQ(status.tool, DomainTool::kCandidateStatus);
  EXPECT_EQ(status.candidate, "alice");
  auto deploy =
      Parsed("deploy_candidate", {{"candidate", "bob"}, {"build_id", id}, {"wait", false}});
  EXPECT_EQ(deploy.candidate, "bob");
  EXPECT_EQ(deploy.build_id, id);
  EXPECT_FALSE(deploy.wait);
  auto latest = Parsed("deploy_candidate", {{"candidate", "bob"}});
  EXPECT_FALSE(latest.build_id);
  EXPECT_TRUE(latest.wait);
  EXPECT_FALSE(Parsed("apply", nlohmann::json::object()).candidate);
  EXPECT_EQ(Parsed("apply", {{"candidate", "carol"}}).candidate, "carol");
  auto log = Parsed("build_log", {{"build_id", id}, {"tail", 100}});
  EXPECT_EQ(log.build_id, id);
  EXPECT_EQ(log.tail, 100u);
  auto chunk = Parsed("build_log", {{"build_id", id}, {"offset", 5}, {"limit", 10}});
  EXPECT_EQ(chunk.offset, 5u);
  EXPECT_EQ(chunk.limit, 10u);
  EXPECT_EQ(chunk.tail, 0u);
  auto result = Parsed("build_result", {{"build_id", id}, {"candidate", "alice"}});
  EXPECT_EQ(result.build_id, id);
  EXPECT_EQ(result.candidate, "alice");
  EXPECT_FALSE(Parsed("build_result", {{"build_id", id}, {"candidate", 7}}).candidate);
  EXPECT_EQ(Parsed("cancel_build", {{"build_id", id}}).build_id, id);
  EXPECT_EQ(Parsed("deploy_result", {{"deploy_id", "d-1"}}).deploy_id, "d-1");
  auto cancel = Parsed("cancel_deploy", {{"deploy_id", "d-2"}});
  EXPECT_EQ(cancel.tool, DomainTool::kCancelDeploy);
  EXPECT_EQ(cancel.deploy_id, "d-2");
  EXPECT_EQ(Parsed("list_candidates", nlohmann::json::object()).tool, DomainTool::kListCandidates);
  EXPECT_EQ(Parsed("domain_status", nlohmann::json::object()).tool, DomainTool::kDomainStatus);
}

TEST(DomainCoreParse, UnknownToolsAndBadArgumentsAreRefusedWithTheReason) {
  EXPECT_EQ(Refused("rm -rf", {}), "unknown tool 'rm -rf'");
  EXPECT_EQ(Refused(std::string(100, 'x'), {}), "unknown tool '" + std::string(64, 'x') + "'");
  EXPECT_EQ(Refused("deploy_result", nlohmann::json::object()),
            "deploy_result needs deploy_id (string)");
  EXPECT_EQ(Refused("cancel_deploy", {{"deploy_id", 5}}), "cancel_deploy needs deploy_id (string)");
  EXPECT_EQ(Refused("list_candidates", {{"x", 1}}), "list_candidates takes no arguments");
  EXPECT_EQ(Refused("cancel_build", {{"build_id", "b-1"}}),
            "build_id is malformed (expected b-<16 hex>)");
  EXPECT_EQ(Refused("build_result", {{"candidate", "alice"}, {"build_id", "x"}}),
            "build_id is malformed (expected b-<16 hex>)");
  EXPECT_NE(Refused("build_candidate", nlohmann::json::object()), "(parsed)");
  EXPECT_NE(Refused("candidate_status", {{"candidate", "../x"}}), "(parsed)");
}

TEST_F(DomainCoreTest, ADomainWithoutADeployTargetRefusesDeploys) {
  DomainCore::Options o;
  o.domain = "dom";
  DomainCore c(o);
  auto r = c.DeployRefusal("alice", std::nullopt, true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->structured["error"], "domain 'dom' has no deploy target (deploy.type is \"none\")");
}

TEST_F(DomainCoreTest, TheDeployedBuildAfterARestartShowsInItsCandidatesStatus) {
  auto c = Make();
  DeployRecord d;
  d.deploy_id = "d-7";
  d.build_id = "b-7";
  d.image = "reg/app@sha256:7";
  BuildRecord b;
  b.candidate = "alice";
  b.digest = "sha256:7";
  b.commit = "c7";
  c.RestoreDeployed(d, b);
  EXPECT_EQ(c.deployed()["candidate"], "alice");
  EXPECT_EQ(c.deployed()["digest"], "sha256:7");
  EXPECT_EQ(c.deployed()["status"], "rolled_out");
  ToolResult alice = c.WithDeployedBuild(ToolResult{{{"candidate", "alice"}}, false}, "alice");
  EXPECT_EQ(alice.structured["deployed_build"]["deploy_id"], "d-7");
  ToolResult bob = c.WithDeployedBuild(ToolResult{{{"candidate", "bob"}}, false}, "bob");
  EXPECT_FALSE(bob.structured.contains("deployed_build"));
  // The journal no longer has the build: the deploy is still the domain's, without candidate.
  auto gone = Make();
  gone.RestoreDeployed(d, std::nullopt);
  EXPECT_EQ(gone.deployed()["build_id"], "b-7");
  EXPECT_EQ(gone.deployed()["candidate"], "");
}

TEST_F(DomainCoreTest, DeployResultComesFromTheCoreThenTheJournal) {
  auto c = Make();
  c.AdmitDeploy(c.Arrive(), Info("alice", "b-1", 10), false, 1, 0);
  DeployRecord cut;  // in progress when kiln stopped
  cut.deploy_id = "d-old";
  cut.build_id = "b-0";
  cut.image = "reg/app@sha256:0";
  cut.status = "in_progress";
  DeployRecord done = cut;
  done.deploy_id = "d-done";
  done.status = "rolled_out";
  std::vector<JournaledDeploy> journaled = {{cut, std::string("alice")}, {done, std::nullopt}};
  ToolResult live = c.DeployResultFor("d-1", journaled);
  EXPECT_EQ(live.structured["status"], "in_progress");
  EXPECT_FALSE(live.is_error);
  ToolResult interrupted = c.DeployResultFor("d-old", journaled);
  EXPECT_TRUE(interrupted.is_error);
  EXPECT_EQ(interrupted.structured["status"], "failed");
  EXPECT_EQ(interrupted.structured["reason"], "Interrupted");
  EXPECT_EQ(interrupted.structured["error_kind"], "infrastructure");
  EXPECT_EQ(interrupted.structured["candidate"], "alice");
  EXPECT_EQ(interrupted.structured["image"]["ref"], "reg/app@sha256:0");
  ToolResult rolled = c.DeployResultFor("d-done", journaled);
  EXPECT_FALSE(rolled.is_error);
  EXPECT_EQ(rolled.structured["status"], "rolled_out");
  EXPECT_TRUE(rolled.structured["reason"].is_null());
  EXPECT_FALSE(rolled.structured.contains("candidate"));
  ToolResult unknown = c.DeployResultFor(std::string(100, 'z'), journaled);
  EXPECT_TRUE(unknown.is_error);
  EXPECT_EQ(unknown.structured["error"], "deploy '" + std::string(64, 'z') + "' not found");
}

TEST_F(DomainCoreTest, ListCandidatesNamesTheDomain) {
  auto c = Make();
  c.AddCandidate("alice");
  c.OnSummary(Summary("alice", "b-1"));
  ToolResult r = c.ListCandidates();
  EXPECT_FALSE(r.is_error);
  EXPECT_EQ(r.structured["domain"], "dom");
  ASSERT_EQ(r.structured["candidates"].size(), 1u);
  EXPECT_EQ(r.structured["candidates"][0]["candidate"], "alice");
}

}  // namespace
}  // namespace kiln
