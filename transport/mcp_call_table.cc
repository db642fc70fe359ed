#include "transport/mcp_call_table.h"

#include <utility>

namespace kiln {

namespace {

bool NoWait(const ToolCall& call) {
  if (!call.arguments.is_object()) return false;
  auto it = call.arguments.find("wait");
  return it != call.arguments.end() && it->is_boolean() && !it->get<bool>();
}

}  // namespace

bool CallWaitsForWork(const ToolCall& call) {
  if (call.tool == "apply") return true;
  if (call.tool == "build_candidate" || call.tool == "deploy_candidate") return !NoWait(call);
  return false;
}

std::chrono::seconds CallTimeout(const ToolCall& call, const CallTimeouts& timeouts) {
  if (!CallWaitsForWork(call)) return timeouts.quick;
  if (call.tool == "build_candidate") return timeouts.build;
  return timeouts.deploy;  // deploy_candidate, apply
}

ToolResult CallTimeoutResult(const ToolCall& call, std::chrono::seconds timeout) {
  std::string what = call.tool == "build_candidate" ? "the build may still be running: check "
                                                      "candidate_status before calling again"
                     : CallWaitsForWork(call)       ? "the deploy may still be running: check "
                                                      "candidate_status before calling again"
                                                    : "retry the call";
  nlohmann::json j = {{"error", "kiln did not answer " + call.tool + " within " +
                                    std::to_string(timeout.count()) + " s; " + what},
                      {"error_kind", "timeout"}};
  return {std::move(j), true};
}

bool McpCallTable::Add(uint64_t handle, Entry entry) {
  return calls_.emplace(handle, std::move(entry)).second;
}

std::optional<std::string> McpCallTable::Started(uint64_t handle, const std::string& build_id) {
  auto it = calls_.find(handle);
  if (it == calls_.end()) return std::nullopt;
  Entry& e = it->second;
  e.build_id = build_id;
  if (e.cancel_pending) {
    e.cancel_pending = false;
    return build_id;
  }
  if (e.disconnected && e.cancel_on_disconnect) {
    e.cancel_on_disconnect = false;
    if (!OthersWaitFor(handle, build_id)) return build_id;
  }
  return std::nullopt;
}

std::optional<std::string> McpCallTable::Disconnect(uint64_t handle, bool cancel) {
  auto it = calls_.find(handle);
  if (it == calls_.end() || it->second.disconnected) return std::nullopt;
  Entry& e = it->second;
  e.disconnected = true;
  if (!cancel) return std::nullopt;
  if (e.build_id.empty()) {
    e.cancel_on_disconnect = true;  // Started decides
    return std::nullopt;
  }
  if (OthersWaitFor(handle, e.build_id)) return std::nullopt;
  return e.build_id;
}

bool McpCallTable::OthersWaitFor(uint64_t handle, const std::string& build_id) const {
  for (const auto& [h, e] : calls_)
    if (h != handle && !e.disconnected && e.build_id == build_id) return true;
  return false;
}

std::optional<std::string> McpCallTable::Cancel(uint64_t handle) {
  auto it = calls_.find(handle);
  if (it == calls_.end()) return std::nullopt;
  if (it->second.build_id.empty()) {
    it->second.cancel_pending = true;
    return std::nullopt;
  }
  return it->second.build_id;
}

const McpCallTable::Entry* McpCallTable::Find(uint64_t handle) const {
  auto it = calls_.find(handle);
  return it == calls_.end() ? nullptr : &it->second;
}

std::optional<McpCallTable::Entry> McpCallTable::Finish(uint64_t handle) {
  auto it = calls_.find(handle);
  if (it == calls_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  calls_.erase(it);
  return e;
}

std::vector<McpCallTable::Entry> McpCallTable::TakeAll() {
  std::vector<Entry> out;
  out.reserve(calls_.size());
  for (auto& [h, e] : calls_) out.push_back(std::move(e));
  calls_.clear();
  return out;
}

size_t McpCallTable::size(const std::string& domain) const {
  size_t n = 0;
  for (const auto& [h, e] : calls_) n += e.domain == domain;
  return n;
}

}  // namespace kiln
