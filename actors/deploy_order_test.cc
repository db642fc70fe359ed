#include "actors/deploy_order.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using A = DeployOrder::Action;

TEST(DeployOrderTest, FirstRequestStarts) {
  DeployOrder o;
  auto d = o.Admit(o.Arrive(), "b1", 1, "d1");
  EXPECT_EQ(d.action, A::kStart);
  EXPECT_EQ(d.deploy_id, "d1");
  EXPECT_EQ(o.running(), "d1");
}

TEST(DeployOrderTest, SameBuildJoinsRunningDeploy) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  auto d = o.Admit(o.Arrive(), "b1", 1, "d2");
  EXPECT_EQ(d.action, A::kJoin);
  EXPECT_EQ(d.deploy_id, "d1");
}

TEST(DeployOrderTest, NewerBuildCancelsRunningAndStartsWhenItReturns) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  auto d = o.Admit(o.Arrive(), "b2", 2, "d2");
  EXPECT_EQ(d.action, A::kQueue);
  EXPECT_EQ(d.cancel, "d1");
  EXPECT_EQ(o.queued(), "d2");
  EXPECT_EQ(o.Finished("d2"), std::nullopt);  // not the running one
  EXPECT_EQ(o.Finished("d1"), "d2");
  EXPECT_EQ(o.running(), "d2");
  EXPECT_EQ(o.queued(), std::nullopt);
}

TEST(DeployOrderTest, OlderBuildRefusedWhileNewerRuns) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b5", 5, "d1");
  auto d = o.Admit(o.Arrive(), "b3", 3, "d2");
  EXPECT_EQ(d.action, A::kRefuse);
  EXPECT_NE(d.reason.find("b5"), std::string::npos);
  EXPECT_EQ(o.running(), "d1");
}

TEST(DeployOrderTest, OlderBuildRefusedWhileNewerQueued) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  o.Admit(o.Arrive(), "b5", 5, "d2");
  auto d = o.Admit(o.Arrive(), "b3", 3, "d3");
  EXPECT_EQ(d.action, A::kRefuse);
  EXPECT_EQ(o.queued(), "d2");
}

TEST(DeployOrderTest, RacingOlderRequestCannotOverwriteNewerThatStartedAfterIt) {
  DeployOrder o;
  uint64_t older_arrival = o.Arrive();  // request for b3 arrives, then its lookup takes a while
  o.Admit(o.Arrive(), "b5", 5, "d1");   // a request for b5 arrives later but starts first
  EXPECT_FALSE(o.Finished("d1").has_value());
  auto d = o.Admit(older_arrival, "b3", 3, "d2");
  EXPECT_EQ(d.action, A::kRefuse);
  EXPECT_NE(d.reason.find("started after"), std::string::npos);
}

TEST(DeployOrderTest, ExplicitRollbackAfterNewerFinishedIsAllowed) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b5", 5, "d1");
  o.Finished("d1");
  auto d = o.Admit(o.Arrive(), "b3", 3, "d2");
  EXPECT_EQ(d.action, A::kStart);
}

TEST(DeployOrderTest, NewestQueuedReplacesOlderQueued) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  o.Admit(o.Arrive(), "b2", 2, "d2");
  auto d = o.Admit(o.Arrive(), "b3", 3, "d3");
  EXPECT_EQ(d.action, A::kQueue);
  EXPECT_EQ(d.superseded, "d2");
  EXPECT_EQ(o.Finished("d1"), "d3");
}

TEST(DeployOrderTest, RequestForQueuedBuildJoinsIt) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  o.Admit(o.Arrive(), "b2", 2, "d2");
  auto d = o.Admit(o.Arrive(), "b2", 2, "d9");
  EXPECT_EQ(d.action, A::kJoin);
  EXPECT_EQ(d.deploy_id, "d2");
}

TEST(DeployOrderTest, RunningBuildRequestedAgainWhileNewerQueuedIsRefused) {
  DeployOrder o;
  o.Admit(o.Arrive(), "b1", 1, "d1");
  o.Admit(o.Arrive(), "b2", 2, "d2");
  auto d = o.Admit(o.Arrive(), "b1", 1, "d3");
  EXPECT_EQ(d.action, A::kRefuse);
}

}  // namespace
}  // namespace kiln
