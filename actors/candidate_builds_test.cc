// CandidateBuilds: every path of a candidate's build state machine, without an actor system,
// threads or sleeps (the clock and the build ids are injected).
#include "actors/candidate_builds.h"

#include <gtest/gtest.h>

#include <map>

#include "core/cancel_token.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = SchedulerCore::SubmitKind;

template <class T>
std::vector<T> All(const Effects& fx) {
  std::vector<T> out;
  for (const auto& e : fx)
    if (auto* p = std::get_if<T>(&e)) out.push_back(*p);
  return out;
}
template <class T>
bool Has(const Effects& fx) {
  return !All<T>(fx).empty();
}
// The one answer for `waiter` in `fx` (fails the test when there is none).
ToolResult AnswerFor(const Effects& fx, WaiterId waiter) {
  for (const auto& a : All<AnswerEffect>(fx))
    for (WaiterId w : a.waiters)
      if (w == waiter) return a.result;
  ADD_FAILURE() << "no answer for waiter " << waiter;
  return {};
}
bool Answered(const Effects& fx, WaiterId waiter) {
  for (const auto& a : All<AnswerEffect>(fx))
    for (WaiterId w : a.waiters)
      if (w == waiter) return true;
  return false;
}

WorkDone Done(const BuildId& id, const std::string& phase, Status st = Status::Ok()) {
  WorkDone d;
  d.id = id;
  d.phase = phase;
  d.status = st;
  if (phase == "resolve") {
    d.commit = std::string(40, 'c');
    d.tree = std::string(40, 't');
    d.source_id = "git-tree:" + d.tree;
  }
  if (phase == "build") d.image_id = "img-1";
  if (phase == "push") {
    d.digest = "sha256:" + std::string(64, 'd');
    d.ref = "reg/app@" + d.digest;
  }
  return d;
}

BuildRequest Req(bool wait = true) {
  BuildRequest r;
  r.candidate = "alice";
  r.wait = wait;
  return r;
}

class CandidateBuildsTest : public ::testing::Test {
 protected:
  CandidateBuilds Make(bool journaled = false, size_t history = 50) {
    CandidateBuilds::Options o;
    o.domain = "dom";
    o.candidate = "alice";
    o.remote = "https://kiln.example/git/dom";
    o.history = history;
    o.timeout_s = 100;
    o.journaled = journaled;
    o.track_branches = true;
    o.save_keys = true;
    o.build_key = [](const std::string& src) { return "key:" + src; };
    o.resume = resume_;
    o.now = [this] { return now_; };
    o.wall_ns = [this] { return ++wall_; };
    o.new_id = [this] {
      char buf[19];
      std::snprintf(buf, sizeof buf, "b-%016llx", static_cast<unsigned long long>(++ids_));
      return std::string(buf);
    };
    return CandidateBuilds(o);
  }
  static BuildId Id(int n) {
    char buf[19];
    std::snprintf(buf, sizeof buf, "b-%016llx", static_cast<unsigned long long>(n));
    return buf;
  }
  // Requests build 1 and runs it to its built image: the effects of the build's end.
  Effects RequestAndBuild(CandidateBuilds& c) {
    c.Request(Req(), 1, 0, 0);
    c.WorkFinished(Done(Id(1), "resolve"));
    c.Start(Id(1), "k");
    return c.WorkFinished(Done(Id(1), "build"));
  }
  // Runs build `id` (already requested) from resolve to the push's result.
  Effects RunToPushed(CandidateBuilds& c, const BuildId& id, Status push = Status::Ok()) {
    c.WorkFinished(Done(id, "resolve"));
    c.Submitted(id, Kind::kQueued, nullptr, "", 0);
    c.Start(id, "key:git-tree:" + std::string(40, 't'));
    c.WorkFinished(Done(id, "build"));
    c.LaneReserved(id, /*granted=*/false);
    c.WorkFinished(Done(id, "blobs"));
    c.LaneGranted(id);
    return c.WorkFinished(Done(id, "push", push));
  }
  std::function<bool(const BuildId&, std::string*, std::string*)> resume_;
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  int64_t wall_ = 1000;
  uint64_t ids_ = 0;
};

TEST_F(CandidateBuildsTest, RequestStartsResolvingAndTellsTheSink) {
  auto c = Make();
  Effects fx = c.Request(Req(), 1, 7, 0);
  auto started = All<StartedEffect>(fx);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].sink, 7u);
  EXPECT_EQ(started[0].id, Id(1));
  auto resolve = All<ResolveEffect>(fx);
  ASSERT_EQ(resolve.size(), 1u);
  EXPECT_EQ(resolve[0].id, Id(1));
  auto busy = All<BusyAddEffect>(fx);
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_EQ(busy[0].branch, "alice");
  EXPECT_EQ(All<ProgressEffect>(fx).at(0).progress.message, "resolving source");
  auto sum = All<SummaryEffect>(fx).back().summary;
  EXPECT_EQ(sum.json["state"], "resolving");
  EXPECT_EQ(sum.latest_build, Id(1));
  EXPECT_FALSE(Answered(fx, 1));  // wait: answered when final
  EXPECT_EQ(c.active(), Id(1));
}

