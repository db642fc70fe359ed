#include "pool/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace kiln {
namespace {

std::string Cand(int i) { return "domain" + std::to_string(i % 7) + "/c" + std::to_string(i); }

Placement PoolOf(int n, size_t slots = 2, Placement::Options opts = {}) {
  Placement p(opts);
  for (int i = 0; i < n; ++i) p.AddWorker("w" + std::to_string(i), slots, 0);
  return p;
}

std::map<std::string, std::string> Owners(const Placement& p, int candidates) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < candidates; ++i) out[Cand(i)] = *p.Preferred(Cand(i));
  return out;
}

TEST(Placement, HashIsStableAndSeparatesFields) {
  EXPECT_EQ(RendezvousHash("w1", "a/b"), RendezvousHash("w1", "a/b"));
  EXPECT_NE(RendezvousHash("ab", "c"), RendezvousHash("a", "bc"));
  EXPECT_NE(RendezvousHash("w1", "a/b"), RendezvousHash("w2", "a/b"));
}

TEST(Placement, PreferredIsFirstOfRankingAndDeterministic) {
  Placement a = PoolOf(10), b = PoolOf(10);
  for (int i = 0; i < 200; ++i) {
    auto r = a.Ranking(Cand(i));
    ASSERT_EQ(r.size(), 10u);
    EXPECT_EQ(r.front(), *a.Preferred(Cand(i)));
    EXPECT_EQ(r, b.Ranking(Cand(i)));
  }
}

TEST(Placement, SpreadsCandidatesEvenlyAndBySlots) {
  Placement p = PoolOf(10);
  std::map<std::string, int> count;
  for (const auto& [c, w] : Owners(p, 10000)) ++count[w];
  ASSERT_EQ(count.size(), 10u);
  for (const auto& [w, n] : count) {
    EXPECT_GT(n, 800) << w;
    EXPECT_LT(n, 1200) << w;
  }
  // A worker with 4 slots among 1-slot workers takes about 4 shares.
  Placement q;
  for (int i = 0; i < 4; ++i) q.AddWorker("s" + std::to_string(i), 1, 0);
  q.AddWorker("big", 4, 0);
  int big = 0;
  for (const auto& [c, w] : Owners(q, 8000)) big += w == "big" ? 1 : 0;
  EXPECT_GT(big, 3600);  // 4/8 of 8000 = 4000
  EXPECT_LT(big, 4400);
}

TEST(Placement, JoinMovesOnlyItsShareToTheNewWorker) {
  Placement p = PoolOf(10);
  auto before = Owners(p, 5000);
  p.AddWorker("w10", 2, 5);
  auto after = Owners(p, 5000);
  int moved = 0;
  for (const auto& [c, w] : before) {
    if (after[c] != w) {
      ++moved;
      EXPECT_EQ(after[c], "w10") << c << " moved between two old workers";
    }
  }
  EXPECT_GT(moved, 5000 / 11 - 150);
  EXPECT_LT(moved, 5000 / 11 + 150);
}

