#include "transport/fake_tool_backend.h"

namespace kiln {
namespace {

using nlohmann::json;

json BuildResult(const std::string& candidate, uint64_t handle, const std::string& status) {
  json r = {{"build_id", "b" + std::to_string(handle)},
            {"candidate", candidate},
            {"commit", "0123456789abcdef0123456789abcdef01234567"},
            {"status", status},
            {"image", nullptr},
            {"diagnostics", json::array()},
            {"log_tail", ""},
            {"cache_hit", false},
            {"timings", {{"queued_ms", 0}, {"build_ms", 0}, {"push_ms", 0}, {"total_ms", 0}}}};
  if (status == "succeeded") {
    r["image"] = {{"ref", "127.0.0.1:5000/loop/app@sha256:" + std::string(64, 'a')},
                  {"digest", "sha256:" + std::string(64, 'a')}};
  }
  return r;
}

ToolResult Immediate(const ToolCall& call, uint64_t handle) {
  const json& a = call.arguments;
  if (call.tool == "candidate_status") {
    return {{{"candidate", a.value("candidate", "")},
             {"state", "idle"},
             {"latest_build", nullptr},
             {"deployed_build", nullptr},
             {"queue_position", nullptr}},
            false};
  }
  if (call.tool == "list_candidates") {
    return {{{"candidates", json::array({{{"candidate", "main"}, {"state", "idle"}}})}}, false};
  }
  if (call.tool == "build_log") {
    return {{{"build_id", a.value("build_id", "")},
             {"text", "step 1/1: done\n"},
             {"next_offset", 15},
             {"complete", true}},
            false};
  }
  if (call.tool == "cancel_build") {
    return {{{"build_id", a.value("build_id", "")}, {"status", "cancelled"}}, false};
  }
  if (call.tool == "build_candidate") {  // wait=false
    return {BuildResult(a.value("candidate", ""), handle, "queued"), false};
  }
  return {{{"error", "unknown tool " + call.tool}}, true};
}

}  // namespace

FakeToolBackend::FakeToolBackend(Options options) : options_(options), worker_([this] { Run(); }) {}

FakeToolBackend::~FakeToolBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

uint64_t FakeToolBackend::Call(ToolCall call, ProgressFn progress, DoneFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t h = next_handle_++;
  calls_.push_back(call);
  handles_.push_back(h);
  Pending p;
  p.call = std::move(call);
  p.progress = std::move(progress);
  p.done = std::move(done);
  p.start = p.next_event = std::chrono::steady_clock::now();
  pending_.emplace(h, std::move(p));
  cv_.notify_all();
  return h;
}

void FakeToolBackend::Cancel(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(handle);
  auto it = pending_.find(handle);
  if (it == pending_.end()) return;
  it->second.cancelled = true;
  it->second.next_event = std::chrono::steady_clock::now();
  cv_.notify_all();
}

json FakeToolBackend::Readiness() {
  return {{"builder", {{"ok", ready_.load()}, {"detail", "fake"}}},
          {"registry", {{"ok", true}, {"detail", "fake"}}}};
}

std::string FakeToolBackend::MetricsText() {
  std::lock_guard<std::mutex> lock(mu_);
  return "# TYPE kiln_fake_calls_total counter\nkiln_fake_calls_total " +
         std::to_string(calls_.size()) + "\n";
}

std::vector<ToolCall> FakeToolBackend::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<uint64_t> FakeToolBackend::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

std::set<uint64_t> FakeToolBackend::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

uint64_t FakeToolBackend::handle_of(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  return n < handles_.size() ? handles_[n] : 0;
}

bool FakeToolBackend::Step(Pending& p, const Options& options, uint64_t handle) {
  const json& a = p.call.arguments;
  bool long_build = p.call.tool == "build_candidate" && a.value("wait", true);
  std::string candidate = a.is_object() && a.contains("candidate") && a["candidate"].is_string()
                              ? a["candidate"].get<std::string>()
                              : "";
  if (!long_build) {
    p.done(Immediate(p.call, handle));
    return true;
  }
  auto now = std::chrono::steady_clock::now();
  if (p.cancelled) {
    p.done({BuildResult(candidate, handle, "cancelled"), true});
    return true;
  }
  if (now - p.start >= options.build_duration) {
    if (candidate == "broken") {
      json r = BuildResult(candidate, handle, "failed");
      r["diagnostics"] = json::array({{{"file", "main.go"},
                                       {"line", 3},
                                       {"column", 1},
                                       {"severity", "error"},
                                       {"message", "undefined: x"}}});
      r["error"] = "build failed";
      p.done({r, true});
    } else {
      p.done({BuildResult(candidate, handle, "succeeded"), false});
    }
    return true;
  }
  ++p.steps;
  double total = static_cast<double>(options.build_duration / options.progress_interval) + 1;
  p.progress({static_cast<double>(p.steps), total,
              p.steps == 1 ? "queued" : "building (step " + std::to_string(p.steps) + ")"});
  p.next_event = std::min(p.start + options.build_duration, now + options.progress_interval);
  return false;
}

void FakeToolBackend::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    auto now = std::chrono::steady_clock::now();
    auto next = now + std::chrono::hours(1);
    uint64_t due = 0;
    for (auto& [h, p] : pending_) {
      if (p.next_event <= now) {
        due = h;
        break;
      }
      next = std::min(next, p.next_event);
    }
    if (!due) {
      cv_.wait_until(lock, next);
      continue;
    }
    // Run the callback unlocked on a copy of the state; write the new state back after.
    Pending p = pending_[due];
    lock.unlock();
    bool finished = Step(p, options_, due);
    lock.lock();
    auto it = pending_.find(due);
    if (finished) {
      pending_.erase(due);
      finished_.insert(due);
    } else if (it != pending_.end()) {
      bool cancelled = it->second.cancelled;
      it->second = std::move(p);
      it->second.cancelled = it->second.cancelled || cancelled;
      if (cancelled) it->second.next_event = std::chrono::steady_clock::now();
    }
  }
}

}  // namespace kiln
