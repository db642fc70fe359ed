#include "actors/scheduler_core.h"

#include <gtest/gtest.h>

#include "actors/fair_queue.h"
#include "actors/push_lanes.h"

namespace kiln {
namespace {

OutcomePtr Outcome(BuildStatus s, const std::string& digest = "") {
  auto o = std::make_shared<BuildOutcome>();
  o->status = s;
  o->digest = digest;
  return o;
}

TEST(FairQueue, FloodDoesNotStarveSingleBuild) {
  FairQueue q;
  for (int i = 0; i < 20; ++i) q.Push("a", "a" + std::to_string(i));
  // Two of a's builds are already running when b's single build arrives.
  ASSERT_EQ(q.Pop()->first, "a");
  ASSERT_EQ(q.Pop()->first, "a");
  q.Push("b", "b0");
  q.Finished("a");
  auto next = q.Pop();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->first, "b");
  EXPECT_EQ(next->second, "b0");
}

TEST(FairQueue, PositionOfLateSingleBuildIsFront) {
  FairQueue q;
  for (int i = 0; i < 20; ++i) q.Push("a", "a" + std::to_string(i));
  q.Push("b", "b0");
  EXPECT_LE(*q.Position("b0"), 1u);
  EXPECT_EQ(*q.Position("a0"), 0u);
  EXPECT_FALSE(q.Position("zz"));
}

TEST(FairQueue, WeightsShareSlotsProportionally) {
  FairQueue q;
  q.SetWeight("heavy", 3);
  q.SetWeight("light", 1);
  for (int i = 0; i < 40; ++i) {
    q.Push("heavy", "h" + std::to_string(i));
    q.Push("light", "l" + std::to_string(i));
  }
  int heavy = 0, light = 0;
  for (int i = 0; i < 40; ++i) {  // one slot: pop, finish, repeat
    auto n = q.Pop();
    (n->first == "heavy" ? heavy : light)++;
    q.Finished(n->first);
  }
  EXPECT_EQ(heavy, 30);
  EXPECT_EQ(light, 10);
}

TEST(FairQueue, IdleDomainCannotBankCredit) {
  FairQueue q;
  for (int i = 0; i < 10; ++i) {
    q.Push("a", "a" + std::to_string(i));
  }
  for (int i = 0; i < 10; ++i) q.Finished(q.Pop()->first);
  // b arrives late with many jobs; a keeps submitting. They must alternate, not b x10.
  for (int i = 0; i < 10; ++i) q.Push("b", "b" + std::to_string(i));
  for (int i = 10; i < 20; ++i) q.Push("a", "a" + std::to_string(i));
  int b_first_run = 0;
  for (int i = 0; i < 4; ++i) {
    auto n = q.Pop();
    if (n->first == "b") b_first_run++;
    q.Finished(n->first);
  }
  EXPECT_EQ(b_first_run, 2);
}

TEST(FairQueue, RemoveAndFifoWithinDomain) {
  FairQueue q;
  q.Push("a", "k1");
  q.Push("a", "k2");
  q.Push("a", "k3");
  EXPECT_TRUE(q.Remove("k2"));
  EXPECT_FALSE(q.Remove("k2"));
  EXPECT_EQ(q.Pop()->second, "k1");
  EXPECT_EQ(q.Pop()->second, "k3");
  EXPECT_FALSE(q.Pop());
}

TEST(SchedulerCore, RespectsMaxParallel) {
  SchedulerCore s(2);
  for (int i = 0; i < 5; ++i)
    s.Submit({"b" + std::to_string(i), "d", "c" + std::to_string(i), "k" + std::to_string(i)});
  auto started = s.Dispatch();
  EXPECT_EQ(started.size(), 2u);
  EXPECT_TRUE(s.Dispatch().empty());
  s.Finish(started[0].key, started[0].owner, Outcome(BuildStatus::kSucceeded));
  EXPECT_EQ(s.Dispatch().size(), 1u);
  EXPECT_EQ(s.running(), 2u);
}

TEST(SchedulerCore, DedupSharesOneBuildAndCachesSuccess) {
  SchedulerCore s(2);
  auto d1 = s.Submit({"b1", "d", "c1", "K"});
  EXPECT_EQ(d1.kind, SchedulerCore::SubmitKind::kQueued);
  auto d2 = s.Submit({"b2", "d", "c2", "K"});
  EXPECT_EQ(d2.kind, SchedulerCore::SubmitKind::kJoined);
  EXPECT_EQ(d2.owner, "b1");
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);  // one build for both
  auto out = Outcome(BuildStatus::kSucceeded, "sha256:x");
  auto fin = s.Finish("K", "b1", out);
  EXPECT_EQ(fin.notify, (std::vector<BuildId>{"b1", "b2"}));
  auto d3 = s.Submit({"b3", "d", "c1", "K"});
  EXPECT_EQ(d3.kind, SchedulerCore::SubmitKind::kCacheHit);
  EXPECT_EQ(d3.cached->digest, "sha256:x");
  EXPECT_EQ(s.running(), 0u);
}

