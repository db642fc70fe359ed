#include "pool/worker_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <list>
#include <map>
#include <queue>
#include <random>
#include <unordered_map>

#include "actors/fair_queue.h"
#include "pool/placement.h"
#include "pool/pool_queue.h"

namespace kiln {

const char* SimStrategyName(SimStrategy s) {
  switch (s) {
    case SimStrategy::kAffinity:
      return "affinity (rendezvous + spill)";
    case SimStrategy::kRandom:
      return "random free worker";
    case SimStrategy::kContextHash:
      return "context-path hash";
  }
  return "?";
}

double JainIndex(const std::vector<double>& x) {
  if (x.empty()) return 1;
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 == 0 ? 1 : s * s / (static_cast<double>(x.size()) * s2);
}

namespace {

// Draws from std::mt19937_64 (specified by the standard) with our own transforms, so a seed
// gives the same run with any standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double Uniform() { return (static_cast<double>(gen_() >> 11) + 0.5) / 9007199254740992.0; }
  double Exponential(double mean) { return -std::log(Uniform()) * mean; }
  double LogNormal(double mean, double sigma) {
    double n = std::sqrt(-2 * std::log(Uniform())) * std::cos(2 * M_PI * Uniform());
    return std::exp(std::log(mean) - sigma * sigma / 2 + sigma * n);
  }
  size_t Index(size_t n) { return static_cast<size_t>(Uniform() * static_cast<double>(n)) % n; }

 private:
  std::mt19937_64 gen_;
};

// The candidates a worker holds warm, most recent first.
class WarmSet {
 public:
  explicit WarmSet(size_t cap) : cap_(cap) {}
  bool Has(size_t c) const { return pos_.count(c) > 0; }
  /// Marks `c` most recent; returns the candidate evicted to make room, or -1.
  long Touch(size_t c) {
    auto it = pos_.find(c);
    if (it != pos_.end()) order_.erase(it->second);
    order_.push_front(c);
    pos_[c] = order_.begin();
    if (order_.size() <= cap_) return -1;
    long evicted = static_cast<long>(order_.back());
    pos_.erase(order_.back());
    order_.pop_back();
    return evicted;
  }

