// PushLanes: serializes registry pushes, one at a time per registry, FIFO.
// Pure state; not thread-safe: owned by the scheduler actor.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

namespace kiln {

class PushLanes {
 public:
  /// Asks for `registry`'s lane. Returns true when granted now; otherwise `id` waits in line.
  bool Acquire(const std::string& registry, const std::string& id);
  /// Releases the lane held by `id` (or drops `id` from the line). Returns the id granted next.
  std::optional<std::string> Release(const std::string& registry, const std::string& id);
  std::optional<std::string> Holder(const std::string& registry) const;
  size_t Waiting(const std::string& registry) const;

 private:
  struct Lane {
    std::optional<std::string> holder;
    std::deque<std::string> waiting;
  };
  std::map<std::string, Lane> lanes_;
};

}  // namespace kiln