TEST(SchedulerCore, FailuresAreNotCached) {
  SchedulerCore s(1);
  s.Submit({"b1", "d", "c1", "K"});
  s.Dispatch();
  s.Finish("K", "b1", Outcome(BuildStatus::kFailed));
  EXPECT_EQ(s.Submit({"b2", "d", "c1", "K"}).kind, SchedulerCore::SubmitKind::kQueued);
}

TEST(SchedulerCore, CancelQueuedOwnerTransfersToWaiter) {
  SchedulerCore s(1);
  s.Submit({"x", "d", "c0", "X"});
  s.Dispatch();  // occupies the only slot
  s.Submit({"b1", "d", "c1", "K"});
  s.Submit({"b2", "d", "c2", "K"});
  auto c = s.Cancel("b1");
  EXPECT_EQ(c.kind, SchedulerCore::CancelKind::kTransferred);
  EXPECT_EQ(*c.new_owner, "b2");
  s.Finish("X", "x", Outcome(BuildStatus::kSucceeded));
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].owner, "b2");
  EXPECT_EQ(started[0].candidate, "c2");
}

TEST(SchedulerCore, CancelRunningOwnerWithWaiterRequeues) {
  SchedulerCore s(1);
  s.Submit({"b1", "d", "c1", "K"});
  s.Submit({"b2", "d", "c2", "K"});
  s.Dispatch();
  EXPECT_EQ(s.Cancel("b1").kind, SchedulerCore::CancelKind::kKillRunning);
  auto fin = s.Finish("K", "b1", Outcome(BuildStatus::kCancelled));
  EXPECT_TRUE(fin.requeued);
  EXPECT_EQ(fin.notify, std::vector<BuildId>{"b1"});
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].owner, "b2");
}

TEST(SchedulerCore, CancelLoneQueuedBuildRemovesIt) {
  SchedulerCore s(1);
  s.Submit({"x", "d", "c0", "X"});
  s.Dispatch();
  s.Submit({"b1", "d", "c1", "K"});
  EXPECT_EQ(*s.Position("b1"), 0u);
  EXPECT_EQ(s.Cancel("b1").kind, SchedulerCore::CancelKind::kRemovedQueued);
  EXPECT_EQ(s.Cancel("b1").kind, SchedulerCore::CancelKind::kUnknown);
  EXPECT_EQ(s.queued(), 0u);
  EXPECT_FALSE(s.Position("b1"));
}

TEST(SchedulerCore, CancelWaiterLeavesOwner) {
  SchedulerCore s(1);
  s.Submit({"b1", "d", "c1", "K"});
  s.Submit({"b2", "d", "c2", "K"});
  s.Dispatch();
  EXPECT_EQ(s.Cancel("b2").kind, SchedulerCore::CancelKind::kRemovedWaiter);
  auto fin = s.Finish("K", "b1", Outcome(BuildStatus::kSucceeded));
  EXPECT_EQ(fin.notify, std::vector<BuildId>{"b1"});
}

