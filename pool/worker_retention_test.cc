#include "pool/worker_retention.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

RetainedCandidate C(const std::string& d, const std::string& c, int64_t t, bool busy = false) {
  return {d, c, t, busy};
}

TEST(WorkerRetention, WithinLimitsNothingGoes) {
  EXPECT_TRUE(PlanEviction({C("d", "a", 1), C("d", "b", 2)}, {2, 2}).empty());
  EXPECT_TRUE(PlanEviction({}, {0, 0}).empty());
}

TEST(WorkerRetention, OverTheTotalTheLeastRecentlyBuiltGoFirst) {
  auto plan = PlanEviction({C("d", "new", 30), C("e", "old", 10), C("d", "mid", 20)}, {1, 10});
  EXPECT_EQ(plan, (std::vector<std::string>{"e/old", "d/mid"}));
}

TEST(WorkerRetention, ADomainOverItsLimitGivesItsOwnOldestNotOtherDomains) {
  // d holds 3 (limit 2); e's older candidate stays: the total (4) is within 4.
  auto plan =
      PlanEviction({C("d", "d1", 10), C("d", "d2", 20), C("d", "d3", 30), C("e", "e1", 1)}, {4, 2});
  EXPECT_EQ(plan, (std::vector<std::string>{"d/d1"}));
}

TEST(WorkerRetention, DomainFirstThenTotal) {
  // d over its limit by one (d1 goes), then the total still over by one: e1 (oldest left).
  auto plan = PlanEviction(
      {C("d", "d1", 10), C("d", "d2", 20), C("d", "d3", 30), C("e", "e1", 15), C("e", "e2", 40)},
      {3, 2});
  EXPECT_EQ(plan, (std::vector<std::string>{"d/d1", "e/e1"}));
}

TEST(WorkerRetention, BusyCandidatesAreNeverEvictedButCount) {
  // The oldest is building (or its image waits for its push): the next oldest goes instead.
  auto plan = PlanEviction({C("d", "a", 1, true), C("d", "b", 2), C("d", "c", 3)}, {2, 10});
  EXPECT_EQ(plan, (std::vector<std::string>{"d/b"}));
  // Only busy ones over the limit: nothing can go.
  EXPECT_TRUE(PlanEviction({C("d", "a", 1, true), C("d", "b", 2, true)}, {1, 1}).empty());
}

TEST(WorkerRetention, TiesAreBrokenByNameSoThePlanIsStable) {
  auto plan = PlanEviction({C("d", "b", 5), C("d", "a", 5), C("d", "c", 9)}, {1, 10});
  EXPECT_EQ(plan, (std::vector<std::string>{"d/a", "d/b"}));
}

}  // namespace
}  // namespace kiln
