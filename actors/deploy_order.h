// DeployOrder: decides, for one domain, when a deploy request runs. Pure; no I/O, no CAF.
//
// Rules (docs/tools.md, "Deploy ordering"):
//   - one deploy runs at a time per domain; a request for the build that is already running
//     or queued joins it;
//   - a request for a NEWER build (larger build order) than the running deploy's cancels the
//     running deploy and is queued (replacing any queued older one); it starts as soon as the
//     cancelled deploy has returned;
//   - a request for an OLDER build is refused while a newer build's deploy is running or
//     queued, and also when a newer build's deploy started after the request arrived (two
//     racing requests never let the older build overwrite the newer one);
//   - an explicit rollback (a request for an older build made after the newer build's deploy
//     has finished) is allowed.
// Thread-safety: none; owned by the domain actor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

class DeployOrder {
 public:
  enum class Action { kStart, kJoin, kQueue, kRefuse };
  struct Decision {
    Action action = Action::kRefuse;
    std::string deploy_id;                  // kJoin: the deploy joined; else the new one
    std::string reason;                     // kRefuse: why
    std::optional<std::string> cancel;      // deploy to cancel (superseded running one)
    std::optional<std::string> superseded;  // queued deploy dropped without running
  };

  /// Call when a request arrives (before any asynchronous lookup); pass the value to Admit.
  uint64_t Arrive() { return ++clock_; }

  /// Decides what happens to a request that arrived at `arrival` for `build_id`, whose build
  /// order is `build_order` (larger = newer build). `new_deploy_id` names it if it is started
  /// or queued.
  Decision Admit(uint64_t arrival, const std::string& build_id, int64_t build_order,
                 const std::string& new_deploy_id);

  /// The running deploy `deploy_id` returned. Returns the queued deploy that starts now.
  std::optional<std::string> Finished(const std::string& deploy_id);

  std::optional<std::string> running() const;
  std::optional<std::string> queued() const;

 private:
  struct Entry {
    std::string deploy_id, build_id;
    int64_t build_order = 0;
    uint64_t started_at = 0;  // clock_ value when it started (0: not started)
  };
  uint64_t clock_ = 0;
  std::optional<Entry> running_, queued_, last_started_;
};

}  // namespace kiln
