#include "pool/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace kiln {

void BuildTimes::Record(bool warm, double seconds) {
  if (seconds < 0) return;
  double& mean = warm ? warm_ : cold_;
  mean = 0.8 * mean + 0.2 * seconds;
}

uint64_t RendezvousHash(const std::string& worker, const std::string& candidate) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix(worker);
  h ^= 0xff;  // separator: ("ab","c") and ("a","bc") differ
  h *= 1099511628211ull;
  mix(candidate);
  // splitmix64 finalizer: FNV's low bits are weak, the score uses all 64.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

// Weighted rendezvous: -slots / ln(u) with u uniform in (0,1) from the hash. The highest
// score wins; a worker's share of candidates is proportional to its slots.
double Placement::Score(const std::string& worker, size_t slots,
                        const std::string& candidate) const {
  double u = (static_cast<double>(RendezvousHash(worker, candidate) >> 11) + 0.5) /
             static_cast<double>(1ull << 53);
  return -static_cast<double>(slots) / std::log(u);
}

void Placement::AddWorker(const std::string& id, size_t slots, double now) {
  auto [it, inserted] = workers_.try_emplace(id);
  it->second.slots = std::max<size_t>(1, slots);
  rank_cache_.clear();
  if (inserted) {
    it->second.free_since = now;
  } else if (!it->second.ready) {
    SetReady(id, true, now);
  }
}

void Placement::RemoveWorker(const std::string& id) {
  workers_.erase(id);
  rank_cache_.clear();
}

void Placement::SetReady(const std::string& id, bool ready, double now) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.ready == ready) return;
  it->second.ready = ready;
  rank_cache_.clear();
  if (ready) it->second.free_since = now;
}

std::vector<std::string> Placement::Ranking(const std::string& candidate) const {
  // Workers holding the candidate warm first, each group in rendezvous order.
  std::vector<std::tuple<bool, double, const std::string*>> scored;
  for (const auto& [id, w] : workers_) {
    if (w.ready)
      scored.emplace_back(w.warm.count(candidate) > 0, Score(id, w.slots, candidate), &id);
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a);
    return std::get<1>(a) != std::get<1>(b) ? std::get<1>(a) > std::get<1>(b)
                                            : *std::get<2>(a) < *std::get<2>(b);
  });
  std::vector<std::string> out;
  out.reserve(scored.size());
  for (const auto& s : scored) out.push_back(*std::get<2>(s));
  return out;
}

std::optional<std::string> Placement::Preferred(const std::string& candidate) const {
  const std::vector<std::string>& ranking = CachedRanking(candidate);
  if (ranking.empty()) return std::nullopt;
  return ranking.front();
}

const std::vector<std::string>& Placement::CachedRanking(const std::string& candidate) const {
  auto it = rank_cache_.find(candidate);
  if (it == rank_cache_.end()) it = rank_cache_.emplace(candidate, Ranking(candidate)).first;
  return it->second;
}

double Placement::ExpectedWait(const Worker& w, const BuildTimes& times, double now,
                               size_t ahead) const {
  std::vector<double> ends;
  for (const auto& r : w.running) ends.push_back(std::max(r.second - now, 0.25 * times.warm()));
  std::sort(ends.begin(), ends.end());
  if (ends.empty()) return 0;
  // Slot k of the line frees at the k-th end; each further round takes a warm build.
  size_t rounds = ahead / w.slots, k = ahead % w.slots;
  return (k < ends.size() ? ends[k] : 0) + static_cast<double>(rounds) * times.warm();
}

bool Placement::Free(const Worker& w, double now) const {
  return w.ready && w.running.size() < w.slots && now - w.free_since >= opts_.min_idle_s;
}

Placement::Decision Placement::Place(const std::string& candidate, const BuildTimes& times,
                                     double now, size_t ahead) const {
  Decision d;
  const std::vector<std::string>& ranking = CachedRanking(candidate);
  if (ranking.empty()) return d;
  const Worker& pref = workers_.at(ranking.front());
  d.worker = ranking.front();
  if (ahead == 0 && pref.running.size() < pref.slots) {
    d.kind = Kind::kPreferred;
    return d;
  }
  d.kind = Kind::kWait;
  d.expected_wait_s = ExpectedWait(pref, times, now, ahead);
  if (!opts_.allow_spill) return d;
  const double waiting = d.expected_wait_s + times.warm();
  const std::string* cold_target = nullptr;
  for (size_t i = 1; i < ranking.size(); ++i) {
    const Worker& w = workers_.at(ranking[i]);
    if (!Free(w, now)) continue;
    if (w.warm.count(candidate)) {
      if (waiting > times.warm()) {
        d.kind = Kind::kSpill;
        d.worker = ranking[i];
      }
      return d;
    }
    if (!cold_target) cold_target = &ranking[i];
  }
  if (cold_target && waiting > times.cold()) {
    d.kind = Kind::kSpill;
    d.worker = *cold_target;
  }
  return d;
}

std::optional<std::string> Placement::BestFree(const std::string& candidate) const {
  std::optional<std::string> first;
  for (const auto& id : CachedRanking(candidate)) {
    const Worker& w = workers_.at(id);
    if (w.running.size() >= w.slots) continue;
    if (w.warm.count(candidate)) return id;
    if (!first) first = id;
  }
  return first;
}

void Placement::SetWarm(const std::string& worker, const std::string& candidate, bool warm) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  bool changed =
      warm ? it->second.warm.insert(candidate).second : it->second.warm.erase(candidate) > 0;
  if (changed) rank_cache_.erase(candidate);  // warm workers rank first
}

void Placement::SetWarmSet(const std::string& worker, const std::set<std::string>& warm) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  for (const std::string& c : it->second.warm)
    if (!warm.count(c)) rank_cache_.erase(c);
  for (const std::string& c : warm)
    if (!it->second.warm.count(c)) rank_cache_.erase(c);
  it->second.warm = warm;
}

bool Placement::IsWarm(const std::string& worker, const std::string& candidate) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && it->second.warm.count(candidate) > 0;
}

size_t Placement::TotalFreeSlots() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) {
    if (w.ready && w.running.size() < w.slots) n += w.slots - w.running.size();
  }
  return n;
}

bool Placement::Started(const std::string& worker, const std::string& candidate, double now,
                        double expected_s) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return false;
  it->second.running.emplace(candidate, now + expected_s);
  return true;
}

bool Placement::Finished(const std::string& worker, const std::string& candidate, double now) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return false;
  auto r = it->second.running.find(candidate);
  if (r == it->second.running.end()) return false;
  bool was_full = it->second.running.size() >= it->second.slots;
  it->second.running.erase(r);
  if (was_full) it->second.free_since = now;
  return true;
}

size_t Placement::FreeSlots(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.ready) return 0;
  const Worker& w = it->second;
  return w.running.size() < w.slots ? w.slots - w.running.size() : 0;
}

std::vector<std::string> Placement::WorkerIds() const {
  std::vector<std::string> out;
  for (const auto& [id, w] : workers_) out.push_back(id);
  return out;
}

size_t Placement::ready_workers() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w.ready ? 1 : 0;
  return n;
}

}  // namespace kiln
