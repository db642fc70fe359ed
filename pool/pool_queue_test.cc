#include "pool/pool_queue.h"

#include <gtest/gtest.h>

#include "pool/worker_sim.h"

namespace kiln {
namespace {

PoolQueue Pool(int workers, size_t slots, size_t park_limit = 2) {
  PoolQueue::Options o;
  o.park_limit = park_limit;
  PoolQueue q(o, BuildTimes(10, 40));
  for (int i = 0; i < workers; ++i) q.placement().AddWorker("w" + std::to_string(i), slots, 0);
  return q;
}

TEST(PoolQueue, StartsOnPreferredThenParksThenTakesTheFreedSlot) {
  PoolQueue q = Pool(3, 1);
  std::string pref = *q.placement().Preferred("d/c");
  ASSERT_TRUE(q.Submit("b1", "d", "d/c"));
  EXPECT_FALSE(q.Submit("b1", "d", "d/c"));  // duplicate id
  auto s = q.Dispatch(0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].worker, pref);
  EXPECT_EQ(s[0].how, Placement::Kind::kPreferred);
  // The next build of the same candidate waits for its warm worker (10 s + warm < cold).
  ASSERT_TRUE(q.Submit("b2", "d", "d/c"));
  EXPECT_TRUE(q.Dispatch(1).empty());
  EXPECT_EQ(q.parked(), 1u);
  ASSERT_TRUE(q.Finished("b1", 9, true, 9));
  EXPECT_FALSE(q.Finished("b1", 9, true, 9));
  s = q.Dispatch(9);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, "b2");
  EXPECT_EQ(s[0].worker, pref);
  EXPECT_EQ(q.parked(), 0u);
}

TEST(PoolQueue, ParkedBuildSpillsToAWarmWorkerAtOnce) {
  PoolQueue q = Pool(3, 1);
  auto rank = q.placement().Ranking("d/c");
  // Warm on its preferred worker and, after an earlier spill, on the third one (a worker
  // holding it warm ranks before a cold one, so with rank[2] warm alone it would be preferred).
  q.placement().SetWarm(rank[0], "d/c", true);
  q.placement().SetWarm(rank[2], "d/c", true);
  ASSERT_TRUE(q.Submit("b1", "d", "d/c"));
  q.Dispatch(0);
  ASSERT_TRUE(q.Submit("b2", "d", "d/c"));
  auto s = q.Dispatch(0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].worker, rank[2]);  // warm there: no reason to wait
  EXPECT_EQ(s[0].how, Placement::Kind::kSpill);
}

TEST(PoolQueue, FullParkQueueOverflowsToAFreeWorker) {
  PoolQueue q = Pool(2, 1, /*park_limit=*/1);
  auto rank = q.placement().Ranking("d/c");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Submit("b" + std::to_string(i), "d", "d/c"));
  auto s = q.Dispatch(0);
  ASSERT_EQ(s.size(), 2u);  // b0 on its worker, b1 parked, b2 overflowed to the other worker
  EXPECT_EQ(s[0].worker, rank[0]);
  EXPECT_EQ(s[1].id, "b2");
  EXPECT_EQ(s[1].worker, rank[1]);
  EXPECT_EQ(q.parked(), 1u);
}

TEST(PoolQueue, LostWorkerRequeuesItsBuildsForAnotherWorker) {
  PoolQueue q = Pool(2, 1);
  auto rank = q.placement().Ranking("d/c");
  ASSERT_TRUE(q.Submit("b1", "d", "d/c"));
  q.Dispatch(0);
  ASSERT_TRUE(q.Submit("b2", "d", "d/c"));
  q.Dispatch(0);  // parked on rank[0]
  auto lost = q.WorkerLost(rank[0]);
  EXPECT_EQ(lost.size(), 2u);
  EXPECT_EQ(q.running(), 0u);
  auto s = q.Dispatch(1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, "b1");  // retried first, on the remaining worker
  EXPECT_EQ(s[0].worker, rank[1]);
  EXPECT_FALSE(q.Finished("b2", 2, true, 1));
}

TEST(PoolQueue, FairOrderAcrossDomainsIsKept) {
  PoolQueue q = Pool(1, 1, /*park_limit=*/0);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(q.Submit("a" + std::to_string(i), "a", "a/c" + std::to_string(i)));
  ASSERT_TRUE(q.Submit("b0", "b", "b/c"));
  auto s = q.Dispatch(0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, "a0");
  ASSERT_TRUE(q.Finished("a0", 1, false, 1));
  s = q.Dispatch(1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, "b0");  // domain b's single build is not behind a's flood
}

TEST(WorkerSim, JainIndex) {
  EXPECT_DOUBLE_EQ(JainIndex({}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({2, 2, 2}), 1);
  EXPECT_NEAR(JainIndex({1, 0, 0}), 1.0 / 3, 1e-12);
}

SimConfig Small(SimStrategy s) {
  SimConfig c;
  c.strategy = s;
  c.workers = 10;
  c.domains = 5;
  c.candidates = 100;
  c.builds = 3000;
  c.warmup = 600;
  c.warm_per_worker = 16;
  return c;
}

// Invariants of a small instance (not its timings): every build ends exactly once, no worker
// runs more than its slots, the same seed gives the same run, affinity keeps candidates warm
// where random placement cannot, and the churn moves only the share of the two workers.
TEST(WorkerSim, SmallInstanceInvariants) {
  SimResult aff = RunSim(Small(SimStrategy::kAffinity));
  SimResult rnd = RunSim(Small(SimStrategy::kRandom));
  SimResult hash = RunSim(Small(SimStrategy::kContextHash));
  for (const SimResult* r : {&aff, &rnd, &hash}) {
    EXPECT_EQ(r->submitted, 3000u);
    EXPECT_EQ(r->finished, r->submitted);
    EXPECT_EQ(r->measured, 2400u);
    EXPECT_EQ(r->overcommitted, 0u);
    EXPECT_GT(r->jain, 0);
    EXPECT_LE(r->jain, 1 + 1e-12);
    EXPECT_LE(r->wait_p50_s, r->wait_p99_s);
    EXPECT_GT(r->utilization, 0);
    EXPECT_LE(r->utilization, 1 + 1e-9);
  }
  EXPECT_GT(aff.hit_rate, rnd.hit_rate + 0.3);
  EXPECT_GT(aff.churn_moved, 0);
  EXPECT_LT(aff.churn_moved, 0.35);  // ~1/10 leaves + ~1/10 joins
  EXPECT_GT(hash.churn_moved, aff.churn_moved);
  EXPECT_LT(rnd.churn_moved, 0);  // random placement pins nothing

  SimResult again = RunSim(Small(SimStrategy::kAffinity));
  EXPECT_EQ(again.warm, aff.warm);
  EXPECT_EQ(again.spilled, aff.spilled);
  EXPECT_DOUBLE_EQ(again.wait_p99_s, aff.wait_p99_s);
  SimConfig other = Small(SimStrategy::kAffinity);
  other.seed = 7;
  EXPECT_NE(RunSim(other).wait_mean_s, aff.wait_mean_s);
}

}  // namespace
}  // namespace kiln
