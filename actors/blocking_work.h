// BlockingWork: runs blocking closures (subprocesses, git, file I/O) off the actor threads.
// Each closure gets its own thread (builds are few and long; a thread is cheap next to them).
// Thread-safe. Wait() blocks until every started closure has returned; call it at shutdown
// after cancelling builds, before destroying what the closures use.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kiln {

class BlockingWork {
 public:
  void Run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++active_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> l(mu_);
      if (--active_ == 0) cv_.notify_all();
    }).detach();
  }
  /// Returns false when work is still running after `timeout`.
  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return active_ == 0; });
  }
  int active() {
    std::lock_guard<std::mutex> l(mu_);
    return active_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
};

}  // namespace kiln
