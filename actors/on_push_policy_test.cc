#include "actors/on_push_policy.h"

#include <gtest/gtest.h>

#include "actors/scheduler_core.h"

namespace kiln {
namespace {

const std::string kA(40, 'a');
const std::string kB(40, 'b');
const std::string kC(40, 'c');
const std::string kZero(40, '0');

TEST(PushBuilds, OneBuildPerPushedCandidateBranchInPushOrder) {
  auto b = PushBuilds({{"refs/heads/c2", kA}, {"refs/heads/c1", kB}, {"refs/heads/c3", kC}}, true);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].candidate, "c2");
  EXPECT_EQ(b[1].candidate, "c1");
  EXPECT_EQ(b[2].candidate, "c3");
  EXPECT_EQ(*b[0].commit, kA);
  EXPECT_EQ(*b[1].commit, kB);
  for (const auto& r : b) {
    EXPECT_TRUE(r.on_push);
    EXPECT_FALSE(r.wait);
    EXPECT_FALSE(r.ref);
    EXPECT_FALSE(r.source_dir);
  }
}

TEST(PushBuilds, DisabledStartsNothing) {
  EXPECT_TRUE(PushBuilds({{"refs/heads/c1", kA}}, false).empty());
}

TEST(PushBuilds, IgnoresInvalidNamesDeletionsTagsAndBadValues) {
  auto b = PushBuilds({{"refs/heads/Bad_Name!", kA},
                       {"refs/heads/a/b", kA},
                       {"refs/heads/c1", kZero},  // deletion
                       {"refs/tags/v1", kA},
                       {"refs/heads/c2", "xyz"},
                       {"refs/heads/", kA},
                       {"refs/heads/c3", kC}},
                      true);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].candidate, "c3");
}

TEST(PushBuilds, BranchNamedTwiceCountsOnceWithItsLastValue) {
  auto b = PushBuilds({{"refs/heads/c1", kA}, {"refs/heads/c2", kB}, {"refs/heads/c1", kC}}, true);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].candidate, "c2");
  EXPECT_EQ(b[1].candidate, "c1");
  EXPECT_EQ(*b[1].commit, kC);
}

BuildRequest Ask(std::optional<std::string> commit = std::nullopt,
                 std::optional<std::string> ref = std::nullopt) {
  BuildRequest r;
  r.candidate = "c1";
  r.commit = commit;
  r.ref = ref;
  return r;
}

PushBuildFacts Facts(BuildStatus st = BuildStatus::kRunning) {
  PushBuildFacts f;
  f.candidate = "c1";
  f.pushed_commit = kA;
  f.status = st;
  return f;
}

TEST(JoinsPushBuild, SameHeadOrSameCommitJoins) {
  EXPECT_TRUE(JoinsPushBuild(Facts(), Ask()));
  EXPECT_TRUE(JoinsPushBuild(Facts(), Ask(kA)));
  EXPECT_TRUE(JoinsPushBuild(Facts(), Ask(kA.substr(0, 12))));
  EXPECT_TRUE(JoinsPushBuild(Facts(), Ask(std::nullopt, std::string("c1"))));
  EXPECT_TRUE(JoinsPushBuild(Facts(), Ask(std::nullopt, std::string("refs/heads/c1"))));
  // Finished push builds are joined too: their result is the answer.
  EXPECT_TRUE(JoinsPushBuild(Facts(BuildStatus::kSucceeded), Ask()));
  EXPECT_TRUE(JoinsPushBuild(Facts(BuildStatus::kFailed), Ask()));
  EXPECT_TRUE(JoinsPushBuild(Facts(BuildStatus::kQueued), Ask()));
}

TEST(JoinsPushBuild, OtherCommitOtherRefOrStaleBuildDoesNotJoin) {
  EXPECT_FALSE(JoinsPushBuild(Facts(), Ask(kB)));
  EXPECT_FALSE(JoinsPushBuild(Facts(), Ask(std::nullopt, std::string("c2"))));
  EXPECT_FALSE(JoinsPushBuild(Facts(BuildStatus::kCancelled), Ask()));
  EXPECT_FALSE(JoinsPushBuild(Facts(BuildStatus::kInterrupted), Ask()));
  PushBuildFacts stale = Facts();
  stale.latest = false;  // another request came after it
  EXPECT_FALSE(JoinsPushBuild(stale, Ask()));
  BuildRequest again = Ask();
  again.on_push = true;  // a newer push supersedes, never joins
  EXPECT_FALSE(JoinsPushBuild(Facts(), again));
  PushBuildFacts done = Facts(BuildStatus::kSucceeded);
  done.claimed = true;  // the first call after the push got it: later calls are new requests
  EXPECT_FALSE(JoinsPushBuild(done, Ask()));
  PushBuildFacts running = Facts();
  running.claimed = true;  // parallel calls while it runs all join it
  EXPECT_TRUE(JoinsPushBuild(running, Ask()));
  BuildRequest dir = Ask();
  dir.source_dir = "/src";
  EXPECT_FALSE(JoinsPushBuild(Facts(), dir));
}

// On-push builds go through the scheduler like any build: a push of several branches submits
// them in push order, and the scheduler admits them within the domain's cap and in fair order
// against other domains.
TEST(OnPushScheduling, PushOfSeveralBranchesRespectsDomainCapAndFairness) {
  SchedulerCore core(2);
  core.SetDomainCap("pushy", 1);
  auto builds =
      PushBuilds({{"refs/heads/c1", kA}, {"refs/heads/c2", kB}, {"refs/heads/c3", kC}}, true);
  ASSERT_EQ(builds.size(), 3u);
  int n = 0;
  for (const auto& b : builds)
    EXPECT_EQ(
        core.Submit({"b-" + std::to_string(n++), "pushy", b.candidate, "key-" + *b.commit}).kind,
        SchedulerCore::SubmitKind::kQueued);
  auto started = core.Dispatch();
  ASSERT_EQ(started.size(), 1u);  // the domain's cap, although a second slot is free
  EXPECT_EQ(started[0].candidate, "c1");
  EXPECT_EQ(core.Running("pushy"), 1u);
  // Another domain's single build gets the free slot at once.
  core.Submit({"b-other", "quiet", "x", "key-other"});
  started = core.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].domain, "quiet");
  // The pushed branches follow one at a time, in push order.
  auto done = std::make_shared<BuildOutcome>();
  done->status = BuildStatus::kSucceeded;
  core.Finish("key-" + kA, "b-0", done);
  started = core.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].candidate, "c2");
  core.Finish("key-" + kB, "b-1", done);
  started = core.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].candidate, "c3");
}

}  // namespace
}  // namespace kiln