TEST_F(CandidateBuildsTest, NoWaitAnswersAtOnceAfterTheJournaledStart) {
  auto c = Make(/*journaled=*/true);
  Effects fx = c.Request(Req(false), 1, 0, 0);
  auto answers = All<AnswerEffect>(fx);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].write);
  EXPECT_EQ(answers[0].write->kind, JournalWrite::Kind::kStart);
  EXPECT_EQ(answers[0].write->start.id, Id(1));
  EXPECT_EQ(answers[0].result.structured["build_id"], Id(1));
  EXPECT_EQ(answers[0].result.structured["joined"], false);
  EXPECT_FALSE(answers[0].result.is_error);
}

TEST_F(CandidateBuildsTest, WaitJournalsTheStartWithoutAnswering) {
  auto c = Make(true);
  Effects fx = c.Request(Req(), 1, 0, 0);
  auto answers = All<AnswerEffect>(fx);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_TRUE(answers[0].waiters.empty());
  EXPECT_EQ(answers[0].write->kind, JournalWrite::Kind::kStart);
}

TEST_F(CandidateBuildsTest, WithoutAJournalNoWritesAreEmitted) {
  auto c = Make(false);
  c.Request(Req(), 1, 0, 0);
  Effects fx = RunToPushed(c, Id(1));
  for (const auto& a : All<AnswerEffect>(fx)) EXPECT_FALSE(a.write);
}

TEST_F(CandidateBuildsTest, HappyPathGoesThroughEveryPhase) {
  auto c = Make(true);
  c.Request(Req(), 1, 9, 0);
  now_ += std::chrono::milliseconds(10);
  Effects fx = c.WorkFinished(Done(Id(1), "resolve"));
  auto submit = All<SubmitEffect>(fx);
  ASSERT_EQ(submit.size(), 1u);
  EXPECT_EQ(submit[0].job.key, "key:git-tree:" + std::string(40, 't'));
  EXPECT_EQ(submit[0].job.domain, "dom");
  fx = c.Submitted(Id(1), Kind::kQueued, nullptr, "", 3);
  EXPECT_EQ(All<ProgressEffect>(fx).at(0).progress.message, "queued (position 3)");
  now_ += std::chrono::milliseconds(250);
  fx = c.Start(Id(1), submit[0].job.key);
  auto build = All<BuildPhaseEffect>(fx);
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(build[0].commit, std::string(40, 'c'));
  EXPECT_EQ(build[0].tree, std::string(40, 't'));  // issue 18: the checkout need not derive it
  EXPECT_EQ(build[0].deadline, now_ + std::chrono::seconds(100));
  EXPECT_TRUE(Has<LeaseEffect>(fx));
  EXPECT_TRUE(c.worker_busy());
  fx = c.WorkFinished(Done(Id(1), "build"));
  // Issue 20: a place in the lane's line now; with the lane held by another build (issue 18),
  // the blobs upload before the lane is asked for.
  EXPECT_EQ(All<ReserveLaneEffect>(fx).size(), 1u);
  EXPECT_FALSE(Has<LaneEffect>(fx));
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
  EXPECT_TRUE(c.worker_busy());
  EXPECT_EQ(All<SummaryEffect>(fx).back().summary.json["state"], "pushing");
  fx = c.LaneReserved(Id(1), /*granted=*/false);
  EXPECT_FALSE(Has<ReleaseLaneEffect>(fx));
  auto blobs = All<PushPhaseEffect>(fx);
  ASSERT_EQ(blobs.size(), 1u);
  EXPECT_TRUE(blobs[0].blobs);
  EXPECT_EQ(blobs[0].image_id, "img-1");
  EXPECT_TRUE(c.worker_busy());
  fx = c.WorkFinished(Done(Id(1), "blobs"));
  auto lane = All<LaneEffect>(fx);
  ASSERT_EQ(lane.size(), 1u);
  EXPECT_EQ(lane[0].deadline, build[0].deadline);
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
  fx = c.LaneGranted(Id(1));
  auto push = All<PushPhaseEffect>(fx);
  ASSERT_EQ(push.size(), 1u);
  EXPECT_FALSE(push[0].blobs);
  EXPECT_EQ(push[0].image_id, "img-1");
  now_ += std::chrono::milliseconds(40);
  fx = c.WorkFinished(Done(Id(1), "push"));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));
  auto finished = All<FinishedEffect>(fx);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].outcome->status, BuildStatus::kSucceeded);
  EXPECT_EQ(finished[0].outcome->digest, "sha256:" + std::string(64, 'd'));
  EXPECT_EQ(All<SaveKeyEffect>(fx).size(), 1u);
  auto ended = All<BuildEndedEffect>(fx);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].status, BuildStatus::kSucceeded);
  EXPECT_TRUE(Has<DropSinksEffect>(fx));
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_FALSE(r.is_error);
  EXPECT_EQ(r.structured["status"], "succeeded");
  EXPECT_EQ(r.structured["timings"]["waited_ms"], 300);
  auto answers = All<AnswerEffect>(fx);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].write->kind, JournalWrite::Kind::kFinish);
  EXPECT_EQ(answers[0].write->finish.status, BuildStatus::kSucceeded);
  EXPECT_EQ(answers[0].write->finish.digest, "sha256:" + std::string(64, 'd'));
  EXPECT_FALSE(c.active());
  auto sum = All<SummaryEffect>(fx).back().summary;
  EXPECT_EQ(sum.latest_success, Id(1));
  EXPECT_GT(sum.latest_success_order, 0);
  ToolResult look = c.Lookup("");
  EXPECT_FALSE(look.is_error);
  EXPECT_EQ(look.structured["build_id"], Id(1));
  EXPECT_EQ(look.structured["order"], sum.latest_success_order);
}