// Issue 20: a worker added takes new candidates; those already warm on a worker stay there,
// and one no longer advertised warm (evicted by its worker) is placed by rendezvous again.
TEST(Placement, JoinKeepsWarmCandidatesAndTakesNewOnes) {
  Placement p = PoolOf(10);
  auto before = Owners(p, 2000);
  for (const auto& [c, w] : before) p.SetWarm(w, c, true);
  p.AddWorker("w10", 2, 5);
  EXPECT_EQ(Owners(p, 2000), before) << "a warm candidate moved to the new worker";
  int fresh_on_new = 0;
  for (int i = 0; i < 2000; ++i)
    fresh_on_new += *p.Preferred("new-" + std::to_string(i)) == "w10" ? 1 : 0;
  EXPECT_GT(fresh_on_new, 2000 / 11 - 80);
  EXPECT_LT(fresh_on_new, 2000 / 11 + 80);
  // Evicted on its worker: ranked by rendezvous alone again (the new worker for some).
  std::string moved;
  for (const auto& [c, w] : before) {
    p.SetWarm(w, c, false);
    std::vector<std::string> r = p.Ranking(c);
    if (r.front() == "w10") moved = c;
    if (!moved.empty()) break;
    EXPECT_EQ(r.front(), w) << c;
  }
  EXPECT_FALSE(moved.empty()) << "no evicted candidate went to its rendezvous choice";
  // A worker's answer lists what it holds now: an evicted candidate is cold there.
  const std::string e = before.rbegin()->first, holder = before.rbegin()->second;
  p.SetWarmSet(holder, {});
  EXPECT_FALSE(p.IsWarm(holder, e));
  p.SetWarmSet(holder, {e});
  EXPECT_TRUE(p.IsWarm(holder, e));
  EXPECT_EQ(p.Ranking(e).front(), holder);
  // Warm on two workers (a spill): the one ranking higher by rendezvous stays first.
  const std::string c = before.rbegin()->first, owner = before.rbegin()->second;  // still warm
  std::vector<std::string> cold = p.Ranking(c);
  p.SetWarm(cold.back(), c, true);
  EXPECT_EQ(p.Ranking(c).front(), owner);
  EXPECT_EQ(p.Ranking(c)[1], cold.back());
}

TEST(Placement, LeaveMovesOnlyTheLeaversCandidatesToTheirSecondChoice) {
  Placement p = PoolOf(10);
  auto before = Owners(p, 5000);
  std::map<std::string, std::string> second;
  for (const auto& [c, w] : before) second[c] = p.Ranking(c)[1];
  p.RemoveWorker("w3");
  auto after = Owners(p, 5000);
  for (const auto& [c, w] : before) {
    if (w == "w3") {
      EXPECT_EQ(after[c], second[c]) << c;
    } else {
      EXPECT_EQ(after[c], w) << c << " moved though its worker stayed";
    }
  }
  // Not ready counts as gone for placement; ready again takes its candidates back.
  p.AddWorker("w3", 2, 10);
  p.SetReady("w5", false, 11);
  for (const auto& [c, w] : Owners(p, 5000)) {
    EXPECT_NE(w, "w5");
    if (before[c] != "w5") {
      EXPECT_EQ(w, before[c]) << c;
    }
  }
  p.SetReady("w5", true, 12);
  EXPECT_EQ(Owners(p, 5000), before);
}

TEST(Placement, NoReadyWorker) {
  Placement p;
  BuildTimes t(10, 40);
  EXPECT_EQ(p.Place("d/c", t, 0).kind, Placement::Kind::kNoWorker);
  p.AddWorker("w0", 1, 0);
  p.SetReady("w0", false, 0);
  EXPECT_FALSE(p.Preferred("d/c"));
  EXPECT_EQ(p.Place("d/c", t, 0).kind, Placement::Kind::kNoWorker);
}

TEST(Placement, PreferredWhileItHasAFreeSlot) {
  Placement p = PoolOf(3, 2);
  BuildTimes t(10, 40);
  std::string pref = *p.Preferred("d/c");
  auto d = p.Place("d/c", t, 0);
  EXPECT_EQ(d.kind, Placement::Kind::kPreferred);
  EXPECT_EQ(d.worker, pref);
  ASSERT_TRUE(p.Started(pref, "d/other", 0, 10));
  EXPECT_EQ(p.FreeSlots(pref), 1u);
  EXPECT_EQ(p.Place("d/c", t, 1).kind, Placement::Kind::kPreferred);
}

