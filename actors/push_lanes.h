// PushLanes: serializes registry pushes, one at a time per lane, FIFO. A lane is one repository
// of one registry (PushLaneKey): tags only need build order within their repository, so domains
// pushing to different repositories of one registry do not wait for each other's manifests
// (issue 18, 8 concurrent iterations of 2 domains).
// Issue 20: a build takes its place in line when it is built (Reserve), uploads its blobs,
// then asks for the lane (Acquire): the lane goes to the first in line only once that one
// asks, so manifests (tags) still move in build order while blobs upload outside the lane.
// Issue 18: a build that finds the lane free and nobody in line takes it at once
// (ReserveOrTake) and uploads its blobs under it: no separate blob stage when nobody waits.
// Pure state; not thread-safe: owned by the scheduler actor.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace kiln {

/// The lane of pushes to `repository` in the registry named `registry` (a config name): one
/// lane per (registry, repository), distinct for every distinct pair.
std::string PushLaneKey(const std::string& registry, const std::string& repository);

class PushLanes {
 public:
  /// Asks for `registry`'s lane. Returns true when granted now; otherwise `id` waits in line.
  /// `id` (already reserved, or not: then it joins the end of the line) is ready to push.
  bool Acquire(const std::string& registry, const std::string& id);
  /// Takes `id`'s place at the end of `registry`'s line without asking for the lane yet; the
  /// ones behind it wait until it has asked (Acquire) and released, or left (Release).
  void Reserve(const std::string& registry, const std::string& id);
  /// Issue 18: takes `registry`'s lane for `id` at once when nobody holds it and nobody is in
  /// line (returns true: `id` holds it, as after a granted Acquire); otherwise Reserve (false).
  bool ReserveOrTake(const std::string& registry, const std::string& id);
  /// Releases the lane held by `id` (or drops `id` from the line). Returns the id granted next
  /// (the first in line, when it has asked).
  std::optional<std::string> Release(const std::string& registry, const std::string& id);
  std::optional<std::string> Holder(const std::string& registry) const;
  size_t Waiting(const std::string& registry) const;

 private:
  struct Lane {
    std::optional<std::string> holder;
    std::deque<std::string> waiting;
    std::set<std::string> asked;  // ids in `waiting` that called Acquire
  };
  std::optional<std::string> GrantNext(Lane& lane);
  std::map<std::string, Lane> lanes_;
};

}  // namespace kiln