TEST_F(CandidateBuildsTest, ResolveFailureFailsTheBuild) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  Effects fx = c.WorkFinished(Done(Id(1), "resolve", Status::NotFound("ref 'nope' not found")));
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["status"], "failed");
  EXPECT_FALSE(Has<SubmitEffect>(fx));
  EXPECT_FALSE(Has<FinishedEffect>(fx));  // it never held a slot
}

TEST_F(CandidateBuildsTest, CacheHitSucceedsWithTheCachedOutcome) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  auto cached = std::make_shared<BuildOutcome>();
  cached->status = BuildStatus::kSucceeded;
  cached->digest = "sha256:" + std::string(64, 'e');
  cached->image_ref = "reg/app@" + cached->digest;
  cached->built_by = "b-0000000000000abc";
  Effects fx = c.Submitted(Id(1), Kind::kCacheHit, cached, "", -1);
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_EQ(r.structured["status"], "succeeded");
  EXPECT_EQ(r.structured["cache_hit"], true);
  EXPECT_FALSE(Has<FinishedEffect>(fx));
  EXPECT_EQ(c.Lookup("").structured["digest"], cached->digest);
}

TEST_F(CandidateBuildsTest, JoinedIdenticalBuildEndsWithTheOwnersOutcome) {
  auto c = Make();
  c.Request(Req(), 1, 5, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  Effects fx = c.Submitted(Id(1), Kind::kJoined, nullptr, "b-00000000000000ff", -1);
  EXPECT_EQ(All<ProgressEffect>(fx).at(0).progress.message,
            "waiting for identical build b-00000000000000ff");
  auto o = std::make_shared<BuildOutcome>();
  o->status = BuildStatus::kFailed;
  o->error = "compile error";
  o->commit = "abc";
  fx = c.Waited(Id(1), o);
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["deduplicated"], true);
}

TEST_F(CandidateBuildsTest, SubmitFailureIsKilnsSide) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  Effects fx = c.SubmitFailed(Id(1), "internal error: kiln's scheduler did not answer");
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_EQ(r.structured["status"], "failed");
  EXPECT_EQ(r.structured["error_kind"], "infrastructure");
}

TEST_F(CandidateBuildsTest, BuildFailureReportsTheSlotAndDescribesTheFailure) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k");
  WorkDone d = Done(Id(1), "build", Status::FailedPrecondition("go build failed"));
  d.compile_failed = true;
  d.diagnostics.push_back(Diagnostic{});
  Effects fx = c.WorkFinished(d);
  auto finished = All<FinishedEffect>(fx);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].outcome->status, BuildStatus::kFailed);
  EXPECT_FALSE(finished[0].outcome->error.empty());
  EXPECT_FALSE(Has<LaneEffect>(fx));
  EXPECT_FALSE(Has<SaveKeyEffect>(fx));
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["status"], "failed");
  EXPECT_FALSE(c.worker_busy());
}

TEST_F(CandidateBuildsTest, CancelledBuilderStatusEndsCancelled) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k");
  Effects fx = c.WorkFinished(Done(Id(1), "build", Status::Cancelled("build cancelled")));
  EXPECT_EQ(AnswerFor(fx, 1).structured["status"], "cancelled");
}

TEST_F(CandidateBuildsTest, PushFailureFailsWithoutSavingTheKey) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  Effects fx = RunToPushed(c, Id(1), Status::Unavailable("registry down"));
  EXPECT_FALSE(Has<SaveKeyEffect>(fx));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));
  EXPECT_EQ(All<FinishedEffect>(fx).at(0).outcome->status, BuildStatus::kFailed);
  EXPECT_EQ(AnswerFor(fx, 1).structured["status"], "failed");
  EXPECT_TRUE(c.Lookup("").is_error);  // nothing deployable
}