 private:
  size_t cap_;
  std::list<size_t> order_;
  std::unordered_map<size_t, std::list<size_t>::iterator> pos_;
};

struct Build {
  size_t candidate = 0;
  double submit = 0, start = -1, end = -1;
  std::string worker;
  bool warm = false;
  int generation = 0;  // bumped when the build is retried (its old finish event is stale)
};

enum class Ev { kSubmit, kFinish, kChurn };
struct Event {
  double t;
  uint64_t seq;
  Ev type;
  size_t index;  // candidate (kSubmit) or build (kFinish)
  int generation;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Sim {
 public:
  explicit Sim(const SimConfig& cfg)
      : cfg_(cfg),
        rng_(cfg.seed),
        pool_(Options(cfg), BuildTimes(cfg.warm_mean_s, cfg.cold_mean_s)) {
    for (size_t i = 0; i < cfg.workers; ++i) AddWorker("w" + std::to_string(i));
    const double expected_build = 0.9 * cfg.warm_mean_s + 0.1 * cfg.cold_mean_s;
    const double rate =
        cfg.utilization * static_cast<double>(cfg.workers * cfg.slots) / expected_build;
    double weights = 0;
    for (size_t c = 0; c < cfg.candidates; ++c) weights += Hot(c) ? 4 : 1;
    const double ramp = static_cast<double>(cfg.candidates) * cfg.cold_mean_s /
                        (0.5 * static_cast<double>(cfg.workers * cfg.slots));
    for (size_t c = 0; c < cfg.candidates; ++c) {
      double r = (Hot(c) ? 4 : 1) * rate / weights;
      think_.push_back(std::max(1.0, 1 / r - expected_build));
      Push(rng_.Uniform() * ramp + rng_.Exponential(think_[c]), Ev::kSubmit, c);
    }
  }

  static PoolQueue::Options Options(const SimConfig& cfg) {
    PoolQueue::Options o;
    o.placement.min_idle_s = cfg.min_idle_s;
    return o;
  }

  SimResult Run() {
    while (!events_.empty()) {
      Event e = events_.top();
      events_.pop();
      now_ = e.t;
      if (e.type == Ev::kSubmit) {
        Submit(e.index);
      } else if (e.type == Ev::kFinish) {
        if (e.generation == builds_[e.index].generation) Finish(e.index);
      } else {
        Churn();
      }
      Dispatch();
    }
    return Result();
  }

 private:
  bool Hot(size_t c) const { return Domain(c) % 5 == 0; }
  size_t Domain(size_t c) const { return c % cfg_.domains; }
  std::string DomainName(size_t c) const { return "d" + std::to_string(Domain(c)); }
  std::string CandName(size_t c) const { return DomainName(c) + "/c" + std::to_string(c); }

  void Push(double t, Ev type, size_t index, int generation = 0) {
    events_.push(Event{t, seq_++, type, index, generation});
  }

  void AddWorker(const std::string& id) {
    warm_.emplace(id, WarmSet(cfg_.warm_per_worker));
    busy_[id] = 0;
    worker_list_.push_back(id);
    pool_.placement().AddWorker(id, cfg_.slots, now_);
  }

  void Submit(size_t c) {
    if (submitted_ == cfg_.builds) return;
    if (submitted_ == cfg_.builds / 2 && cfg_.churn && !churned_) Push(now_, Ev::kChurn, 0);
    ++submitted_;
    size_t id = builds_.size();
    builds_.push_back(Build{c, now_, -1, -1, "", false, 0});
    if (cfg_.strategy == SimStrategy::kAffinity) {
      pool_.Submit(std::to_string(id), DomainName(c), CandName(c));
    } else {
      fair_.Push(DomainName(c), std::to_string(id));
    }
  }

  void StartBuild(size_t id, const std::string& worker) {
    Build& b = builds_[id];
    b.worker = worker;
    b.start = now_;
    b.warm = warm_.at(worker).Has(b.candidate);
    double d = b.warm ? rng_.LogNormal(cfg_.warm_mean_s, cfg_.sigma)
                      : rng_.LogNormal(cfg_.cold_mean_s, cfg_.sigma);
    b.end = now_ + d;
    if (busy_[worker] >= cfg_.slots) ++overcommitted_;
    ++busy_[worker];
    Push(b.end, Ev::kFinish, id, b.generation);
  }

  void Finish(size_t id) {
    Build& b = builds_[id];
    long evicted = warm_.at(b.worker).Touch(b.candidate);
    --busy_[b.worker];
    if (cfg_.strategy == SimStrategy::kAffinity) {  // the worker advertises what it holds warm
      pool_.placement().SetWarm(b.worker, CandName(b.candidate), true);
      if (evicted >= 0) pool_.placement().SetWarm(b.worker, CandName(evicted), false);
      pool_.Finished(std::to_string(id), now_, b.warm, b.end - b.start);
    } else {
      fair_.Finished(DomainName(b.candidate));
    }
    done_.push_back(id);
    Push(now_ + rng_.Exponential(think_[b.candidate]), Ev::kSubmit, b.candidate);
  }

  void Dispatch() {
    if (cfg_.strategy == SimStrategy::kAffinity) {
      for (const auto& s : pool_.Dispatch(now_)) {
        if (s.how == Placement::Kind::kSpill && std::stoul(s.id) >= cfg_.warmup) ++spilled_;
        StartBuild(std::stoul(s.id), s.worker);
      }
      max_parked_ = std::max(max_parked_, pool_.parked());
      return;
    }
    if (cfg_.strategy == SimStrategy::kContextHash) {
      while (auto next = fair_.Pop()) {  // straight to the pinned worker's own queue
        size_t id = std::stoul(next->second);
        const auto& list = worker_list_;
        local_[list[RendezvousHash("", DomainName(builds_[id].candidate)) % list.size()]].push_back(
            id);
      }
      size_t parked = 0;
      for (auto& [w, q] : local_) {
        while (!q.empty() && busy_[w] < cfg_.slots) {
          StartBuild(q.front(), w);
          q.pop_front();
        }
        parked += q.size();
      }
      max_parked_ = std::max(max_parked_, parked);
      return;
    }
    std::vector<std::string> free;
    for (const auto& w : worker_list_) {
      for (size_t i = busy_[w]; i < cfg_.slots; ++i) free.push_back(w);
    }
    while (!free.empty()) {
      auto next = fair_.Pop();
      if (!next) break;
      size_t k = rng_.Index(free.size());
      StartBuild(std::stoul(next->second), free[k]);
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  // One worker leaves (its running builds are retried once elsewhere), a new one joins.
  void Churn() {
    churned_ = true;
    std::vector<std::string> before = Owners();
    const std::string gone = worker_list_.front();
    std::vector<size_t> lost;
    for (size_t id = 0; id < builds_.size(); ++id) {
      Build& b = builds_[id];
      if (b.worker == gone && b.start >= 0 && b.end > now_) lost.push_back(id);
    }
    if (cfg_.strategy == SimStrategy::kAffinity) {
      pool_.WorkerLost(gone);
    } else {
      for (size_t id : lost) fair_.Finished(DomainName(builds_[id].candidate));
      for (size_t id : local_[gone]) fair_.Finished(DomainName(builds_[id].candidate));
      for (size_t id : local_[gone])
        fair_.Push(DomainName(builds_[id].candidate), std::to_string(id), true);
      local_.erase(gone);
    }
    for (size_t id : lost) {
      Build& b = builds_[id];
      ++b.generation;
      b.start = b.end = -1;
      b.worker.clear();
      ++retried_;
      if (cfg_.strategy != SimStrategy::kAffinity) {
        fair_.Push(DomainName(b.candidate), std::to_string(id), true);
      }
    }
    worker_list_.erase(worker_list_.begin());
    busy_.erase(gone);
    AddWorker("w" + std::to_string(cfg_.workers));
    std::vector<std::string> after = Owners();
    size_t moved = 0;
    for (size_t c = 0; c < before.size(); ++c) moved += before[c] != after[c] ? 1 : 0;
    churn_moved_ = before.empty() ? -1 : static_cast<double>(moved) / before.size();
  }

  // The worker each candidate is pinned to (empty for random placement).
  std::vector<std::string> Owners() const {
    std::vector<std::string> out;
    if (cfg_.strategy == SimStrategy::kRandom) return out;
    for (size_t c = 0; c < cfg_.candidates; ++c) {
      if (cfg_.strategy == SimStrategy::kAffinity) {
        out.push_back(*pool_.placement().Preferred(CandName(c)));
      } else {
        out.push_back(worker_list_[RendezvousHash("", DomainName(c)) % worker_list_.size()]);
      }
    }
    return out;
  }

  SimResult Result() const {
    SimResult r;
    r.submitted = submitted_;
    r.finished = done_.size();
    r.spilled = spilled_;
    r.retried = retried_;
    r.max_parked = max_parked_;
    r.overcommitted = overcommitted_;
    r.churn_moved = churn_moved_;
    std::vector<double> waits;
    std::vector<double> dom_wait(cfg_.domains), dom_build(cfg_.domains);
    double build_sum = 0, last_submit = 0, busy = 0;
    const double first = builds_.size() > cfg_.warmup ? builds_[cfg_.warmup].submit : 0;
    for (const auto& b : builds_) last_submit = std::max(last_submit, b.submit);
    for (size_t id : done_) {
      const Build& b = builds_[id];
      // Busy time inside the measured window [first, last_submit], of every build.
      busy += std::max(0.0, std::min(b.end, last_submit) - std::max(b.start, first));
      if (id < cfg_.warmup) continue;
      ++r.measured;
      r.warm += b.warm ? 1 : 0;
      waits.push_back(b.start - b.submit);
      build_sum += b.end - b.start;
      dom_wait[Domain(b.candidate)] += b.start - b.submit;
      dom_build[Domain(b.candidate)] += b.end - b.start;
    }
    if (waits.empty()) return r;
    std::sort(waits.begin(), waits.end());
    auto pct = [&](double p) {
      return waits[std::min(waits.size() - 1, static_cast<size_t>(p * waits.size()))];
    };
    r.wait_p50_s = pct(0.50);
    r.wait_p99_s = pct(0.99);
    double wsum = 0;
    for (double w : waits) wsum += w;
    r.wait_mean_s = wsum / waits.size();
    r.hit_rate = static_cast<double>(r.warm) / r.measured;
    r.build_mean_s = build_sum / r.measured;
    r.span_s = now_;
    r.utilization =
        last_submit > first ? busy / ((last_submit - first) * cfg_.workers * cfg_.slots) : 0;
    std::vector<double> stretch;
    for (size_t d = 0; d < cfg_.domains; ++d) {
      if (dom_build[d] > 0) stretch.push_back((dom_wait[d] + dom_build[d]) / dom_build[d]);
    }
    r.jain = JainIndex(stretch);
    return r;
  }

  const SimConfig cfg_;
  Rng rng_;
  PoolQueue pool_;                                   // kAffinity
  FairQueue fair_;                                   // kRandom, kContextHash
  std::map<std::string, std::deque<size_t>> local_;  // kContextHash: per-worker queues
  std::map<std::string, WarmSet> warm_;
  std::map<std::string, size_t> busy_;
  std::vector<std::string> worker_list_;
  std::vector<double> think_;
  std::vector<Build> builds_;
  std::vector<size_t> done_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  size_t submitted_ = 0, spilled_ = 0, retried_ = 0, max_parked_ = 0, overcommitted_ = 0;
  bool churned_ = false;
  double churn_moved_ = -1;
};

}  // namespace

SimResult RunSim(const SimConfig& cfg) { return Sim(cfg).Run(); }

}  // namespace kiln
