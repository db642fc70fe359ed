// BlockingWork: a bounded pool of threads that runs blocking closures (subprocesses, git, file
// I/O, registry pushes) off the actor threads. Threads start on demand up to `max_threads`
// and exit after `idle` without work; beyond the cap, closures wait in a FIFO queue. Builds
// are bounded by the scheduler's slots and deploys by the domains, so the cap is a safety net
// against a flood of short work (resolves, key writes) rather than a throttle; the queue depth
// is exported on /metrics (kiln_blocking_work_queued) so an operator sees when it bites.
//
// A closure that starts a child process keeps its thread until the child is reaped, so the
// child's PR_SET_PDEATHSIG (common/subprocess.h) never fires early.
//
// Ownership: shared by the Runtime and every actor environment; worker threads share the
// pool's state, so the pool may be destroyed while they drain. Thread-safety: all methods are
// thread-safe. Wait() blocks until the queue is empty and no closure runs; call it at
// shutdown after cancelling builds, before destroying what the closures use.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace kiln {

class MetricsRegistry;

class BlockingWork {
 public:
  explicit BlockingWork(size_t max_threads = 256,
                        std::chrono::milliseconds idle = std::chrono::seconds(30));
  ~BlockingWork();
  BlockingWork(const BlockingWork&) = delete;
  BlockingWork& operator=(const BlockingWork&) = delete;

  /// Queues `fn`; it runs on a pool thread as soon as one is free. Exceptions from `fn` are
  /// caught and logged.
  void Run(std::function<void()> fn);
  /// Returns false when work is still queued or running after `timeout`.
  bool Wait(std::chrono::milliseconds timeout);
  /// Closures running now.
  int active() const;
  /// Closures waiting for a thread.
  size_t queued() const;
  /// Threads alive (busy or idle).
  size_t threads() const;
  /// Publishes kiln_blocking_work_{active,queued,threads} gauges in `metrics` on every change.
  void ExportTo(std::shared_ptr<MetricsRegistry> metrics);

 private:
  struct Shared;
  static void WorkerLoop(const std::shared_ptr<Shared>& s);
  std::shared_ptr<Shared> shared_;
};

}  // namespace kiln
