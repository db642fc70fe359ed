// FakeToolBackend: a ToolBackend for tests and the conformance test server. Answers every tool
// from one worker thread with canned results; build_candidate with wait=true reports progress
// every `progress_interval` and succeeds after `build_duration` unless cancelled (candidate
// "broken" fails with a diagnostic). Not for production.
//
// Thread-safety: all methods are thread-safe. Callbacks run on the worker thread, never inside
// Call or Cancel. Destruction stops the worker; calls still pending never finish.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/tool_backend.h"

namespace kiln {

class FakeToolBackend : public ToolBackend {
 public:
  struct Options {
    std::chrono::milliseconds build_duration{2000};
    std::chrono::milliseconds progress_interval{200};
  };

  FakeToolBackend() : FakeToolBackend(Options{}) {}
  explicit FakeToolBackend(Options options);
  ~FakeToolBackend() override;

  uint64_t Call(ToolCall call, ProgressFn progress, DoneFn done) override;
  void Cancel(uint64_t handle) override;
  nlohmann::json Readiness() override;
  std::string MetricsText() override;

  void set_ready(bool ready) { ready_ = ready; }
  /// Calls received so far (in order).
  std::vector<ToolCall> calls() const;
  /// Handles passed to Cancel (in order).
  std::vector<uint64_t> cancelled() const;
  /// Handles whose done callback ran.
  std::set<uint64_t> finished() const;
  /// Handle of the n-th call (0-based) or 0.
  uint64_t handle_of(size_t n) const;

 private:
  struct Pending {
    ToolCall call;
    ProgressFn progress;
    DoneFn done;
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point next_event;
    int steps = 0;
    bool cancelled = false;
  };

  void Run();
  // Advances one call; returns true when it finished (done already called). Runs unlocked.
  static bool Step(Pending& p, const Options& options, uint64_t handle);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Pending> pending_;  // guarded by mu_
  std::vector<ToolCall> calls_;          // guarded by mu_
  std::vector<uint64_t> handles_;        // guarded by mu_
  std::vector<uint64_t> cancelled_;      // guarded by mu_
  std::set<uint64_t> finished_;          // guarded by mu_
  uint64_t next_handle_ = 1;             // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  std::atomic<bool> ready_{true};
  std::thread worker_;
};

}  // namespace kiln
