// StateWriter: runs the state journal's writes (fsync) off the actor threads, one at a time and
// in the order they were posted, so a build's "started" record always precedes its "finished"
// record. Fire-and-forget: a failed write is logged (disk full, I/O error) and the service
// keeps running from memory; the journal itself stays consistent (state/journal.h).
// Thread-safety: Post from any thread; Drain once at shutdown (waits for what was posted).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kiln {

class StateWriter {
 public:
  StateWriter() : thread_([this] { Loop(); }) {}
  ~StateWriter() { Drain(); }
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(fn));
    cv_.notify_one();
  }
  /// Runs everything posted so far, then stops the thread. Idempotent.
  void Drain() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      fn();
      l.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln
