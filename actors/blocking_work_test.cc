#include "actors/blocking_work.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/metrics.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;

// A gate closures block on until the test opens it.
class Gate {
 public:
  void Pass() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Polls `pred` for up to 10 s (a liveness bound, not a timing assertion).
template <class Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST(BlockingWorkTest, RunsEveryClosureAndWaitSeesThemDone) {
  BlockingWork work(4);
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) work.Run([&] { ran++; });
  ASSERT_TRUE(work.Wait(10s));
  EXPECT_EQ(ran.load(), 50);
  EXPECT_EQ(work.active(), 0);
  EXPECT_EQ(work.queued(), 0u);
}

TEST(BlockingWorkTest, ThreadsAreCappedAndTheRestQueueInOrder) {
  BlockingWork work(2);
  auto gate = std::make_shared<Gate>();
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) {
    work.Run([gate, &mu, &order, i] {
      {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);  // start order
      }
      gate->Pass();
    });
  }
  ASSERT_TRUE(Eventually([&] { return work.active() == 2; }));
  EXPECT_EQ(work.threads(), 2u);
  EXPECT_EQ(work.queued(), 3u);
  EXPECT_FALSE(work.Wait(0ms));
  gate->Open();
  ASSERT_TRUE(work.Wait(10s));
  ASSERT_EQ(order.size(), 5u);
  // The queued three start only after the first two (two threads may dequeue neighbours in
  // either order; strict FIFO is checked with one thread below).
  std::vector<int> first(order.begin(), order.begin() + 2);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<int>{0, 1}));
}

TEST(BlockingWorkTest, OneThreadRunsTheQueueInOrder) {
  BlockingWork work(1);
  auto gate = std::make_shared<Gate>();
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) {
    work.Run([gate, &mu, &order, i] {
      gate->Pass();
      std::lock_guard<std::mutex> l(mu);
      order.push_back(i);
    });
  }
  gate->Open();
  ASSERT_TRUE(work.Wait(10s));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(BlockingWorkTest, SequentialWorkReusesOneThreadAndIdleThreadsExit) {
  BlockingWork work(8, 100ms);
  for (int i = 0; i < 10; ++i) {
    work.Run([] {});
    ASSERT_TRUE(work.Wait(10s));
    ASSERT_TRUE(Eventually([&] { return work.threads() <= 1; }));
  }
  EXPECT_EQ(work.threads(), 1u);
  EXPECT_TRUE(Eventually([&] { return work.threads() == 0; }));
}

TEST(BlockingWorkTest, AThrowingClosureDoesNotStopThePool) {
  BlockingWork work(1);
  std::atomic<bool> later{false};
  work.Run([] { throw std::runtime_error("boom"); });
  work.Run([&] { later = true; });
  ASSERT_TRUE(work.Wait(10s));
  EXPECT_TRUE(later.load());
}

TEST(BlockingWorkTest, QueueDepthIsExported) {
  auto metrics = std::make_shared<MetricsRegistry>();
  BlockingWork work(1);
  work.ExportTo(metrics);
  auto gate = std::make_shared<Gate>();
  work.Run([gate] { gate->Pass(); });
  work.Run([gate] { gate->Pass(); });
  work.Run([gate] { gate->Pass(); });
  ASSERT_TRUE(Eventually([&] { return work.active() == 1; }));
  EXPECT_EQ(metrics->Value("kiln_blocking_work_queued"), 2);
  EXPECT_EQ(metrics->Value("kiln_blocking_work_active"), 1);
  EXPECT_NE(metrics->Render().find("kiln_blocking_work_threads 1"), std::string::npos);
  gate->Open();
  ASSERT_TRUE(work.Wait(10s));
  EXPECT_EQ(metrics->Value("kiln_blocking_work_queued"), 0);
}

TEST(BlockingWorkTest, PoolMayBeDestroyedWhileAClosureRuns) {
  auto gate = std::make_shared<Gate>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  {
    BlockingWork work(2);
    work.Run([gate, finished] {
      gate->Pass();
      *finished = true;
    });
    ASSERT_TRUE(Eventually([&] { return work.active() == 1; }));
  }
  gate->Open();
  EXPECT_TRUE(Eventually([&] { return finished->load(); }));
}

}  // namespace
}  // namespace kiln
