#include "transport/mcp_tasks.h"

#include <cstdio>
#include <ctime>

#include "common/json_text.h"
#include "transport/mcp_handler.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr const char* kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr const char* kTaskIdPrefix = "kt1.";
constexpr size_t kMaxTaskIdBytes = 2048;

int SextetOf(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

std::string StatusOf(const json& build) {
  auto it = build.find("status");
  return it != build.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string StringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) |
                 uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (rest == 2) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = SextetOf(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  // Leftover bits must be zero (a canonical encoding only).
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::string EncodeTaskId(const TaskRef& ref) {
  json j = {{"d", ref.domain},
            {"k", ref.kind},
            {"c", ref.candidate},
            {"b", ref.build_id},
            {"t", ref.created_ms}};
  if (!ref.deploy_id.empty()) j["p"] = ref.deploy_id;
  return kTaskIdPrefix + Base64UrlEncode(DumpJson(j));
}

std::optional<TaskRef> DecodeTaskId(std::string_view task_id, const std::string& domain) {
  const std::string_view prefix = kTaskIdPrefix;
  if (task_id.size() > kMaxTaskIdBytes || task_id.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  std::optional<std::string> text = Base64UrlDecode(task_id.substr(prefix.size()));
  if (!text) return std::nullopt;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  TaskRef ref;
  ref.domain = StringField(j, "d");
  ref.kind = StringField(j, "k");
  ref.candidate = StringField(j, "c");
  ref.build_id = StringField(j, "b");
  ref.deploy_id = StringField(j, "p");
  auto t = j.find("t");
  if (t == j.end() || !t->is_number_integer()) return std::nullopt;
  ref.created_ms = t->get<int64_t>();
  if (ref.domain.empty() || ref.domain != domain) return std::nullopt;
  if (ref.kind == "build" ? ref.build_id.empty() : ref.kind != "deploy" || ref.deploy_id.empty()) {
    return std::nullopt;
  }
  return ref;
}

std::string IsoTime(int64_t epoch_ms) {
  if (epoch_ms < 0) epoch_ms = 0;
  std::time_t secs = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(epoch_ms % 1000));
  return buf;
}

bool BuildIsActive(const json& build) {
  const std::string st = StatusOf(build);
  return st == "queued" || st == "running";
}

std::string TaskStatusForBuild(const json& build) {
  if (BuildIsActive(build)) return "working";
  if (StatusOf(build) == "cancelled" && StringField(build, "error_kind") == "cancelled") {
    return "cancelled";
  }
  return "completed";
}

std::string TaskStatusMessage(const json& build) {
  const std::string st = StatusOf(build);
  if (BuildIsActive(build)) {
    std::string phase = StringField(build, "phase");
    if (phase.empty()) phase = st;
    std::string msg = "phase: " + phase;
    auto pos = build.find("queue_position");
    if (pos != build.end() && pos->is_number_integer() && pos->get<int64_t>() >= 0) {
      msg += " (queue position " + std::to_string(pos->get<int64_t>()) + ")";
    }
    return msg;
  }
  if (st == "succeeded") return "build succeeded";
  std::string msg = "build " + (st.empty() ? std::string("ended") : st);
  const std::string kind = StringField(build, "error_kind");
  if (!kind.empty()) msg += " (" + kind + ")";
  std::string error = StringField(build, "error");
  if (!error.empty()) {
    error = error.substr(0, error.find('\n'));
    if (error.size() > 200) error = error.substr(0, 200) + "...";
    msg += ": " + error;
  }
  return msg;
}

bool DeployIsActive(const json& deploy) { return StatusOf(deploy) == "in_progress"; }

std::string TaskStatusForDeploy(const json& deploy) {
  if (DeployIsActive(deploy)) return "working";
  if (StatusOf(deploy) == "failed" && StringField(deploy, "reason") == "Cancelled")
    return "cancelled";
  return "completed";
}

std::string DeployTaskStatusMessage(const json& deploy) {
  const std::string st = StatusOf(deploy);
  if (DeployIsActive(deploy)) return "phase: deploying";
  if (st == "rolled_out") return "deploy rolled out";
  std::string msg = "deploy " + (st.empty() ? std::string("ended") : st);
  const std::string reason = StringField(deploy, "reason");
  if (!reason.empty()) msg += " (" + reason + ")";
  std::string text = StringField(deploy, "error");
  if (text.empty()) text = StringField(deploy, "message");
  if (!text.empty()) {
    text = text.substr(0, text.find('\n'));
    if (text.size() > 200) text = text.substr(0, 200) + "...";
    msg += ": " + text;
  }
  return msg;
}

json TaskJson(const TaskRef& ref, const ToolResult& build, const TaskTiming& timing) {
  const json& b = build.structured;
  const bool deploy = ref.kind == "deploy";
  const std::string status = deploy ? TaskStatusForDeploy(b) : TaskStatusForBuild(b);
  json task = {{"taskId", EncodeTaskId(ref)},
               {"status", status},
               {"statusMessage", deploy ? DeployTaskStatusMessage(b) : TaskStatusMessage(b)},
               {"createdAt", IsoTime(ref.created_ms)},
               {"lastUpdatedAt", IsoTime(timing.now_ms)},
               {"ttlMs", timing.ttl_ms}};
  if (status == "working") task["pollIntervalMs"] = timing.poll_interval_ms;
  if (status == "completed") {
    json result = ToolResultJson(build);
    result["resultType"] = "complete";
    task["result"] = std::move(result);
  }
  return task;
}

}  // namespace kiln
