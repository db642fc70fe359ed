// CancelToken: a one-shot, thread-safe cancellation flag that a blocked ProcessRunner::Run can
// wait on. Cancel() may be called from any thread, any number of times; cancelled() and fd() are
// safe from any thread. Once cancelled it stays cancelled. Not copyable or movable (runners keep
// a pointer to it); it must outlive every Run() that was given it.
#pragma once

#include <atomic>

namespace kiln {

class CancelToken {
 public:
  CancelToken();
  ~CancelToken();
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  /// Sets the flag and wakes every poller of fd(). Idempotent; never fails.
  void Cancel();
  /// True once Cancel() was called.
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  /// A descriptor that becomes (and stays) readable once cancelled, for poll(). Never read it.
  /// Returns -1 if the descriptor could not be created (then only cancelled() can be polled).
  int fd() const { return fd_; }

 private:
  std::atomic<bool> cancelled_{false};
  const int fd_;  // eventfd, O_CLOEXEC; never read, so level-triggered readability persists.
};

}  // namespace kiln
