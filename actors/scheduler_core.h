// SchedulerCore: the scheduler's decisions as pure state — build slots, fair admission (via
// FairQueue), deduplication of identical build keys, and the finished-key cache.
//
// No I/O, no CAF, no clock. Not thread-safe: owned by the scheduler actor, which turns the
// decisions returned here into messages.
//
// Model: each distinct key in flight is one Job with an owner build (whose candidate workspace
// runs it) and zero or more waiters (other builds with the same key). When the owner is
// cancelled while others still wait, ownership passes to the next waiter. A succeeded key is
// cached; a later submit of it is a cache hit.
//
// Slots: at most `max_parallel` jobs run at once, and at most a domain's cap (SetDomainCap) of
// one domain: a domain at its cap keeps its queued jobs waiting while other domains' jobs are
// still admitted in fair (weighted) order, so one domain's hung builds cannot hold every slot.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/fair_queue.h"
#include "core/build_types.h"

namespace kiln {

struct JobRequest {
  BuildId id;
  std::string domain;
  std::string candidate;
  std::string key;
};

struct StartOrder {
  std::string key;
  BuildId owner;
  std::string domain;
  std::string candidate;
};

class SchedulerCore {
 public:
  explicit SchedulerCore(size_t max_parallel, size_t cache_capacity = 4096);

  void SetWeight(const std::string& domain, int weight) { queue_.SetWeight(domain, weight); }
  /// At most `cap` running jobs of `domain` (0: only the global limit applies).
  void SetDomainCap(const std::string& domain, size_t cap) { queue_.SetCap(domain, cap); }

  enum class SubmitKind { kCacheHit, kJoined, kQueued, kDuplicateId };
  struct SubmitDecision {
    SubmitKind kind;
    OutcomePtr cached;  // for kCacheHit
    BuildId owner;      // for kJoined: the build that runs the key
  };
  /// Admits a build. A finished key answers from the cache; an in-flight key adds a waiter;
  /// otherwise the key is queued. Call Dispatch() afterwards to start work.
  SubmitDecision Submit(const JobRequest& req);

  /// Starts as many queued jobs as free slots allow, in fair order.
  std::vector<StartOrder> Dispatch();

  struct FinishDecision {
    std::vector<BuildId> notify;  // builds to deliver `outcome` to (owner included)
    bool requeued = false;        // owner was cancelled, a waiter took over
    std::optional<BuildId> new_owner;
  };
  /// The owner's execution of `key` ended. If it was cancelled and other builds still wait on
  /// the key, the job is re-queued at the front of its domain with the next waiter as owner and
  /// only the old owner is notified. Otherwise every waiter is notified; successes are cached.
  /// Unknown keys/owners return an empty decision.
  FinishDecision Finish(const std::string& key, const BuildId& owner, const OutcomePtr& outcome);

  enum class CancelKind { kUnknown, kRemovedWaiter, kRemovedQueued, kTransferred, kKillRunning };
  struct CancelDecision {
    CancelKind kind = CancelKind::kUnknown;
    std::optional<BuildId> new_owner;  // kTransferred
  };
  /// Withdraws build `id`. A running owner must be killed by its candidate; its Finish (with a
  /// cancelled outcome) completes the withdrawal.
  CancelDecision Cancel(const BuildId& id);

  /// Queue position of build `id` (0 = next to start), nullopt when it is not queued.
  std::optional<size_t> Position(const BuildId& id) const;

  size_t running() const { return running_; }
  size_t Running(const std::string& domain) const { return queue_.Running(domain); }
  size_t queued() const { return queue_.size(); }
  size_t QueueDepth(const std::string& domain) const { return queue_.Depth(domain); }
  size_t cache_size() const { return cache_.size(); }
  /// Looks up a cached outcome without submitting.
  OutcomePtr CachedOutcome(const std::string& key) const;
  /// Seeds the cache (used when reloading state).
  void Remember(const std::string& key, OutcomePtr outcome);

 private:
  struct Job {
    std::string key;
    std::string domain;
    BuildId owner;
    std::string owner_candidate;
    std::vector<std::pair<BuildId, std::string>> waiters;  // (id, candidate), excluding owner
    bool running = false;
  };
  void CachePut(const std::string& key, OutcomePtr outcome);

  size_t max_parallel_;
  size_t cache_capacity_;
  size_t running_ = 0;
  FairQueue queue_;
  std::map<std::string, Job> jobs_;                     // key -> job in flight
  std::unordered_map<BuildId, std::string> build_key_;  // build id -> key (in flight)
  std::list<std::string> lru_;                          // most recent first
  std::unordered_map<std::string, std::pair<OutcomePtr, std::list<std::string>::iterator>> cache_;
};

}  // namespace kiln