// Issue 20: a failed blob upload is a push failure (the build's result kept), never asks for
// the lane and leaves the line it took.
TEST_F(CandidateBuildsTest, BlobUploadFailureFailsThePushWithoutTheLane) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k");
  WorkDone built = Done(Id(1), "build");
  built.elapsed_ms = 1234;
  c.WorkFinished(built);
  c.LaneReserved(Id(1), false);
  Effects fx = c.WorkFinished(Done(Id(1), "blobs", Status::Unavailable("registry down")));
  EXPECT_FALSE(Has<LaneEffect>(fx));
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));  // leaves the line
  EXPECT_FALSE(Has<SaveKeyEffect>(fx));
  auto finished = All<FinishedEffect>(fx);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].outcome->status, BuildStatus::kFailed);
  EXPECT_EQ(finished[0].outcome->build_ms, 1234);
  EXPECT_NE(finished[0].outcome->error.find("push"), std::string::npos)
      << finished[0].outcome->error;
  EXPECT_EQ(AnswerFor(fx, 1).structured["status"], "failed");
  EXPECT_FALSE(c.worker_busy());
}

TEST_F(CandidateBuildsTest, CancelDuringTheBlobUploadEndsCancelledWithoutTheLane) {
  auto c = Make();
  RequestAndBuild(c);
  Effects fx = c.LaneReserved(Id(1), false);
  auto token = All<PushPhaseEffect>(fx).at(0).cancel;
  Effects cancel;
  c.CancelBuild(Id(1), &cancel);
  EXPECT_TRUE(token->cancelled());  // the upload sees it
  fx = c.WorkFinished(Done(Id(1), "blobs", Status::Cancelled("push cancelled")));
  EXPECT_FALSE(Has<LaneEffect>(fx));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));
  ASSERT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_EQ(All<FinishedEffect>(fx)[0].outcome->status, BuildStatus::kCancelled);
}

TEST_F(CandidateBuildsTest, LaneNotGrantedBeforeTheDeadlineFailsThePush) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k");
  c.WorkFinished(Done(Id(1), "build"));
  c.LaneReserved(Id(1), false);
  c.WorkFinished(Done(Id(1), "blobs"));
  Effects fx = c.LaneFailed(Id(1), "the push did not get its turn");
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));  // leaves the line
  EXPECT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_EQ(AnswerFor(fx, 1).structured["status"], "failed");
}

TEST_F(CandidateBuildsTest, NewerRequestSupersedesTheActiveBuild) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  BuildRequest other = Req();
  other.ref = "refs/heads/feature";  // not identical: supersedes
  Effects fx = c.Request(other, 2, 0, 0);
  auto cancel = All<CancelQueuedEffect>(fx);
  ASSERT_EQ(cancel.size(), 1u);
  EXPECT_EQ(cancel[0].id, Id(1));
  ToolResult old = AnswerFor(fx, 1);
  EXPECT_EQ(old.structured["status"], "cancelled");
  EXPECT_EQ(old.structured["error_kind"], "superseded");
  EXPECT_EQ(c.active(), Id(2));
  // The superseded build's late resolve changes nothing.
  fx = c.WorkFinished(Done(Id(1), "resolve"));
  EXPECT_FALSE(Has<SubmitEffect>(fx));
}

TEST_F(CandidateBuildsTest, IdenticalRequestJoinsTheActiveBuild) {
  auto c = Make();
  c.Request(Req(), 1, 5, 3);
  Effects fx = c.Request(Req(), 2, 6, 3);
  EXPECT_FALSE(Has<CancelQueuedEffect>(fx));
  EXPECT_FALSE(Has<ResolveEffect>(fx));
  EXPECT_EQ(All<StartedEffect>(fx).at(0).id, Id(1));
  fx = RunToPushed(c, Id(1));
  EXPECT_EQ(AnswerFor(fx, 1).structured["joined"], false);
  EXPECT_EQ(AnswerFor(fx, 2).structured["joined"], true);
  EXPECT_EQ(AnswerFor(fx, 2).structured["build_id"], Id(1));
  // Both sinks got the progress of the shared build.
  auto drop = All<DropSinksEffect>(fx).at(0).sinks;
  EXPECT_EQ(drop, (std::vector<SinkId>{5, 6}));
}

TEST_F(CandidateBuildsTest, AnIdenticalRequestAfterAPushSupersedes) {
  auto c = Make();
  c.Request(Req(), 1, 0, 3);
  Effects fx = c.Request(Req(), 2, 0, 4);  // a push landed since: a newer commit
  EXPECT_TRUE(Has<CancelQueuedEffect>(fx));
  EXPECT_EQ(c.active(), Id(2));
}

