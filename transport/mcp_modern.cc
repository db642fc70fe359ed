#include "transport/mcp_modern.h"

#include <chrono>
#include <utility>

#include "common/json_text.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr const char* kModernVersions[] = {"2026-07-28"};
constexpr const char* kAllVersions[] = {"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"};
constexpr size_t kMaxStringIdBytes = 1024;

HttpReply Json(int status, const json& body) {
  HttpReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = DumpJson(body);
  return r;
}

json ErrorWithData(const json& id, int code, const std::string& message, json data) {
  json e = JsonRpcError(id, code, message);
  e["error"]["data"] = std::move(data);
  return e;
}

bool ValidId(const json& id) {
  if (id.is_number_integer()) return true;
  return id.is_string() && id.get_ref<const std::string&>().size() <= kMaxStringIdBytes;
}

json SupportedVersions() {
  json v = json::array();
  for (const char* s : kAllVersions) v.push_back(s);
  return v;
}

const json* MetaOf(const json& body) {
  if (!body.is_object()) return nullptr;
  auto p = body.find("params");
  if (p == body.end() || !p->is_object()) return nullptr;
  auto m = p->find("_meta");
  if (m == p->end() || !m->is_object()) return nullptr;
  return &*m;
}

bool IsStringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string();
}

}  // namespace

bool IsModernMcpVersionName(std::string_view version) {
  // Revision names are dates (YYYY-MM-DD): string order is date order.
  return version.size() == 10 && version >= std::string_view(kMcpModernProtocolVersion);
}

bool IsSupportedModernVersion(std::string_view version) {
  for (const char* v : kModernVersions) {
    if (version == v) return true;
  }
  return false;
}

McpEra ClassifyMcpEra(const std::optional<std::string>& protocol_header, const json& body) {
  if (const json* meta = MetaOf(body)) {
    if (meta->contains(kMetaProtocolVersion)) return McpEra::kModern;
  }
  if (body.is_array()) {
    // A batch never belongs to the modern era; one with a modern element is refused there.
    for (const json& m : body) {
      const json* meta = MetaOf(m);
      if (meta && meta->contains(kMetaProtocolVersion)) return McpEra::kModern;
    }
  }
  if (protocol_header && IsModernMcpVersionName(*protocol_header)) return McpEra::kModern;
  return McpEra::kLegacy;
}

std::optional<std::string> DecodeMcpHeaderValue(std::string_view value) {
  constexpr std::string_view kPrefix = "=?base64?";
  constexpr std::string_view kSuffix = "?=";
  if (value.size() >= kPrefix.size() + kSuffix.size() &&
      value.substr(0, kPrefix.size()) == kPrefix &&
      value.substr(value.size() - kSuffix.size()) == kSuffix) {
    std::string_view b64 =
        value.substr(kPrefix.size(), value.size() - kPrefix.size() - kSuffix.size());
    // Standard Base64 with padding: map to the URL-safe alphabet for the shared decoder.
    std::string s(b64);
    while (!s.empty() && s.back() == '=') s.pop_back();
    for (char& c : s) {
      if (c == '+') {
        c = '-';
      } else if (c == '/') {
        c = '_';
      } else if (c == '-' || c == '_') {
        return std::nullopt;
      }
    }
    return Base64UrlDecode(s);
  }
  return std::string(value);
}

McpModernDispatch::McpModernDispatch(
    Options options, const ToolCatalog& catalog,
    const std::map<std::string, std::map<std::string, std::string>>& aliases)
    : options_([&] {
        if (!options.wall_clock_ms) {
          options.wall_clock_ms = [] {
            return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
          };
        }
        return std::move(options);
      }()),
      catalog_(catalog),
      aliases_(aliases),
      result_meta_({{kMetaServerInfo, {{"name", "kiln"}, {"version", options_.server_version}}}}) {}

json McpModernDispatch::DiscoverResult() const {
  json r = {
      {"supportedVersions", SupportedVersions()},
      {"capabilities",
       {{"tools", {{"listChanged", false}}},
        {"logging", json::object()},
        {"extensions", {{kMcpTasksExtension, json::object()}}}}},
      {"serverInfo",
       {{"name", "kiln"}, {"title", "kiln image builder"}, {"version", options_.server_version}}},
      {"ttlMs", options_.tools_ttl_ms},
      {"cacheScope", "private"}};
  if (!options_.instructions.empty()) r["instructions"] = options_.instructions;
  return r;
}

