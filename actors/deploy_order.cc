#include "actors/deploy_order.h"

namespace kiln {

DeployOrder::Decision DeployOrder::Admit(uint64_t arrival, const std::string& build_id,
                                         int64_t build_order, const std::string& new_deploy_id) {
  Decision d;
  if (running_ && running_->build_id == build_id && !queued_) {
    d.action = Action::kJoin;
    d.deploy_id = running_->deploy_id;
    return d;
  }
  if (queued_ && queued_->build_id == build_id) {
    d.action = Action::kJoin;
    d.deploy_id = queued_->deploy_id;
    return d;
  }
  auto newer = [&](const std::optional<Entry>& e) { return e && e->build_order > build_order; };
  if (newer(queued_) || newer(running_)) {
    const Entry& e = newer(queued_) ? *queued_ : *running_;
    d.reason = "a deploy of newer build " + e.build_id + " (" + e.deploy_id + ") is in progress";
    return d;
  }
  if (newer(last_started_) && last_started_->started_at > arrival) {
    d.reason = "a deploy of newer build " + last_started_->build_id + " (" +
               last_started_->deploy_id + ") started after this request was made";
    return d;
  }
  Entry e{new_deploy_id, build_id, build_order, 0};
  d.deploy_id = new_deploy_id;
  if (running_) {
    // The running deploy is of an older build (or the same build, with a newer one queued
    // meanwhile dropped below): supersede it.
    if (queued_) d.superseded = queued_->deploy_id;
    if (running_->build_id != build_id) d.cancel = running_->deploy_id;
    queued_ = e;
    d.action = Action::kQueue;
    return d;
  }
  e.started_at = ++clock_;
  running_ = e;
  last_started_ = e;
  d.action = Action::kStart;
  return d;
}

std::optional<std::string> DeployOrder::Finished(const std::string& deploy_id) {
  if (!running_ || running_->deploy_id != deploy_id) return std::nullopt;
  running_.reset();
  if (!queued_) return std::nullopt;
  running_ = queued_;
  queued_.reset();
  running_->started_at = ++clock_;
  last_started_ = running_;
  return running_->deploy_id;
}

std::optional<std::string> DeployOrder::running() const {
  return running_ ? std::optional<std::string>(running_->deploy_id) : std::nullopt;
}
std::optional<std::string> DeployOrder::queued() const {
  return queued_ ? std::optional<std::string>(queued_->deploy_id) : std::nullopt;
}

}  // namespace kiln
