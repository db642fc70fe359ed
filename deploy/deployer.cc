#include "deploy/deployer.h"

namespace kiln {

const char* DeployStateName(DeployState s) {
  switch (s) {
    case DeployState::kInProgress:
      return "in_progress";
    case DeployState::kRolledOut:
      return "rolled_out";
    case DeployState::kFailed:
      return "failed";
  }
  return "failed";
}

// --- Issue 16 ---
nlohmann::json DeployFailureJson(const DeployResult& r) {
  nlohmann::json j = nlohmann::json::object();
  if (r.state != DeployState::kFailed || r.error_kind.empty()) return j;
  j["error"] = r.message;
  j["error_kind"] = r.error_kind;
  j["next_step"] = r.next_step;
  const DeployFailureDetails& d = r.details;
  nlohmann::json det = nlohmann::json::object();
  if (!d.pod.empty()) det["pod"] = d.pod;
  if (!d.container.empty()) det["container"] = d.container;
  if (!d.reason.empty()) det["reason"] = d.reason;
  if (d.exit_code) det["exit_code"] = *d.exit_code;
  if (d.signal) det["signal"] = *d.signal;
  if (d.restarts) det["restarts"] = *d.restarts;
  if (!d.memory_limit.empty()) det["memory_limit"] = d.memory_limit;
  if (!d.log_tail.empty()) det["log_tail"] = d.log_tail;
  if (!d.probe_message.empty()) det["probe_message"] = d.probe_message;
  if (d.unready_ms) det["unready_ms"] = *d.unready_ms;
  j["details"] = std::move(det);
  return j;
}
// --- end Issue 16 ---

}  // namespace kiln