// The preferred worker is full. Waiting for it is cheaper than a cold build elsewhere while
// expected wait + warm <= cold; past that the build spills to the best-ranked free worker.
TEST(Placement, WaitsWhileCheaperThanColdThenSpills) {
  Placement p = PoolOf(3, 1);
  BuildTimes t(10, 40);
  auto rank = p.Ranking("d/c");
  ASSERT_TRUE(p.Started(rank[0], "d/x", 0, 25));  // ends at 25
  auto wait = p.Place("d/c", t, 0);               // wait 25 + warm 10 = 35 <= 40
  EXPECT_EQ(wait.kind, Placement::Kind::kWait);
  EXPECT_EQ(wait.worker, rank[0]);
  EXPECT_DOUBLE_EQ(wait.expected_wait_s, 25);

  Placement q = PoolOf(3, 1);
  ASSERT_TRUE(q.Started(rank[0], "d/x", 0, 100));  // 100 + 10 > 40
  auto spill = q.Place("d/c", t, 0);
  EXPECT_EQ(spill.kind, Placement::Kind::kSpill);
  EXPECT_EQ(spill.worker, rank[1]);
  // The second-ranked worker is busy too: the third.
  ASSERT_TRUE(q.Started(rank[1], "d/y", 0, 100));
  EXPECT_EQ(q.Place("d/c", t, 0).worker, rank[2]);
  // All full: wait for the preferred one.
  ASSERT_TRUE(q.Started(rank[2], "d/z", 0, 100));
  EXPECT_EQ(q.Place("d/c", t, 0).kind, Placement::Kind::kWait);
}

TEST(Placement, MeasuredTimesMoveTheSpillThreshold) {
  Placement p = PoolOf(2, 1);
  auto rank = p.Ranking("d/c");
  ASSERT_TRUE(p.Started(rank[0], "d/x", 0, 30));
  BuildTimes t(10, 60);  // 30 + 10 <= 60: wait
  EXPECT_EQ(p.Place("d/c", t, 0).kind, Placement::Kind::kWait);
  for (int i = 0; i < 30; ++i) t.Record(false, 20);  // cold builds measured at 20 s
  EXPECT_NEAR(t.cold(), 20, 0.1);
  EXPECT_EQ(p.Place("d/c", t, 0).kind, Placement::Kind::kSpill);
  t.Record(true, -1);  // ignored
  EXPECT_DOUBLE_EQ(t.warm(), 10);
}

TEST(Placement, SpillTargetMustHaveBeenFreeLongEnough) {
  Placement::Options opts;
  opts.min_idle_s = 5;
  Placement p = PoolOf(2, 1, opts);
  BuildTimes t(10, 40);
  auto rank = p.Ranking("d/c");
  ASSERT_TRUE(p.Started(rank[0], "d/x", 0, 100));
  ASSERT_TRUE(p.Started(rank[1], "d/y", 0, 3));
  ASSERT_TRUE(p.Finished(rank[1], "d/y", 3));  // free since 3
  EXPECT_EQ(p.Place("d/c", t, 4).kind, Placement::Kind::kWait);
  EXPECT_EQ(p.Place("d/c", t, 8).kind, Placement::Kind::kSpill);

  Placement::Options off;
  off.allow_spill = false;
  Placement q = PoolOf(2, 1, off);
  ASSERT_TRUE(q.Started(rank[0], "d/x", 0, 1000));
  EXPECT_EQ(q.Place("d/c", t, 0).kind, Placement::Kind::kWait);
}

TEST(Placement, StartedAndFinishedCheckTheWorker) {
  Placement p = PoolOf(1, 1);
  EXPECT_FALSE(p.Started("nope", "d/c", 0, 1));
  EXPECT_FALSE(p.Finished("w0", "d/c", 0));
  EXPECT_TRUE(p.Started("w0", "d/c", 0, 1));
  EXPECT_EQ(p.FreeSlots("w0"), 0u);
  EXPECT_TRUE(p.Finished("w0", "d/c", 1));
  EXPECT_EQ(p.FreeSlots("w0"), 1u);
  EXPECT_EQ(p.FreeSlots("nope"), 0u);
}

}  // namespace
}  // namespace kiln
