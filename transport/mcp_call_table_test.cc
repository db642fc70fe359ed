#include "transport/mcp_call_table.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

McpCallTable::Entry E(const std::string& domain, const std::string& tool,
                      int* done_count = nullptr) {
  McpCallTable::Entry e;
  e.domain = domain;
  e.tool = tool;
  e.done = [done_count](ToolResult) {
    if (done_count) ++*done_count;
  };
  return e;
}

TEST(McpCallTable, CancelBeforeTheBuildIdIsKnownIsAnsweredByStarted) {
  McpCallTable t;
  ASSERT_TRUE(t.Add(1, E("a", "build_candidate")));
  EXPECT_EQ(t.Cancel(1), std::nullopt);                               // no build id yet: pending
  EXPECT_EQ(t.Started(1, "b-1"), std::optional<std::string>("b-1"));  // cancel it now
  EXPECT_EQ(t.Started(1, "b-1"), std::nullopt);                       // only once
}

TEST(McpCallTable, CancelAfterStartedNamesTheBuild) {
  McpCallTable t;
  ASSERT_TRUE(t.Add(1, E("a", "build_candidate")));
  EXPECT_EQ(t.Started(1, "b-7"), std::nullopt);  // not cancelled: nothing to do
  EXPECT_EQ(t.Cancel(1), std::optional<std::string>("b-7"));
}

TEST(McpCallTable, FinishedCallsLeaveOnceAndIgnoreLateMessages) {
  McpCallTable t;
  int done = 0;
  ASSERT_TRUE(t.Add(5, E("a", "candidate_status", &done)));
  EXPECT_FALSE(t.Add(5, E("a", "candidate_status")));  // handle in use
  auto e = t.Finish(5);
  ASSERT_TRUE(e.has_value());
  e->done({});
  EXPECT_EQ(done, 1);
  EXPECT_FALSE(t.Finish(5).has_value());  // a late answer after a timeout is dropped
  EXPECT_EQ(t.Cancel(5), std::nullopt);
  EXPECT_EQ(t.Started(5, "x"), std::nullopt);
  EXPECT_EQ(t.Find(5), nullptr);
  EXPECT_EQ(t.size(), 0u);
}

TEST(McpCallTable, TakeAllEmptiesTheTableAndCountsPerDomain) {
  McpCallTable t;
  ASSERT_TRUE(t.Add(1, E("a", "build_candidate")));
  ASSERT_TRUE(t.Add(2, E("a", "candidate_status")));
  ASSERT_TRUE(t.Add(3, E("b", "candidate_status")));
  EXPECT_EQ(t.size("a"), 2u);
  EXPECT_EQ(t.size("b"), 1u);
  ASSERT_NE(t.Find(3), nullptr);
  EXPECT_EQ(t.Find(3)->domain, "b");
  EXPECT_EQ(t.TakeAll().size(), 3u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(McpCallTable, AClosedStreamCancelsOnlyWhenTheDomainSaysSoAndNoOneElseWaits) {
  McpCallTable t;
  ASSERT_TRUE(t.Add(1, E("a", "build_candidate")));
  ASSERT_TRUE(t.Add(2, E("a", "build_candidate")));
  t.Started(1, "b-1");
  t.Started(2, "b-1");                             // a second caller joined the same build
  EXPECT_EQ(t.Disconnect(1, true), std::nullopt);  // call 2 still waits: the build keeps running
  EXPECT_EQ(t.Disconnect(2, true), std::optional<std::string>("b-1"));  // the last one: cancel
  EXPECT_EQ(t.Disconnect(2, true), std::nullopt);                       // once

  McpCallTable d;  // default (cancel_on_disconnect false): never cancels
  ASSERT_TRUE(d.Add(1, E("a", "build_candidate")));
  d.Started(1, "b-2");
  EXPECT_EQ(d.Disconnect(1, false), std::nullopt);
  EXPECT_EQ(d.Cancel(1), std::optional<std::string>("b-2"));  // an explicit cancel still works
}

TEST(McpCallTable, AStreamClosedBeforeTheBuildIdIsKnownIsDecidedByStarted) {
  McpCallTable t;
  ASSERT_TRUE(t.Add(1, E("a", "build_candidate")));
  EXPECT_EQ(t.Disconnect(1, true), std::nullopt);
  EXPECT_EQ(t.Started(1, "b-3"), std::optional<std::string>("b-3"));

  McpCallTable o;  // another caller waits for that build: Started keeps it
  ASSERT_TRUE(o.Add(1, E("a", "build_candidate")));
  ASSERT_TRUE(o.Add(2, E("a", "build_candidate")));
  o.Started(2, "b-4");
  EXPECT_EQ(o.Disconnect(1, true), std::nullopt);
  EXPECT_EQ(o.Started(1, "b-4"), std::nullopt);
}

TEST(CallTimeout, WaitingCallsGetTheLongDeadlines) {
  CallTimeouts t{std::chrono::seconds(60), std::chrono::seconds(2400), std::chrono::seconds(600)};
  EXPECT_EQ(CallTimeout({"a", "candidate_status", {{"candidate", "x"}}}, t).count(), 60);
  EXPECT_EQ(CallTimeout({"a", "build_candidate", {{"candidate", "x"}}}, t).count(), 2400);
  EXPECT_EQ(CallTimeout({"a", "build_candidate", {{"candidate", "x"}, {"wait", false}}}, t).count(),
            60);
  EXPECT_EQ(CallTimeout({"a", "deploy_candidate", {{"candidate", "x"}}}, t).count(), 600);
  EXPECT_EQ(
      CallTimeout({"a", "deploy_candidate", {{"candidate", "x"}, {"wait", false}}}, t).count(), 60);
  EXPECT_EQ(CallTimeout({"a", "apply", nlohmann::json::object()}, t).count(), 600);
  EXPECT_FALSE(CallWaitsForWork({"a", "build_log", {{"build_id", "b"}}}));
}

TEST(CallTimeout, TheAnswerSaysTheBuildMayStillRun) {
  ToolResult r =
      CallTimeoutResult({"a", "build_candidate", {{"candidate", "x"}}}, std::chrono::seconds(30));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["error_kind"], "timeout");
  std::string msg = r.structured["error"];
  EXPECT_NE(msg.find("within 30 s"), std::string::npos);
  EXPECT_NE(msg.find("candidate_status"), std::string::npos);
}

}  // namespace
}  // namespace kiln
