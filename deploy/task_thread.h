// TaskThread: one long-lived thread that runs posted closures in order. The local deploy target
// needs a few things done on a specific thread: fork() of sandboxes (bubblewrap's
// --die-with-parent is tied to the thread that forked, so it must outlive the sandbox) and
// socket() inside a candidate's network namespace (setns() only affects the calling thread).
//
// Thread-safety: Run/Post may be called from any thread. Stop() joins the thread; closures
// posted afterwards are not run (Run then returns false). The destructor calls Stop().
// Closures must not call Stop() or Run() on their own TaskThread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace kiln {

class TaskThread {
 public:
  TaskThread() : thread_([this] { Loop(); }) {}
  ~TaskThread() { Stop(); }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  /// Runs `fn` on the thread and waits for it. False when the thread was stopped.
  bool Run(const std::function<void()>& fn) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    if (!Post([fn, done] {
          fn();
          done->set_value();
        }))
      return false;
    f.wait();
    return true;
  }

  /// Queues `fn`. False when the thread was stopped.
  bool Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(fn));
    cv_.notify_one();
    return true;
  }

  /// Runs what is queued, then ends the thread. Idempotent.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_one();
    }
    std::lock_guard<std::mutex> lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::mutex join_mu_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace kiln