McpDecision McpModernDispatch::Handle(const McpRequest& request, const json& body, bool accept_sse,
                                      uint64_t seq) const {
  McpDecision d;
  d.modern = true;
  d.metric_method = "invalid";
  d.result_meta = result_meta_;  // built once
  d.task_timing.now_ms = options_.wall_clock_ms();
  d.task_timing.ttl_ms = options_.task_ttl_ms;
  d.task_timing.poll_interval_ms = options_.task_poll_interval_ms;

  auto fail = [&](int status, const json& id, int code, const std::string& message) {
    d.reply = Json(status, JsonRpcError(id, code, message));
    return d;
  };

  // 1. JSON-RPC shape.
  if (!body.is_object()) {
    return fail(400, nullptr, rpc::kInvalidRequest,
                "Invalid Request: protocol 2026-07-28 takes one JSON-RPC request per POST (no "
                "batches)");
  }
  json id = nullptr;
  const bool has_id = body.contains("id");
  if (has_id) {
    if (!ValidId(body["id"])) {
      return fail(400, nullptr, rpc::kInvalidRequest,
                  "Invalid Request: id must be a string (<= 1024 bytes) or an integer");
    }
    id = body["id"];
  }
  if (body.value("jsonrpc", json()) != "2.0") {
    return fail(400, id, rpc::kInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\"");
  }
  if (!IsStringField(body, "method")) {
    return fail(400, id, rpc::kInvalidRequest,
                "Invalid Request: method (string) is required; responses are not accepted here");
  }
  const std::string method = body["method"].get<std::string>();
  d.metric_method = "modern/" + method;
  static const json kNoParams = json::object();
  auto params_it = body.find("params");
  const json& params =
      params_it == body.end() || params_it->is_null() ? kNoParams : *params_it;  // no copy
  if (!params.is_object()) {
    return fail(400, id, rpc::kInvalidParams, "Invalid params: params must be an object");
  }

  // 2. Version: the _meta claim, cross-checked with the header.
  const json* meta = MetaOf(body);
  if (!meta || !meta->contains(kMetaProtocolVersion)) {
    return fail(400, id, rpc::kInvalidParams,
                std::string("Invalid params: MCP-Protocol-Version names a 2026-07-28-era "
                            "revision but params._meta[\"") +
                    kMetaProtocolVersion + "\"] is missing; send it on every request");
  }
  const json& claim = (*meta)[kMetaProtocolVersion];
  if (!claim.is_string()) {
    return fail(
        400, id, rpc::kInvalidParams,
        std::string("Invalid params: _meta[\"") + kMetaProtocolVersion + "\"] must be a string");
  }
  const std::string version = claim.get<std::string>();
  if (has_id && !request.protocol_version) {
    return fail(400, id, rpc::kHeaderMismatch,
                "Header mismatch: the MCP-Protocol-Version header is required (it must equal "
                "_meta protocolVersion " +
                    version.substr(0, 64) + ")");
  }
  if (request.protocol_version && *request.protocol_version != version) {
    return fail(400, id, rpc::kHeaderMismatch,
                "Header mismatch: MCP-Protocol-Version header '" +
                    request.protocol_version->substr(0, 64) +
                    "' differs from _meta protocolVersion '" + version.substr(0, 64) + "'");
  }

  if (!IsSupportedModernVersion(version)) {
    d.reply =
        Json(400, ErrorWithData(id, rpc::kUnsupportedProtocolVersion,
                                "Unsupported protocol version " + version.substr(0, 64) +
                                    "; supported: 2026-07-28 (stateless), and 2025-11-25, "
                                    "2025-06-18, 2025-03-26 with initialize",
                                {{"supported", SupportedVersions()}, {"requested", version}}));
    return d;
  }
  // 3. Envelope.
  auto caps = meta->find(kMetaClientCapabilities);
  if (caps == meta->end() || !caps->is_object()) {
    return fail(400, id, rpc::kInvalidParams,
                std::string("Invalid params: _meta[\"") + kMetaClientCapabilities +
                    "\"] (an object) is required on every request");
  }
  auto info = meta->find(kMetaClientInfo);
  if (info != meta->end() && !info->is_object()) {
    return fail(
        400, id, rpc::kInvalidParams,
        std::string("Invalid params: _meta[\"") + kMetaClientInfo + "\"] must be an object");
  }
  std::optional<McpLogLevel> log_level;
  auto level = meta->find(kMetaLogLevel);
  if (level != meta->end()) {
    if (level->is_string()) log_level = ParseMcpLogLevel(level->get<std::string>());
    if (!log_level) {
      return fail(400, id, rpc::kInvalidParams,
                  std::string("Invalid params: _meta[\"") + kMetaLogLevel +
                      "\"] must be one of debug, info, notice, warning, error, critical, alert, "
                      "emergency");
    }
  }
  bool tasks = false;
  auto ext = caps->find("extensions");
  if (ext != caps->end() && ext->is_object() && ext->contains(kMcpTasksExtension)) tasks = true;

  if (!has_id) {  // a notification: nothing in this revision for kiln to act on
    d.reply.status = 202;
    return d;
  }

  // 4. Standard headers against the body.
  if (!request.mcp_method) {
    return fail(400, id, rpc::kHeaderMismatch,
                "Header mismatch: the Mcp-Method header is required (it must equal the body "
                "method '" +
                    method.substr(0, 64) + "')");
  }
  if (*request.mcp_method != method) {
    return fail(400, id, rpc::kHeaderMismatch,
                "Header mismatch: Mcp-Method header '" + request.mcp_method->substr(0, 64) +
                    "' differs from the body method '" + method.substr(0, 64) + "'");
  }
  const char* name_field = method == "tools/call"                                ? "name"
                           : (method == "tasks/get" || method == "tasks/cancel") ? "taskId"
                                                                                 : nullptr;
  if (name_field && IsStringField(params, name_field)) {
    const std::string body_name = params[name_field].get<std::string>();
    if (!request.mcp_name) {
      return fail(400, id, rpc::kHeaderMismatch,
                  std::string("Header mismatch: the Mcp-Name header is required for ") + method +
                      " (it must equal params." + name_field + ")");
    }
    std::optional<std::string> header_name = DecodeMcpHeaderValue(*request.mcp_name);
    if (!header_name) {
      return fail(400, id, rpc::kHeaderMismatch,
                  "Header mismatch: Mcp-Name uses the =?base64?...?= form with invalid Base64");
    }
    if (*header_name != body_name) {
      return fail(
          400, id, rpc::kHeaderMismatch,
          std::string("Header mismatch: Mcp-Name header differs from params.") + name_field);
    }
  }

  auto result = [&](json r, const char* type = "complete") {
    r["resultType"] = type;
    r["_meta"] = d.result_meta;
    d.reply = Json(200, JsonRpcResult(id, std::move(r)));
    return d;
  };
  static const std::map<std::string, std::string> kNone;
  auto domain_aliases = aliases_.find(request.domain);
  const auto& aliases = domain_aliases == aliases_.end() ? kNone : domain_aliases->second;

  // 5./6. Methods.
  if (method == "server/discover") return result(DiscoverResult());
  if (method == "tools/list") {
    return result({{"tools", catalog_.ListFor(aliases)},
                   {"ttlMs", options_.tools_ttl_ms},
                   {"cacheScope", "private"}});
  }
  PendingCall call;
  call.request_id = id;
  call.id_key = DumpJson(id);
  call.seq = seq;
  call.modern = true;
  call.call.domain = request.domain;
  if (method == "tools/call") {
    if (!IsStringField(params, "name")) {
      return fail(200, id, rpc::kInvalidParams, "Invalid params: name (string) is required");
    }
    const std::string name = params["name"].get<std::string>();
    std::optional<std::string> canonical = catalog_.Resolve(name, aliases);
    if (!canonical) {
      return fail(200, id, rpc::kInvalidParams,
                  "Unknown tool: " + name.substr(0, 64) + " (tools/list names the tools)");
    }
    json arguments = params.value("arguments", json::object());
    if (arguments.is_null()) arguments = json::object();
    if (!arguments.is_object()) {
      return fail(200, id, rpc::kInvalidParams, "Invalid params: arguments must be an object");
    }
    call.tool_name = name;
    call.call.tool = *canonical;
    if (tasks && (*canonical == "build_candidate" || *canonical == "deploy_candidate") &&
        arguments.value("wait", json(true)) != false) {
      call.kind = McpCallKind::kTaskCreate;
      arguments["wait"] = false;
    }
    call.call.arguments = std::move(arguments);
    auto token = meta->find("progressToken");
    if (token != meta->end() && (token->is_string() || token->is_number_integer())) {
      call.progress_token = *token;
    }
    call.log_progress = log_level && *log_level <= McpLogLevel::kInfo;
    d.sse = accept_sse && call.kind == McpCallKind::kTool;
  } else if (method == "tasks/get" || method == "tasks/cancel") {
    if (!IsStringField(params, "taskId")) {
      return fail(200, id, rpc::kInvalidParams, "Invalid params: taskId (string) is required");
    }
    std::optional<TaskRef> ref =
        DecodeTaskId(params["taskId"].get_ref<const std::string&>(), request.domain);
    if (!ref) {
      return fail(200, id, rpc::kInvalidParams,
                  "Task not found: no task with this id in your domain (task ids come from "
                  "build_candidate and deploy_candidate results)");
    }
    call.task = ref;
    call.tool_name = method;
    const bool get = method == "tasks/get";
    call.kind = get ? McpCallKind::kTaskGet : McpCallKind::kTaskCancel;
    if (ref->kind == "deploy") {  // the domain answers both with the deploy's state
      call.call.tool = get ? "deploy_result" : "cancel_deploy";
      call.call.arguments = {{"deploy_id", ref->deploy_id}};
    } else {
      call.call.tool = get ? "build_result" : "cancel_build";
      call.call.arguments = {{"build_id", ref->build_id}};
      if (get) call.call.arguments["candidate"] = ref->candidate;
    }
  } else {
    d.reply = Json(404, JsonRpcError(id, rpc::kMethodNotFound,
                                     "Method not found: " + method.substr(0, 64) +
                                         " (protocol 2026-07-28 on kiln: server/discover, "
                                         "tools/list, tools/call, tasks/get, tasks/cancel)"));
    return d;
  }
  d.calls.push_back(std::move(call));
  return d;
}

}  // namespace kiln
