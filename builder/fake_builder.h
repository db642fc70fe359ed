// FakeBuilder: a Builder for tests. Each build takes `build_delay` (cancellable), fails with a
// compile error when the source has a file named BROKEN, and records what ran. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "common/sha256.h"

namespace kiln {

class FakeBuilder : public Builder {
 public:
  std::chrono::milliseconds build_delay{50};
  std::atomic<bool> push_fails{false};
  std::atomic<int> builds{0};
  std::atomic<int> pushes{0};
  std::atomic<int> concurrent{0};
  std::atomic<int> max_concurrent{0};
  std::atomic<int> concurrent_pushes{0};
  std::atomic<int> max_concurrent_pushes{0};
  std::mutex mu;
  std::vector<std::string> built_candidates;  // in start order
  std::string extra_output;  // printed after the compile step (set before building)
  std::string error_suffix;  // appended to a compile failure's message
  // Issue 20: runs inside UploadBlobs (set before building); `events` records, in order,
  // "blobs <candidate>" when a blob stage ended and "manifest <candidate>" when a Push ran.
  std::function<void(const std::string& candidate)> blob_hook;
  std::function<void(const std::string& candidate)> push_hook;  // runs inside Push (issue 18)
  std::vector<std::string> events;

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override {
    {
      std::lock_guard<std::mutex> l(mu);
      built_candidates.push_back(job.candidate);
    }
    builds++;
    int c = ++concurrent;
    int m = max_concurrent.load();
    while (c > m && !max_concurrent.compare_exchange_weak(m, c)) {
    }
    BuildResult r;
    auto end = std::chrono::steady_clock::now() + build_delay;
    while (std::chrono::steady_clock::now() < end) {
      if (cancel && cancel->cancelled()) {
        --concurrent;
        r.status = Status::Cancelled("build cancelled");
        return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    --concurrent;
    if (out) out("step 1/1: compiling\n");
    if (out && !extra_output.empty()) out(extra_output);
    if (std::filesystem::exists(job.source_dir + "/BROKEN")) {
      if (out) out("./main.go:3:2: undefined: foo\n");
      r.status = Status::FailedPrecondition("build failed (exit 1)" + error_suffix);
      r.compile_failed = true;
      r.diagnostics.push_back({"main.go", 3, 2, "error", "undefined: foo"});
      return r;
    }
    r.status = Status::Ok();
    r.image_id = Sha256Hex(job.key);
    return r;
  }

  PushResult UploadBlobs(const BuildJob& job, const BuildResult&, const OutputFn&,
                         const CancelToken*) override {
    if (blob_hook) blob_hook(job.candidate);
    std::lock_guard<std::mutex> l(mu);
    events.push_back("blobs " + job.candidate);
    return PushResult{};
  }

  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override {
    if (push_hook) push_hook(job.candidate);
    {
      std::lock_guard<std::mutex> l(mu);
      events.push_back("manifest " + job.candidate);
    }
    pushes++;
    int c = ++concurrent_pushes;
    int m = max_concurrent_pushes.load();
    while (c > m && !max_concurrent_pushes.compare_exchange_weak(m, c)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    --concurrent_pushes;
    PushResult r;
    if (push_fails) {
      r.status = Status::Unavailable("registry 127.0.0.1:1 is unreachable: connection refused");
      return r;
    }
    r.digest = "sha256:" + built.image_id;
    r.ref = "127.0.0.1:5000/" + job.repository + "@" + r.digest;
    r.status = Status::Ok();
    return r;
  }

  Status Check() override { return Status::Ok(); }
};

}  // namespace kiln