TEST_F(CandidateBuildsTest, BuildCandidateJoinsTheBuildStartedOnPush) {
  auto c = Make();
  BuildRequest push = Req(false);
  push.on_push = true;
  push.commit = std::string(40, 'c');
  c.Request(push, 1, 0, 1);
  Effects fx = c.Request(Req(), 2, 4, 1);
  EXPECT_FALSE(Has<ResolveEffect>(fx));
  EXPECT_EQ(All<StartedEffect>(fx).at(0).id, Id(1));
  fx = RunToPushed(c, Id(1));
  ToolResult r = AnswerFor(fx, 2);
  EXPECT_EQ(r.structured["joined"], true);
  EXPECT_EQ(r.structured["started_on_push"], true);
  // The finished push build is joined by the first call only; the next is a new request.
  Effects again = c.Request(Req(), 3, 0, 1);
  EXPECT_TRUE(Has<ResolveEffect>(again));
}

TEST_F(CandidateBuildsTest, AFinishedPushBuildAnswersItsFirstCallerAtOnce) {
  auto c = Make(true);
  BuildRequest push = Req(false);
  push.on_push = true;
  push.commit = std::string(40, 'c');
  c.Request(push, 1, 0, 1);
  RunToPushed(c, Id(1));
  Effects fx = c.Request(Req(), 2, 0, 1);
  auto answers = All<AnswerEffect>(fx);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].write);  // after the journal's records of that build
  EXPECT_EQ(answers[0].write->kind, JournalWrite::Kind::kBarrier);
  EXPECT_EQ(answers[0].result.structured["status"], "succeeded");
  EXPECT_EQ(answers[0].result.structured["joined"], true);
}

TEST_F(CandidateBuildsTest, CancelBuildWhileQueuedGivesTheSlotBackWhenStarted) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Submitted(Id(1), Kind::kQueued, nullptr, "", 0);
  Effects fx;
  ToolResult r = c.CancelBuild(Id(1), &fx);
  EXPECT_EQ(r.structured["status"], "cancelled");
  EXPECT_FALSE(r.structured.contains("note"));
  EXPECT_TRUE(Has<CancelQueuedEffect>(fx));
  EXPECT_EQ(AnswerFor(fx, 1).structured["error_kind"], "cancelled");
  // The scheduler had already granted the slot: it goes straight back.
  fx = c.Start(Id(1), "k");
  EXPECT_FALSE(Has<BuildPhaseEffect>(fx));
  ASSERT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_EQ(All<FinishedEffect>(fx)[0].outcome->status, BuildStatus::kCancelled);
  // Cancelling again notes it had finished.
  Effects none;
  EXPECT_EQ(c.CancelBuild(Id(1), &none).structured["note"], "build had already finished");
  EXPECT_TRUE(c.CancelBuild("b-0000000000000999", &none).is_error);
}

TEST_F(CandidateBuildsTest, CancelWhileBuildingFreesTheSlotWhenTheBuilderReturns) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  Effects fx = c.Start(Id(1), "k");
  auto token = All<BuildPhaseEffect>(fx).at(0).cancel;
  Effects cancel;
  c.CancelBuild(Id(1), &cancel);
  EXPECT_TRUE(token->cancelled());            // the running builder sees it
  EXPECT_FALSE(Has<FinishedEffect>(cancel));  // the slot is still in use
  fx = c.WorkFinished(Done(Id(1), "build"));
  ASSERT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_EQ(All<FinishedEffect>(fx)[0].outcome->status, BuildStatus::kCancelled);
  EXPECT_FALSE(Has<LaneEffect>(fx));
}

TEST_F(CandidateBuildsTest, LaneGrantedAfterCancelIsReleased) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k");
  c.WorkFinished(Done(Id(1), "build"));
  c.LaneReserved(Id(1), false);
  c.WorkFinished(Done(Id(1), "blobs"));
  Effects none;
  c.CancelBuild(Id(1), &none);
  Effects fx = c.LaneGranted(Id(1));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));
  EXPECT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
}

// Issue 18: the lane was free and nobody in line when the build reserved its place: no separate
// blob stage, the push under the grant uploads the blobs and puts the manifest in one phase.
TEST_F(CandidateBuildsTest, LaneFreeOnReservePushesAtOnceWithoutABlobStage) {
  auto c = Make();
  Effects fx = RequestAndBuild(c);
  ASSERT_EQ(All<ReserveLaneEffect>(fx).size(), 1u);
  EXPECT_FALSE(Has<PushPhaseEffect>(fx)) << "nothing runs before the scheduler answers";
  EXPECT_TRUE(c.worker_busy());
  fx = c.LaneReserved(Id(1), /*granted=*/true);
  auto push = All<PushPhaseEffect>(fx);
  ASSERT_EQ(push.size(), 1u);
  EXPECT_FALSE(push[0].blobs) << "the push itself, under the grant";
  EXPECT_EQ(push[0].image_id, "img-1");
  EXPECT_FALSE(Has<LaneEffect>(fx)) << "the lane is ours already";
  EXPECT_FALSE(Has<ReleaseLaneEffect>(fx));
  EXPECT_TRUE(c.worker_busy());
  fx = c.WorkFinished(Done(Id(1), "push"));
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx)) << "the lane taken on reserve is given back";
  auto finished = All<FinishedEffect>(fx);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].outcome->status, BuildStatus::kSucceeded);
  EXPECT_EQ(AnswerFor(fx, 1).structured["status"], "succeeded");
  EXPECT_FALSE(c.worker_busy());
}

