// FairQueue: weighted fair ordering of queued build keys across domains.
//
// Pure state, no I/O, no CAF. Not thread-safe: owned by the scheduler actor.
//
// Policy: when a slot frees, the next job comes from the domain with the lowest
// running/weight ratio among domains with queued work; ties go to the domain with the lowest
// virtual time (advanced by 1/weight per started job, and lifted to the system virtual time (that
// of the last started job) when a domain becomes active, so an idle domain cannot bank credit),
// then by name. Within a domain, FIFO. A domain with 20 queued builds thus cannot starve another
// domain's single build. A domain with a cap (SetCap) is skipped while it runs `cap` jobs: its
// queued keys wait without holding back other domains.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace kiln {

class FairQueue {
 public:
  /// Weight must be >= 1; unknown domains get weight 1.
  void SetWeight(const std::string& domain, int weight);

  /// At most `cap` running jobs for `domain` (0: no cap of its own).
  void SetCap(const std::string& domain, size_t cap);

  /// Appends `key` to `domain`'s queue (or puts it first with `front`).
  void Push(const std::string& domain, const std::string& key, bool front = false);

  /// Removes a queued key. Returns false when it is not queued.
  bool Remove(const std::string& key);

  /// Picks the next job and counts it as running for its domain. nullopt when empty or when
  /// every domain with queued work is at its cap.
  std::optional<std::pair<std::string, std::string>> Pop();

  /// A job of `domain` that Pop returned has finished (frees its share).
  void Finished(const std::string& domain);

  /// 0-based position at which `key` would start if no job finished; nullopt if not queued.
  /// Keys of a domain at its cap are ranked after the others (as if its caps were lifted once
  /// nothing else can start).
  std::optional<size_t> Position(const std::string& key) const;

  size_t Depth(const std::string& domain) const;
  size_t Running(const std::string& domain) const;
  size_t size() const { return size_; }
  const std::map<std::string, std::deque<std::string>>& queues() const { return queues_; }

 private:
  struct DomainState {
    int weight = 1;
    size_t running = 0;
    double vtime = 0;
    size_t cap = 0;  // 0: none
  };
  std::optional<std::string> PickDomain(bool respect_caps) const;
  std::optional<std::pair<std::string, std::string>> PopImpl(bool respect_caps);

  std::map<std::string, DomainState> domains_;
  std::map<std::string, std::deque<std::string>> queues_;
  std::map<std::string, std::string> key_domain_;
  size_t size_ = 0;
  double system_vtime_ = 0;  // virtual start time of the last job started
};

}  // namespace kiln