TEST(SchedulerCore, CacheIsBoundedLru) {
  SchedulerCore s(1, /*cache_capacity=*/2);
  s.Remember("k1", Outcome(BuildStatus::kSucceeded));
  s.Remember("k2", Outcome(BuildStatus::kSucceeded));
  EXPECT_TRUE(s.CachedOutcome("k1"));
  s.Submit({"b", "d", "c", "k1"});  // touch k1
  s.Remember("k3", Outcome(BuildStatus::kSucceeded));
  EXPECT_TRUE(s.CachedOutcome("k1"));
  EXPECT_FALSE(s.CachedOutcome("k2"));
  EXPECT_EQ(s.cache_size(), 2u);
}

TEST(SchedulerCore, FairAcrossDomainsThroughCore) {
  SchedulerCore s(2);
  for (int i = 0; i < 20; ++i)
    s.Submit({"a" + std::to_string(i), "A", "ca", "ka" + std::to_string(i)});
  auto first = s.Dispatch();
  ASSERT_EQ(first.size(), 2u);
  s.Submit({"b0", "B", "cb", "kb0"});
  s.Finish(first[0].key, first[0].owner, Outcome(BuildStatus::kSucceeded));
  auto next = s.Dispatch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].domain, "B");
}

TEST(PushLanes, SerializesPerRegistry) {
  PushLanes p;
  EXPECT_TRUE(p.Acquire("r1", "b1"));
  EXPECT_FALSE(p.Acquire("r1", "b2"));
  EXPECT_FALSE(p.Acquire("r1", "b3"));
  EXPECT_TRUE(p.Acquire("r2", "b4"));  // other registry is independent
  p.Release("r1", "b3");               // b3 gave up while waiting
  EXPECT_EQ(*p.Release("r1", "b1"), "b2");
  EXPECT_EQ(*p.Holder("r1"), "b2");
  EXPECT_FALSE(p.Release("r1", "b2"));
  EXPECT_FALSE(p.Holder("r1"));
}

// Issue 18: a lane is one repository of one registry; the key never confuses two pairs.
TEST(PushLanes, OneLanePerRepositoryOfARegistry) {
  PushLanes p;
  EXPECT_TRUE(p.Acquire(PushLaneKey("local", "loop/a"), "a1"));
  EXPECT_TRUE(p.Acquire(PushLaneKey("local", "loop/b"), "b1")) << "another repository";
  EXPECT_FALSE(p.Acquire(PushLaneKey("local", "loop/a"), "a2")) << "same repository waits";
  EXPECT_EQ(*p.Release(PushLaneKey("local", "loop/a"), "a1"), "a2");
  EXPECT_EQ(PushLaneKey("local", "loop/a"), PushLaneKey("local", "loop/a"));
  EXPECT_NE(PushLaneKey("local", "loop/a"), PushLaneKey("remote", "loop/a"));
  EXPECT_NE(PushLaneKey("a", "b/c"), PushLaneKey("a/b", "c"));
}

// Issue 20: places are taken when a build is built (Reserve), the lane is asked for after its
// blobs are uploaded (Acquire): the tags still move in build order, whoever uploads faster.
TEST(PushLanes, ReservedPlaceKeepsBuildOrderWhileBlobsUpload) {
  PushLanes p;
  p.Reserve("r", "first");   // built first, uploads a big layer
  p.Reserve("r", "second");  // built second, small layer
  EXPECT_FALSE(p.Acquire("r", "second")) << "the first build is still ahead in line";
  EXPECT_FALSE(p.Holder("r"));
  EXPECT_TRUE(p.Acquire("r", "first"));
  EXPECT_EQ(*p.Release("r", "first"), "second");
  EXPECT_FALSE(p.Release("r", "second"));
  // A reserved build that fails its blob upload leaves the line: the next one goes at once.
  p.Reserve("r", "failed");
  p.Reserve("r", "next");
  EXPECT_FALSE(p.Acquire("r", "next"));
  EXPECT_EQ(*p.Release("r", "failed"), "next");
  EXPECT_EQ(*p.Holder("r"), "next");
  // Without a reservation Acquire joins the end of the line, as before.
  EXPECT_FALSE(p.Acquire("r", "late"));
  EXPECT_EQ(*p.Release("r", "next"), "late");
}

