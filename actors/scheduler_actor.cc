#include "actors/scheduler_actor.h"

#include <spdlog/spdlog.h>

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "actors/actor_glue.h"
#include "actors/build_metrics.h"
#include "actors/protocol.h"
#include "actors/push_lanes.h"

namespace kiln {
namespace {

struct SchedulerState {
  std::unique_ptr<SchedulerCore> core;
  PushLanes lanes;
  std::unordered_map<BuildId, CandidateActor> owners;  // build id -> its candidate actor
  std::unordered_map<BuildId, caf::typed_response_promise<granted_atom>> lane_waiters;
  // Who holds a place in a push lane (reserved, waiting or holding), by the actor that asked:
  // a candidate actor that goes down gives its places back, so no lane stays blocked.
  std::map<caf::actor_addr, std::set<std::pair<std::string, BuildId>>> lane_users;
  std::map<std::string, std::string> build_domain;
  std::shared_ptr<BuildMetrics> metrics;
  std::map<std::string, int> weights;
  std::map<std::string, size_t> slots;  // per-domain caps
  size_t max_parallel = 0;
  uint64_t cache_hits = 0;
  uint64_t deduplicated = 0;
  static inline const char* name = "kiln.scheduler";
};
using Self = SchedulerActor::stateful_pointer<SchedulerState>;

void UpdateGauges(Self self) {
  auto& s = self->state;
  if (!s.metrics) return;
  for (const auto& [d, w] : s.weights) {
    s.metrics->SetQueueDepth(d, s.core->QueueDepth(d));
    auto cap = s.slots.find(d);
    s.metrics->SetDomainRunning(d, s.core->Running(d),
                                cap == s.slots.end() ? s.max_parallel : cap->second);
  }
  s.metrics->SetRunning(s.core->running());
}

// Gives `id`'s place in `registry`'s lane back and grants the lane to the next in line.
void ReleaseLane(Self self, const std::string& registry, const BuildId& id) {
  auto& s = self->state;
  s.lane_waiters.erase(id);
  auto next = s.lanes.Release(registry, id);
  if (!next) return;
  auto it = s.lane_waiters.find(*next);
  if (it == s.lane_waiters.end()) return;
  it->second.deliver(granted_atom::value);
  s.lane_waiters.erase(it);
}

// Remembers that the current sender holds a place for `id` (monitored once per actor).
void NoteLaneUser(Self self, const std::string& registry, const BuildId& id) {
  auto sender = self->current_sender();
  if (!sender) return;
  auto addr = caf::actor_cast<caf::actor_addr>(sender);
  auto& places = self->state.lane_users[addr];
  if (places.empty()) self->monitor(caf::actor_cast<caf::actor>(sender));
  places.emplace(registry, id);
}

void ForgetLaneUser(Self self, const std::string& registry, const BuildId& id) {
  auto& users = self->state.lane_users;
  for (auto it = users.begin(); it != users.end(); ++it) {
    if (it->second.erase({registry, id}) == 0) continue;
    if (it->second.empty()) {
      self->demonitor(it->first);
      users.erase(it);
    }
    return;
  }
}

void Dispatch(Self self) {
  auto& s = self->state;
  for (const auto& order : s.core->Dispatch()) {
    auto it = s.owners.find(order.owner);
    if (it == s.owners.end()) {
      spdlog::error("scheduler: no actor for build {}", order.owner);
      continue;
    }
    self->send(it->second, start_atom::value, order.owner, order.key);
  }
  UpdateGauges(self);
}

SchedulerActor::behavior_type SchedulerBehavior(
    Self self, size_t max_parallel, std::map<std::string, int> weights,
    std::shared_ptr<BuildMetrics> metrics, std::vector<std::pair<std::string, OutcomePtr>> known,
    std::map<std::string, size_t> slots) {
  InstallHandlers(self, "scheduler");
  SchedulerState& init = self->state;
  init.core = std::make_unique<SchedulerCore>(max_parallel);
  for (const auto& [dom, w] : weights) init.core->SetWeight(dom, w);
  for (auto& [k, o] : known) init.core->Remember(k, o);
  for (const auto& [dom, n] : slots) init.core->SetDomainCap(dom, n);
  init.weights = std::move(weights);
  init.slots = std::move(slots);
  init.max_parallel = max_parallel;
  init.metrics = std::move(metrics);
  UpdateGauges(self);
  self->set_down_handler([=](caf::down_msg& m) {
    auto it = self->state.lane_users.find(m.source);
    if (it == self->state.lane_users.end()) return;
    auto places = std::move(it->second);
    self->state.lane_users.erase(it);
    for (const auto& [registry, id] : places) {
      spdlog::warn("scheduler: build {} gave up its push-lane place (its candidate stopped)", id);
      ReleaseLane(self, registry, id);
    }
  });
  return {
      [=](submit_atom, const JobRequest& req, const CandidateActor& cand) -> SubmitReply {
        auto& s = self->state;
        auto d = s.core->Submit(req);
        SubmitReply rep;
        rep.kind = d.kind;
        rep.cached = d.cached;
        rep.owner = d.owner;
        if (d.kind == SchedulerCore::SubmitKind::kCacheHit) {
          s.cache_hits++;
          return rep;
        }
        if (d.kind == SchedulerCore::SubmitKind::kDuplicateId) return rep;
        if (d.kind == SchedulerCore::SubmitKind::kJoined) s.deduplicated++;
        s.owners[req.id] = cand;
        Dispatch(self);
        auto pos = s.core->Position(req.id);
        rep.position = pos ? static_cast<int64_t>(*pos) : -1;
        return rep;
      },
      [=](finished_atom, const std::string& key, const BuildId& id, const OutcomePtr& outcome) {
        auto& s = self->state;
        auto d = s.core->Finish(key, id, outcome);
        spdlog::debug("scheduler: finished {} key {} -> notify {} requeued {} running {}", id,
                      key.substr(0, 12), d.notify.size(), d.requeued, s.core->running());
        for (const auto& n : d.notify) {
          auto it = s.owners.find(n);
          if (it == s.owners.end()) continue;
          if (n != id) self->send(it->second, waited_atom::value, n, outcome);
          s.owners.erase(it);
        }
        Dispatch(self);
      },
      [=](cancel_atom, const BuildId& id) {
        auto& s = self->state;
        auto d = s.core->Cancel(id);
        if (d.kind == SchedulerCore::CancelKind::kRemovedQueued ||
            d.kind == SchedulerCore::CancelKind::kRemovedWaiter ||
            d.kind == SchedulerCore::CancelKind::kTransferred)
          s.owners.erase(id);
        UpdateGauges(self);
      },
      [=](push_atom, const std::string& registry, const BuildId& id) -> caf::result<granted_atom> {
        auto& s = self->state;
        NoteLaneUser(self, registry, id);
        if (s.lanes.Acquire(registry, id)) return granted_atom::value;
        auto rp = self->make_response_promise<granted_atom>();
        s.lane_waiters[id] = rp;
        return rp;
      },
      [=](reserve_atom, const std::string& registry, const BuildId& id) -> bool {
        NoteLaneUser(self, registry, id);
        return self->state.lanes.ReserveOrTake(registry, id);
      },
      [=](release_atom, const std::string& registry, const BuildId& id) {
        ForgetLaneUser(self, registry, id);
        ReleaseLane(self, registry, id);
      },
      [=](position_atom, const BuildId& id) -> int64_t {
        auto pos = self->state.core->Position(id);
        return pos ? static_cast<int64_t>(*pos) : -1;
      },
      [=](stats_atom) -> SchedulerStats {
        auto& s = self->state;
        SchedulerStats st;
        st.running = s.core->running();
        st.queued = s.core->queued();
        st.cache_entries = s.core->cache_size();
        st.cache_hits = s.cache_hits;
        st.deduplicated = s.deduplicated;
        for (const auto& [d, w] : s.weights) st.queue_depth[d] = s.core->QueueDepth(d);
        return st;
      },
  };
}

}  // namespace

SchedulerActor SpawnScheduler(caf::actor_system& sys, size_t max_parallel,
                              std::map<std::string, int> weights,
                              std::shared_ptr<BuildMetrics> metrics,
                              std::vector<std::pair<std::string, OutcomePtr>> known,
                              std::map<std::string, size_t> slots) {
  return sys.spawn(SchedulerBehavior, max_parallel, std::move(weights), std::move(metrics),
                   std::move(known), std::move(slots));
}

}  // namespace kiln
