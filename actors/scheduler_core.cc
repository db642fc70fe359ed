#include "actors/scheduler_core.h"

#include <algorithm>

namespace kiln {

SchedulerCore::SchedulerCore(size_t max_parallel, size_t cache_capacity)
    : max_parallel_(std::max<size_t>(1, max_parallel)), cache_capacity_(cache_capacity) {}

OutcomePtr SchedulerCore::CachedOutcome(const std::string& key) const {
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second.first;
}

void SchedulerCore::Remember(const std::string& key, OutcomePtr outcome) {
  CachePut(key, std::move(outcome));
}

void SchedulerCore::CachePut(const std::string& key, OutcomePtr outcome) {
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    lru_.erase(it->second.second);
    cache_.erase(it);
  }
  lru_.push_front(key);
  cache_[key] = {std::move(outcome), lru_.begin()};
  while (cache_.size() > cache_capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
}

SchedulerCore::SubmitDecision SchedulerCore::Submit(const JobRequest& req) {
  if (build_key_.count(req.id)) return {SubmitKind::kDuplicateId, nullptr, {}};
  auto c = cache_.find(req.key);
  if (c != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, c->second.second);
    return {SubmitKind::kCacheHit, c->second.first, {}};
  }
  auto j = jobs_.find(req.key);
  if (j != jobs_.end()) {
    j->second.waiters.emplace_back(req.id, req.candidate);
    build_key_[req.id] = req.key;
    return {SubmitKind::kJoined, nullptr, j->second.owner};
  }
  Job job{req.key, req.domain, req.id, req.candidate, {}, false};
  jobs_.emplace(req.key, std::move(job));
  build_key_[req.id] = req.key;
  queue_.Push(req.domain, req.key);
  return {SubmitKind::kQueued, nullptr, req.id};
}

std::vector<StartOrder> SchedulerCore::Dispatch() {
  std::vector<StartOrder> out;
  while (running_ < max_parallel_) {
    auto next = queue_.Pop();
    if (!next) break;
    auto& job = jobs_.at(next->second);
    job.running = true;
    ++running_;
    out.push_back({job.key, job.owner, job.domain, job.owner_candidate});
  }
  return out;
}

SchedulerCore::FinishDecision SchedulerCore::Finish(const std::string& key, const BuildId& owner,
                                                    const OutcomePtr& outcome) {
  FinishDecision d;
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second.owner != owner || !it->second.running) return d;
  Job& job = it->second;
  job.running = false;
  --running_;
  queue_.Finished(job.domain);
  bool cancelled = outcome && outcome->status == BuildStatus::kCancelled;
  if (cancelled && !job.waiters.empty()) {
    d.notify.push_back(owner);
    build_key_.erase(owner);
    job.owner = job.waiters.front().first;
    job.owner_candidate = job.waiters.front().second;
    job.waiters.erase(job.waiters.begin());
    queue_.Push(job.domain, key, /*front=*/true);
    d.requeued = true;
    d.new_owner = job.owner;
    return d;
  }
  d.notify.push_back(owner);
  build_key_.erase(owner);
  for (auto& w : job.waiters) {
    d.notify.push_back(w.first);
    build_key_.erase(w.first);
  }
  if (outcome && outcome->status == BuildStatus::kSucceeded) CachePut(key, outcome);
  jobs_.erase(it);
  return d;
}

SchedulerCore::CancelDecision SchedulerCore::Cancel(const BuildId& id) {
  CancelDecision d;
  auto k = build_key_.find(id);
  if (k == build_key_.end()) return d;
  auto it = jobs_.find(k->second);
  if (it == jobs_.end()) return d;
  Job& job = it->second;
  if (job.owner != id) {
    auto w = std::find_if(job.waiters.begin(), job.waiters.end(),
                          [&](const auto& p) { return p.first == id; });
    if (w != job.waiters.end()) job.waiters.erase(w);
    build_key_.erase(k);
    d.kind = CancelKind::kRemovedWaiter;
    return d;
  }
  if (job.running) {
    d.kind = CancelKind::kKillRunning;  // Finish() will complete it
    return d;
  }
  build_key_.erase(k);
  if (!job.waiters.empty()) {
    job.owner = job.waiters.front().first;
    job.owner_candidate = job.waiters.front().second;
    job.waiters.erase(job.waiters.begin());
    d.kind = CancelKind::kTransferred;
    d.new_owner = job.owner;
    return d;
  }
  queue_.Remove(job.key);
  jobs_.erase(it);
  d.kind = CancelKind::kRemovedQueued;
  return d;
}

std::optional<size_t> SchedulerCore::Position(const BuildId& id) const {
  auto k = build_key_.find(id);
  if (k == build_key_.end()) return std::nullopt;
  return queue_.Position(k->second);
}

}  // namespace kiln