// Issue 18: the lane taken on reserve by a build cancelled meanwhile is given back at once.
TEST_F(CandidateBuildsTest, LaneTakenOnReserveAfterCancelIsReleased) {
  auto c = Make();
  RequestAndBuild(c);
  Effects none;
  c.CancelBuild(Id(1), &none);
  EXPECT_FALSE(Has<ReleaseLaneEffect>(none));
  Effects fx = c.LaneReserved(Id(1), /*granted=*/true);
  EXPECT_TRUE(Has<ReleaseLaneEffect>(fx));
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
  ASSERT_EQ(All<FinishedEffect>(fx).size(), 1u);
  EXPECT_EQ(All<FinishedEffect>(fx)[0].outcome->status, BuildStatus::kCancelled);
  EXPECT_FALSE(c.worker_busy());
}

TEST_F(CandidateBuildsTest, OneWorkerAtATimeSecondStartWaits) {
  auto c = Make();
  c.Request(Req(false), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  c.Start(Id(1), "k1");
  // A push-started build of the same candidate supersedes it while it builds; its start must
  // wait until the builder has returned (one workspace).
  BuildRequest push = Req(false);
  push.on_push = true;
  push.commit = std::string(40, 'c');
  c.Request(push, 2, 0, 1);
  c.WorkFinished(Done(Id(2), "resolve"));
  Effects fx = c.Start(Id(2), "k2");
  EXPECT_FALSE(Has<BuildPhaseEffect>(fx));
  fx = c.WorkFinished(Done(Id(1), "build"));  // the superseded build's builder returns
  EXPECT_EQ(All<FinishedEffect>(fx).at(0).id, Id(1));
  auto build = All<BuildPhaseEffect>(fx);
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(build[0].id, Id(2));
}

TEST_F(CandidateBuildsTest, ShutdownCancelsWhatIsInProgress) {
  auto c = Make();
  c.Request(Req(), 1, 0, 0);
  Effects fx = c.Shutdown();
  ToolResult r = AnswerFor(fx, 1);
  EXPECT_EQ(r.structured["status"], "cancelled");
  EXPECT_NE(r.structured["error"].get<std::string>().find("shutting down"), std::string::npos);
  EXPECT_TRUE(c.Shutdown().empty());
}

TEST_F(CandidateBuildsTest, HistoryIsBoundedAndKeepsTheLatestSuccess) {
  auto c = Make(false, /*history=*/3);
  c.Request(Req(), 1, 0, 0);
  RunToPushed(c, Id(1));  // the success
  for (int i = 2; i <= 6; ++i) {
    c.Request(Req(), i, 0, 0);
    c.WorkFinished(Done(Id(i), "resolve", Status::NotFound("no such ref")));
  }
  // The success is the oldest and is kept; the failures after it go (issue 19: an old success
  // no longer stops the trim).
  EXPECT_FALSE(c.Lookup(Id(1)).is_error);
  EXPECT_EQ(c.records(), 3u);
  // Another success lets the old one go, and the history shrinks to its bound.
  c.Request(Req(), 7, 0, 0);
  RunToPushed(c, Id(7));
  c.Request(Req(), 8, 0, 0);
  c.WorkFinished(Done(Id(8), "resolve", Status::NotFound("no such ref")));
  EXPECT_EQ(c.records(), 3u);
  EXPECT_TRUE(c.Lookup(Id(1)).is_error);
  EXPECT_FALSE(c.Lookup("").is_error);
  EXPECT_EQ(c.Lookup("").structured["build_id"], Id(7));
}

// Issue 19: the candidate trims to its current share of the domain's bound (it shrinks as
// candidates join) and answers about a build it no longer holds from the journal's record: its
// own domain's and candidate's only.
TEST_F(CandidateBuildsTest, TrimsToTheDomainShareAndServesEvictedBuildsFromTheJournal) {
  size_t share = 50;
  std::map<BuildId, BuildRecord> journal;
  CandidateBuilds::Options o;
  o.domain = "dom";
  o.candidate = "alice";
  o.history = 50;
  o.history_limit = [&] { return share; };
  o.full_logs = [] { return size_t{1}; };
  o.journal = [&](const BuildId& id) -> std::optional<BuildRecord> {
    auto it = journal.find(id);
    if (it == journal.end()) return std::nullopt;
    return it->second;
  };
  o.build_key = [](const std::string& src) { return "key:" + src; };
  o.now = [this] { return now_; };
  o.wall_ns = [this] { return ++wall_; };
  o.new_id = [this] { return Id(static_cast<int>(++ids_)); };
  CandidateBuilds c(o);
  c.Request(Req(), 1, 0, 0);
  RunToPushed(c, Id(1));  // the success, always kept
  for (int i = 2; i <= 9; ++i) {
    c.Request(Req(), i, 0, 0);
    c.WorkFinished(Done(Id(i), "resolve", Status::NotFound("no such ref")));
    BuildRecord r;  // what the journal holds of it
    r.id = Id(i);
    r.domain = "dom";
    r.candidate = "alice";
    r.status = BuildStatus::kFailed;
    r.error = "no such ref " + std::to_string(i);
    journal[r.id] = r;
  }
  EXPECT_EQ(c.records(), 9u);
  share = 3;  // more candidates joined the domain
  c.Request(Req(), 10, 0, 0);
  c.WorkFinished(Done(Id(10), "resolve", Status::NotFound("no such ref")));
  EXPECT_EQ(c.records(), 3u);  // the old success stays, the failures after it go
  EXPECT_FALSE(c.Lookup(Id(1)).is_error);
  EXPECT_FALSE(c.Lookup("").is_error);
  // An evicted build: result, log, lookup and cancel from its record.
  bool queued = true;
  auto res = c.Result(Id(3), &queued);
  ASSERT_TRUE(res);
  EXPECT_FALSE(queued);
  EXPECT_EQ(res->structured["status"], "failed");
  EXPECT_EQ(res->structured["from_journal"], true);
  ToolResult log = c.Log(Id(3), 0, 4096, 0);
  EXPECT_FALSE(log.is_error);
  EXPECT_EQ(log.structured["text"].get<std::string>().rfind("kiln: no such ref 3\n", 0), 0u);
  EXPECT_TRUE(c.Lookup(Id(3)).is_error);  // failed: not deployable, but known
  EXPECT_NE(c.Lookup(Id(3)).structured["error"].get<std::string>().find("only a succeeded"),
            std::string::npos);
  Effects fx;
  EXPECT_FALSE(c.CancelBuild(Id(3), &fx).is_error);
  EXPECT_TRUE(fx.empty());
  // Another domain's or another candidate's record is not this candidate's to answer.
  journal[Id(4)].domain = "other";
  EXPECT_FALSE(c.Result(Id(4), &queued));
  EXPECT_TRUE(c.Log(Id(4), 0, 4096, 0).is_error);
  journal[Id(5)].candidate = "bob";
  EXPECT_FALSE(c.Result(Id(5), &queued));
  EXPECT_TRUE(c.Log(Id(5), 0, 4096, 0).is_error);
  EXPECT_FALSE(c.Result(Id(99), &queued));  // unknown everywhere
}

TEST_F(CandidateBuildsTest, RestoreBringsBackFinalRecordsAndTheLatestSuccess) {
  auto c = Make();
  BuildRecord ok;
  ok.id = Id(41);
  ok.status = BuildStatus::kSucceeded;
  ok.digest = "sha256:" + std::string(64, 'a');
  ok.image_ref = "reg/app@" + ok.digest;
  ok.started_at_ms = 5;
  BuildRecord bad;
  bad.id = Id(42);
  bad.status = BuildStatus::kFailed;
  bad.error = "compile error";
  Effects fx = c.Restore({bad, ok});  // newest first
  auto sum = All<SummaryEffect>(fx).at(0).summary;
  EXPECT_EQ(sum.latest_build, Id(42));
  EXPECT_EQ(sum.latest_success, Id(41));
  EXPECT_EQ(sum.latest_success_order, 5000000);
  EXPECT_EQ(c.Lookup("").structured["digest"], ok.digest);
  ToolResult log = c.Log(Id(42), 0, 4096, 0);
  EXPECT_NE(log.structured["text"].get<std::string>().find("kiln: compile error"),
            std::string::npos);
  EXPECT_NE(log.structured["text"].get<std::string>().find("not kept across a restart"),
            std::string::npos);
  EXPECT_TRUE(c.Restore({}).empty());
}

// Issue 20: two unfinished builds of one candidate that the builder could both carry on (a
// restart between a newer build's dispatch and the older one's end): the newest is carried on,
// the older one ends superseded by it; never the other way round.
TEST_F(CandidateBuildsTest, RestoreCarriesOnTheNewestResumableBuildAndSupersedesTheOlder) {
  resume_ = [&](const BuildId&, std::string* c, std::string* k) {
    *c = std::string(40, 'f');
    *k = "key";
    return true;
  };
  auto c = Make(/*journaled=*/true);
  BuildRecord newer, older;
  newer.id = Id(61);
  newer.status = BuildStatus::kRunning;
  older.id = Id(60);
  older.status = BuildStatus::kRunning;
  Effects fx = c.Restore({newer, older});
  auto submit = All<SubmitEffect>(fx);
  ASSERT_EQ(submit.size(), 1u);
  EXPECT_EQ(submit[0].job.id, Id(61));
  size_t finishes = 0;
  for (const auto& a : All<AnswerEffect>(fx))
    if (a.write && a.write->kind == JournalWrite::Kind::kFinish) {
      ++finishes;
      EXPECT_EQ(a.write->finish.id, Id(60));
      EXPECT_EQ(a.write->finish.status, BuildStatus::kCancelled);
    }
  EXPECT_EQ(finishes, 1u);
  EXPECT_FALSE(Has<CancelQueuedEffect>(fx) && All<CancelQueuedEffect>(fx).at(0).id == Id(61));
}

// Issue 20: an unfinished build the builder can carry on (a worker runs it) is queued again
// after a restart and runs the usual phases under its own id; one its worker no longer knows
// ends interrupted. Either way one terminal record.
TEST_F(CandidateBuildsTest, RestoreCarriesOnAResumableBuildToOneTerminalRecord) {
  const std::string commit(40, 'e');
  resume_ = [&](const BuildId& id, std::string* c, std::string* k) {
    if (id != Id(50) && id != Id(51)) return false;
    *c = commit;
    *k = "key-" + id;
    return true;
  };
  auto c = Make(/*journaled=*/true);
  BuildRecord done;
  done.id = Id(49);
  done.status = BuildStatus::kSucceeded;
  done.digest = "sha256:" + std::string(64, 'a');
  BuildRecord running;
  running.id = Id(50);
  running.status = BuildStatus::kRunning;
  Effects fx = c.Restore({running, done});
  auto submit = All<SubmitEffect>(fx);
  ASSERT_EQ(submit.size(), 1u);
  EXPECT_EQ(submit[0].job.id, Id(50));
  EXPECT_EQ(submit[0].job.key, "key-" + Id(50));
  fx = c.Start(Id(50), "key-" + Id(50));
  auto build = All<BuildPhaseEffect>(fx);
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(build[0].commit, commit);
  c.WorkFinished(Done(Id(50), "build"));
  fx = c.LaneReserved(Id(50), false);
  EXPECT_TRUE(All<PushPhaseEffect>(fx).at(0).blobs);
  c.WorkFinished(Done(Id(50), "blobs"));
  c.LaneGranted(Id(50));
  fx = c.WorkFinished(Done(Id(50), "push"));
  size_t finishes = 0;
  for (const auto& a : All<AnswerEffect>(fx))
    finishes += a.write && a.write->kind == JournalWrite::Kind::kFinish;
  EXPECT_EQ(finishes, 1u);
  EXPECT_EQ(All<FinishedEffect>(fx).at(0).outcome->status, BuildStatus::kSucceeded);
  EXPECT_EQ(c.Lookup("").structured["build_id"], Id(50));
  EXPECT_NE(c.Log(Id(50), 0, 4096, 0)
                .structured["text"]
                .get<std::string>()
                .find("kiln restarted during build"),
            std::string::npos);

  auto c2 = Make(/*journaled=*/true);
  running.id = Id(51);
  c2.Restore({running});
  c2.Start(Id(51), "key-" + Id(51));
  WorkDone gone = Done(Id(51), "build", Status::Unavailable("its worker no longer knows it"));
  gone.failure_kind = "interrupted";
  fx = c2.WorkFinished(gone);
  EXPECT_FALSE(Has<PushPhaseEffect>(fx));
  EXPECT_EQ(All<FinishedEffect>(fx).at(0).outcome->status, BuildStatus::kInterrupted);
  finishes = 0;
  for (const auto& a : All<AnswerEffect>(fx))
    if (a.write && a.write->kind == JournalWrite::Kind::kFinish) {
      ++finishes;
      EXPECT_EQ(a.write->finish.status, BuildStatus::kInterrupted);
    }
  EXPECT_EQ(finishes, 1u);
}

TEST_F(CandidateBuildsTest, ViewsOfUnknownAndUnfinishedBuilds) {
  auto c = Make();
  EXPECT_EQ(c.StatusJson(-1)["state"], "idle");
  EXPECT_TRUE(c.Lookup("").is_error);
  EXPECT_TRUE(c.Log(Id(1), 0, 10, 0).is_error);
  c.Request(Req(), 1, 0, 0);
  c.WorkFinished(Done(Id(1), "resolve"));
  bool queued = false;
  auto r = c.Result(Id(1), &queued);
  ASSERT_TRUE(r);
  EXPECT_TRUE(queued);
  EXPECT_FALSE(c.Result(Id(9), &queued));
  EXPECT_EQ(c.StatusJson(2)["queue_position"], 2);
  EXPECT_EQ(c.Lookup(Id(1)).structured["error"],
            "build '" + Id(1) + "' is queued; only a succeeded build can be deployed");
}

}  // namespace
}  // namespace kiln
