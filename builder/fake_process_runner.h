// FakeProcessRunner: a ProcessRunner for unit tests of the builders (and of anything else that
// runs processes through ProcessRunner). Records every ProcessSpec it is given (argv, env, cwd,
// stdin, timeout) and answers each Run with the next scripted FakeRun: its chunks are streamed
// to `on_output` in order (and concatenated into ProcessResult::output), then its `effect`
// runs (e.g. writes the file the real tool would have written), then its result is returned.
// When the script is exhausted every further Run gets `fallback` (exit 0, no output).
//
// A scripted run may also wait for the caller's CancelToken: with `block_until_cancelled`, Run
// returns cancelled=true (exit 137) once the token is cancelled; without a token it returns at
// once as if cancelled.
//
// Thread-safety: Run, Script, specs() and runs() may be called from any thread (one mutex).
// Ownership: owns copies of the specs and the script.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "builder/process_runner.h"

namespace kiln {

struct FakeRun {
  int exit_code = 0;
  bool timed_out = false;
  bool cancelled = false;
  /// Not ok: nothing "ran" (start_status is returned with exit_code -1 and no output).
  Status start_status;
  /// Output chunks, streamed one by one to on_output.
  std::vector<std::string> chunks;
  /// Runs after the chunks, before Run returns (on the calling thread).
  std::function<void(const ProcessSpec&)> effect;
  /// Wait for the CancelToken (see the header comment).
  bool block_until_cancelled = false;
};

class FakeProcessRunner : public ProcessRunner {
 public:
  /// Appends runs to the script; they answer the next Run calls in order.
  void Script(FakeRun run) {
    std::lock_guard<std::mutex> l(mu_);
    script_.push_back(std::move(run));
  }
  /// The answer once the script is exhausted.
  void SetFallback(FakeRun run) {
    std::lock_guard<std::mutex> l(mu_);
    fallback_ = std::move(run);
  }

  ProcessResult Run(const ProcessSpec& spec, const std::function<void(std::string_view)>& on_output,
                    const CancelToken* cancel) override {
    FakeRun run;
    {
      std::lock_guard<std::mutex> l(mu_);
      specs_.push_back(spec);
      if (!script_.empty()) {
        run = std::move(script_.front());
        script_.pop_front();
      } else {
        run = fallback_;
      }
    }
    ProcessResult r;
    if (!run.start_status.ok()) {
      r.start_status = run.start_status;
      return r;
    }
    if (cancel && cancel->cancelled()) {
      r.start_status = Status::Cancelled("cancelled before start");
      return r;
    }
    for (const std::string& c : run.chunks) {
      if (on_output) on_output(c);
      r.output += c;
    }
    if (run.effect) run.effect(spec);
    if (run.block_until_cancelled) {
      while (cancel && !cancel->cancelled())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      run.cancelled = true;
      run.exit_code = 137;
    }
    r.exit_code = run.exit_code;
    r.timed_out = run.timed_out;
    r.cancelled = run.cancelled;
    return r;
  }

  /// Every spec Run was given, in call order (copies).
  std::vector<ProcessSpec> specs() const {
    std::lock_guard<std::mutex> l(mu_);
    return specs_;
  }
  size_t runs() const {
    std::lock_guard<std::mutex> l(mu_);
    return specs_.size();
  }
  /// A thread that cancels `token` once the first Run has started (join it).
  std::thread CancelWhenRunning(CancelToken* token) {
    return std::thread([this, token] {
      while (runs() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      token->Cancel();
    });
  }

 private:
  mutable std::mutex mu_;
  std::deque<FakeRun> script_;
  FakeRun fallback_;
  std::vector<ProcessSpec> specs_;
};

}  // namespace kiln
