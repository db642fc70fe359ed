#include "actors/blocking_work.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/metrics.h"

namespace kiln {

struct BlockingWork::Shared {
  size_t max_threads;
  std::chrono::milliseconds idle;
  mutable std::mutex mu;
  std::condition_variable work_cv;           // a closure was queued, or stopping
  std::condition_variable done_cv;           // a closure finished
  std::deque<std::function<void()>> queue;   // guarded by mu
  size_t threads = 0;                        // guarded by mu
  size_t idle_threads = 0;                   // guarded by mu
  int active = 0;                            // guarded by mu
  bool stopping = false;                     // guarded by mu
  std::shared_ptr<MetricsRegistry> metrics;  // guarded by mu

  void PublishLocked() const {
    if (metrics == nullptr) return;
    metrics->Set("kiln_blocking_work_active", {}, active);
    metrics->Set("kiln_blocking_work_queued", {}, static_cast<double>(queue.size()));
    metrics->Set("kiln_blocking_work_threads", {}, static_cast<double>(threads));
  }
};

BlockingWork::BlockingWork(size_t max_threads, std::chrono::milliseconds idle)
    : shared_(std::make_shared<Shared>()) {
  shared_->max_threads = max_threads == 0 ? 1 : max_threads;
  shared_->idle = idle;
}

BlockingWork::~BlockingWork() {
  std::lock_guard<std::mutex> l(shared_->mu);
  shared_->stopping = true;  // idle threads exit now; busy ones after the queue drains
  shared_->work_cv.notify_all();
}

void BlockingWork::Run(std::function<void()> fn) {
  bool spawn = false;
  {
    std::lock_guard<std::mutex> l(shared_->mu);
    shared_->queue.push_back(std::move(fn));
    if (shared_->idle_threads == 0 && shared_->threads < shared_->max_threads) {
      ++shared_->threads;
      spawn = true;
    }
    shared_->PublishLocked();
  }
  if (spawn) {
    std::thread([s = shared_] { WorkerLoop(s); }).detach();
  } else {
    shared_->work_cv.notify_one();
  }
}

void BlockingWork::WorkerLoop(const std::shared_ptr<Shared>& s) {
  std::unique_lock<std::mutex> l(s->mu);
  while (true) {
    if (s->queue.empty()) {
      if (s->stopping) break;
      ++s->idle_threads;
      bool got = s->work_cv.wait_for(l, s->idle, [&] { return !s->queue.empty() || s->stopping; });
      --s->idle_threads;
      if (!got || s->queue.empty()) break;  // idle too long, or stopping with nothing left
    }
    std::function<void()> fn = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->active;
    s->PublishLocked();
    l.unlock();
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("blocking work: a task threw: {}", e.what());
    } catch (...) {
      spdlog::error("blocking work: a task threw");
    }
    fn = nullptr;  // release captures outside the lock
    l.lock();
    --s->active;
    s->PublishLocked();
    s->done_cv.notify_all();
  }
  --s->threads;
  s->PublishLocked();
  s->done_cv.notify_all();
}

bool BlockingWork::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(shared_->mu);
  return shared_->done_cv.wait_for(l, timeout,
                                   [&] { return shared_->active == 0 && shared_->queue.empty(); });
}

int BlockingWork::active() const {
  std::lock_guard<std::mutex> l(shared_->mu);
  return shared_->active;
}

size_t BlockingWork::queued() const {
  std::lock_guard<std::mutex> l(shared_->mu);
  return shared_->queue.size();
}

size_t BlockingWork::threads() const {
  std::lock_guard<std::mutex> l(shared_->mu);
  return shared_->threads;
}

void BlockingWork::ExportTo(std::shared_ptr<MetricsRegistry> metrics) {
  metrics->DeclareGauge("kiln_blocking_work_active", "Blocking closures running on the pool.");
  metrics->DeclareGauge("kiln_blocking_work_queued", "Blocking closures waiting for a thread.");
  metrics->DeclareGauge("kiln_blocking_work_threads", "Threads of the blocking-work pool.");
  std::lock_guard<std::mutex> l(shared_->mu);
  shared_->metrics = std::move(metrics);
  shared_->PublishLocked();
}

}  // namespace kiln
