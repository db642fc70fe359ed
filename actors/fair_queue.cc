#include "actors/fair_queue.h"

#include <algorithm>
#include <limits>

namespace kiln {

void FairQueue::SetWeight(const std::string& domain, int weight) {
  domains_[domain].weight = std::max(1, weight);
}

void FairQueue::SetCap(const std::string& domain, size_t cap) { domains_[domain].cap = cap; }

void FairQueue::Push(const std::string& domain, const std::string& key, bool front) {
  auto& st = domains_[domain];
  auto& q = queues_[domain];
  if (q.empty() && st.running == 0) {
    // A domain (re)joining starts at the system's virtual time: no banked credit, no debt.
    st.vtime = std::max(st.vtime, system_vtime_);
  }
  if (front)
    q.push_front(key);
  else
    q.push_back(key);
  key_domain_[key] = domain;
  ++size_;
}

bool FairQueue::Remove(const std::string& key) {
  auto it = key_domain_.find(key);
  if (it == key_domain_.end()) return false;
  auto& q = queues_[it->second];
  auto pos = std::find(q.begin(), q.end(), key);
  if (pos != q.end()) {
    q.erase(pos);
    --size_;
  }
  key_domain_.erase(it);
  return true;
}

std::optional<std::string> FairQueue::PickDomain(bool respect_caps) const {
  std::optional<std::string> best;
  double best_ratio = 0, best_vtime = 0;
  for (const auto& [d, q] : queues_) {
    if (q.empty()) continue;
    auto it = domains_.find(d);
    DomainState st = it == domains_.end() ? DomainState{} : it->second;
    if (respect_caps && st.cap > 0 && st.running >= st.cap) continue;
    double ratio = static_cast<double>(st.running) / st.weight;
    if (!best || ratio < best_ratio || (ratio == best_ratio && st.vtime < best_vtime)) {
      best = d;
      best_ratio = ratio;
      best_vtime = st.vtime;
    }
  }
  return best;
}

std::optional<std::pair<std::string, std::string>> FairQueue::Pop() { return PopImpl(true); }

std::optional<std::pair<std::string, std::string>> FairQueue::PopImpl(bool respect_caps) {
  auto d = PickDomain(respect_caps);
  if (!d) return std::nullopt;
  auto& q = queues_[*d];
  std::string key = q.front();
  q.pop_front();
  key_domain_.erase(key);
  --size_;
  auto& st = domains_[*d];
  st.running++;
  system_vtime_ = std::max(system_vtime_, st.vtime);
  st.vtime += 1.0 / st.weight;
  return std::make_pair(*d, key);
}

void FairQueue::Finished(const std::string& domain) {
  auto& st = domains_[domain];
  if (st.running > 0) st.running--;
}

std::optional<size_t> FairQueue::Position(const std::string& key) const {
  if (!key_domain_.count(key)) return std::nullopt;
  FairQueue copy = *this;
  for (size_t pos = 0; copy.size_ > 0; ++pos) {
    auto next = copy.PopImpl(true);
    if (!next) next = copy.PopImpl(false);  // only capped domains left
    if (!next) break;
    if (next->second == key) return pos;
  }
  return std::nullopt;
}

size_t FairQueue::Depth(const std::string& domain) const {
  auto it = queues_.find(domain);
  return it == queues_.end() ? 0 : it->second.size();
}

size_t FairQueue::Running(const std::string& domain) const {
  auto it = domains_.find(domain);
  return it == domains_.end() ? 0 : it->second.running;
}

}  // namespace kiln