// Issue 18: a build that finds the lane free and nobody in line takes it when it reserves (no
// separate blob stage); one that finds it held, or someone ahead in line, only takes its place.
TEST(PushLanes, ReserveOrTakeTakesTheLaneOnlyWhenFreeAndNobodyIsAhead) {
  PushLanes p;
  EXPECT_TRUE(p.ReserveOrTake("r", "first"));
  EXPECT_EQ(*p.Holder("r"), "first");
  EXPECT_TRUE(p.Acquire("r", "first"));  // asking again under the grant keeps it
  EXPECT_FALSE(p.ReserveOrTake("r", "second")) << "the lane is held";
  EXPECT_EQ(p.Waiting("r"), 1u);
  // The holder releases; "second" reserved but has not asked: the lane stays free...
  EXPECT_FALSE(p.Release("r", "first"));
  EXPECT_FALSE(p.Holder("r"));
  // ...and is not taken by a later build: "second" is ahead in line (tags in build order).
  EXPECT_FALSE(p.ReserveOrTake("r", "third"));
  EXPECT_FALSE(p.Holder("r"));
  EXPECT_FALSE(p.Acquire("r", "third"));
  EXPECT_TRUE(p.Acquire("r", "second"));
  EXPECT_EQ(*p.Release("r", "second"), "third");
  EXPECT_FALSE(p.Release("r", "third"));
  // Other registries have lanes of their own.
  EXPECT_TRUE(p.ReserveOrTake("r2", "other"));
  EXPECT_TRUE(p.ReserveOrTake("r", "fourth"));
}

// --- per-domain build slots (issue 15) ---

JobRequest Job(const std::string& domain, int i) {
  std::string n = domain + std::to_string(i);
  return {"b-" + n, domain, "c-" + n, "k-" + n};
}

size_t CountDomain(const std::vector<StartOrder>& started, const std::string& domain) {
  size_t n = 0;
  for (const auto& o : started) n += o.domain == domain;
  return n;
}

TEST(SchedulerCoreSlots, DomainAtItsCapWithHungBuildsDoesNotBlockOthers) {
  SchedulerCore s(4);
  s.SetDomainCap("A", 2);
  s.SetDomainCap("B", 2);
  for (int i = 0; i < 10; ++i) s.Submit(Job("A", i));
  auto started = s.Dispatch();
  EXPECT_EQ(started.size(), 2u);  // A holds its two slots and never finishes (hung builds)
  EXPECT_EQ(CountDomain(started, "A"), 2u);
  EXPECT_TRUE(s.Dispatch().empty()) << "A is at its cap: its queued builds wait";
  EXPECT_EQ(s.QueueDepth("A"), 8u);
  s.Submit(Job("B", 0));
  started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u) << "B is admitted although A's builds hang";
  EXPECT_EQ(started[0].domain, "B");
  for (int i = 1; i < 4; ++i) s.Submit(Job("B", i));
  started = s.Dispatch();
  EXPECT_EQ(started.size(), 1u);  // B reaches its own cap of 2
  EXPECT_EQ(s.Running("A"), 2u);
  EXPECT_EQ(s.Running("B"), 2u);
  EXPECT_EQ(s.running(), 4u);
  // A capped domain's queued build is ranked after the others, but still has a position.
  ASSERT_TRUE(s.Position("b-B2"));
  ASSERT_TRUE(s.Position("b-A2"));
}

