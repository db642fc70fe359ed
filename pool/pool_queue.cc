#include "pool/pool_queue.h"

namespace kiln {

bool PoolQueue::Submit(const std::string& id, const std::string& domain,
                       const std::string& candidate) {
  if (pending_.count(id) || running_.count(id)) return false;
  pending_[id] = Build{domain, candidate, ""};
  queue_.Push(domain, id);
  return true;
}

void PoolQueue::StartOn(const std::string& id, const Build& b, const std::string& worker,
                        Placement::Kind how, double now, std::vector<Start>* out) {
  Build r = b;
  r.worker = worker;
  placement_.Started(worker, b.candidate, now,
                     how == Placement::Kind::kSpill ? times_.cold() : times_.warm());
  out->push_back(Start{id, b.domain, b.candidate, worker, how});
  running_[id] = r;
  pending_.erase(id);
}

std::vector<PoolQueue::Start> PoolQueue::Dispatch(double now) {
  std::vector<Start> out;
  // 1 + 2: parked builds, on their worker when it has a slot, else spilled when worth it.
  for (auto& [worker, ids] : parked_) {
    size_t ahead = 0;
    for (auto it = ids.begin(); it != ids.end() && placement_.TotalFreeSlots() > 0;) {
      const Build b = pending_.at(*it);
      std::string target;
      Placement::Kind how = Placement::Kind::kPreferred;
      if (placement_.FreeSlots(worker) > 0) {
        target = worker;
      } else {
        auto d = placement_.Place(b.candidate, times_, now, ahead);
        if (d.kind == Placement::Kind::kSpill || d.kind == Placement::Kind::kPreferred) {
          target = d.worker;
          how = d.kind;
        }
      }
      if (target.empty()) {
        ++it;
        ++ahead;
        continue;
      }
      std::string id = *it;
      it = ids.erase(it);
      StartOn(id, b, target, how, now, &out);
    }
  }
  // 3: the fair queue, while a slot is free anywhere.
  while (queue_.size() > 0 && placement_.TotalFreeSlots() > 0) {
    auto next = queue_.Pop();
    if (!next) break;
    const std::string id = next->second;
    const Build b = pending_.at(id);
    auto pref = placement_.Preferred(b.candidate);
    auto d = placement_.Place(b.candidate, times_, now, pref ? parked_[*pref].size() : 0);
    if (d.kind == Placement::Kind::kPreferred || d.kind == Placement::Kind::kSpill) {
      StartOn(id, b, d.worker, d.kind, now, &out);
    } else if (d.kind == Placement::Kind::kWait && parked_[d.worker].size() < opts_.park_limit) {
      parked_[d.worker].push_back(id);
    } else if (auto w = placement_.BestFree(b.candidate)) {
      StartOn(id, b, *w, Placement::Kind::kSpill, now, &out);
    } else {
      queue_.Finished(b.domain);
      queue_.Push(b.domain, id, /*front=*/true);
      break;
    }
  }
  return out;
}

bool PoolQueue::Finished(const std::string& id, double now, bool warm, double seconds) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  placement_.Finished(it->second.worker, it->second.candidate, now);
  queue_.Finished(it->second.domain);
  times_.Record(warm, seconds);
  running_.erase(it);
  return true;
}

std::vector<std::string> PoolQueue::WorkerLost(const std::string& worker) {
  std::vector<std::string> ids;  // running first (they started first), then parked in order
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->second.worker != worker) {
      ++it;
      continue;
    }
    Build b = it->second;
    b.worker.clear();
    pending_[it->first] = b;
    ids.push_back(it->first);
    it = running_.erase(it);
  }
  auto p = parked_.find(worker);
  if (p != parked_.end()) {
    ids.insert(ids.end(), p->second.begin(), p->second.end());
    parked_.erase(p);
  }
  // Back to the front of their domains' queues, in that order; no longer admitted.
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const std::string& domain = pending_.at(*it).domain;
    queue_.Finished(domain);
    queue_.Push(domain, *it, /*front=*/true);
  }
  placement_.RemoveWorker(worker);
  return ids;
}

size_t PoolQueue::parked() const {
  size_t n = 0;
  for (const auto& [w, ids] : parked_) n += ids.size();
  return n;
}

}  // namespace kiln