TEST(SchedulerCoreSlots, WithoutCapsOneDomainTakesEverySlot) {
  // The behaviour the caps exist for: no cap, and A's hung builds hold all slots.
  SchedulerCore s(4);
  for (int i = 0; i < 10; ++i) s.Submit(Job("A", i));
  EXPECT_EQ(s.Dispatch().size(), 4u);
  s.Submit(Job("B", 0));
  EXPECT_TRUE(s.Dispatch().empty());
}

TEST(SchedulerCoreSlots, CapOfOneRunsOneBuildAtATime) {
  SchedulerCore s(3);
  s.SetDomainCap("A", 1);
  for (int i = 0; i < 3; ++i) s.Submit(Job("A", i));
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].owner, "b-A0");
  EXPECT_TRUE(s.Dispatch().empty());
  s.Finish(started[0].key, started[0].owner, Outcome(BuildStatus::kFailed));
  started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].owner, "b-A1");  // FIFO within the domain
}

TEST(SchedulerCoreSlots, CapsCombineWithWeights) {
  {
    SchedulerCore s(4);  // weights alone: 3 to 1
    s.SetWeight("A", 3);
    for (int i = 0; i < 10; ++i) s.Submit(Job("A", i));
    for (int i = 0; i < 10; ++i) s.Submit(Job("B", i));
    auto started = s.Dispatch();
    EXPECT_EQ(CountDomain(started, "A"), 3u);
    EXPECT_EQ(CountDomain(started, "B"), 1u);
  }
  {
    SchedulerCore s(4);  // the cap bounds the heavy domain; the slot goes to the other one
    s.SetWeight("A", 3);
    s.SetDomainCap("A", 2);
    for (int i = 0; i < 10; ++i) s.Submit(Job("A", i));
    for (int i = 0; i < 10; ++i) s.Submit(Job("B", i));
    auto started = s.Dispatch();
    EXPECT_EQ(CountDomain(started, "A"), 2u);
    EXPECT_EQ(CountDomain(started, "B"), 2u);
    // When an A build finishes, A (below its cap, lowest ratio) gets the slot back.
    for (const auto& o : started) {
      if (o.domain != "A") continue;
      s.Finish(o.key, o.owner, Outcome(BuildStatus::kSucceeded));
      break;
    }
    auto next = s.Dispatch();
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].domain, "A");
  }
}

TEST(SchedulerCoreSlots, CancelFreesTheDomainsSlot) {
  SchedulerCore s(4);
  s.SetDomainCap("A", 1);
  s.Submit(Job("A", 0));
  s.Submit(Job("A", 1));
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(s.Cancel("b-A1").kind, SchedulerCore::CancelKind::kRemovedQueued);
  s.Submit(Job("A", 2));
  EXPECT_EQ(s.Cancel("b-A0").kind, SchedulerCore::CancelKind::kKillRunning);
  EXPECT_TRUE(s.Dispatch().empty()) << "the slot is held until the killed build finishes";
  s.Finish("k-A0", "b-A0", Outcome(BuildStatus::kCancelled));
  EXPECT_EQ(s.Running("A"), 0u);
  started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].owner, "b-A2");
}

TEST(SchedulerCoreSlots, RequeuedJobAfterCancelWaitsForTheCap) {
  SchedulerCore s(4);
  s.SetDomainCap("A", 1);
  s.Submit(Job("A", 0));
  JobRequest joined = Job("A", 9);
  joined.key = "k-A0";  // same key: waits on A0
  s.Submit(joined);
  s.Submit(Job("A", 1));
  ASSERT_EQ(s.Dispatch().size(), 1u);
  auto fin = s.Finish("k-A0", "b-A0", Outcome(BuildStatus::kCancelled));
  EXPECT_TRUE(fin.requeued);
  auto started = s.Dispatch();
  ASSERT_EQ(started.size(), 1u);  // the waiter's job, at the front; A1 still waits
  EXPECT_EQ(started[0].owner, "b-A9");
  EXPECT_EQ(s.QueueDepth("A"), 1u);
}
// --- end per-domain build slots ---

}  // namespace
}  // namespace kiln
