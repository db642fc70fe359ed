#include "transport/mcp_handler.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>

#include "common/json_text.h"
#include "transport/mcp_modern.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr const char* kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
constexpr size_t kMaxStringIdBytes = 1024;

const char* kLevelNames[] = {"debug", "info",     "notice", "warning",
                             "error", "critical", "alert",  "emergency"};

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string RandomHex128() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // Fall back to the kernel CSPRNG; abort rather than hand out a guessable id.
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    if (!urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) std::abort();
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

HttpReply JsonReply(int status, const json& body) {
  HttpReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = DumpJson(body);
  return r;
}

HttpReply ErrorReply(int status, int code, const std::string& message) {
  return JsonReply(status, JsonRpcError(nullptr, code, message));
}

HttpReply EmptyReply(int status) {
  HttpReply r;
  r.status = status;
  return r;
}

bool ValidId(const json& id) {
  if (id.is_number_integer()) return true;  // also unsigned
  return id.is_string() && id.get_ref<const std::string&>().size() <= kMaxStringIdBytes;
}

McpAccept ParseAccept(const std::optional<std::string>& header) {
  McpAccept a;
  std::string h = Lower(header.value_or("*/*"));
  if (h.empty()) h = "*/*";
  a.json = h.find("application/json") != std::string::npos ||
           h.find("application/*") != std::string::npos || h.find("*/*") != std::string::npos;
  a.sse = h.find("text/event-stream") != std::string::npos;
  a.sse_wildcard = h.find("*/*") != std::string::npos || h.find("text/*") != std::string::npos;
  return a;
}

bool IsJsonContentType(const std::optional<std::string>& header) {
  if (!header) return false;
  std::string h = Lower(*header);
  size_t semi = h.find(';');
  if (semi != std::string::npos) h.resize(semi);
  while (!h.empty() && h.back() == ' ') h.pop_back();
  while (!h.empty() && h.front() == ' ') h.erase(h.begin());
  return h == "application/json";
}

const std::vector<std::string>& KnownMethods() {
  static const std::vector<std::string> kMethods = {"initialize",
                                                    "ping",
                                                    "tools/list",
                                                    "tools/call",
                                                    "logging/setLevel",
                                                    "notifications/initialized",
                                                    "notifications/cancelled"};
  return kMethods;
}

std::string MetricMethod(const json& message) {
  if (!message.is_object()) return "invalid";
  auto it = message.find("method");
  if (it == message.end() || !it->is_string()) {
    return message.contains("result") || message.contains("error") ? "response" : "invalid";
  }
  const auto& m = it->get_ref<const std::string&>();
  for (const auto& k : KnownMethods()) {
    if (k == m) return m;
  }
  return m.rfind("notifications/", 0) == 0 ? "notifications/other" : "other";
}

}  // namespace

bool IsSupportedMcpVersion(std::string_view version) {
  for (const char* v : kVersions) {
    if (version == v) return true;
  }
  return false;
}

std::optional<McpLogLevel> ParseMcpLogLevel(std::string_view name) {
  for (int i = 0; i < 8; ++i) {
    if (name == kLevelNames[i]) return static_cast<McpLogLevel>(i);
  }
  return std::nullopt;
}

const char* McpLogLevelName(McpLogLevel level) { return kLevelNames[static_cast<int>(level)]; }

json JsonRpcError(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json JsonRpcResult(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json ToolResultJson(const ToolResult& result) {
  json structured = result.structured.is_object() ? result.structured : json::object();
  return {{"content", json::array({{{"type", "text"}, {"text", DumpJson(structured)}}})},
          {"structuredContent", structured},
          {"isError", result.is_error}};
}

std::string SseEvent(const json& message, const std::string& event_id) {
  // dump() escapes control characters, so the data is always a single line.
  return "id: " + event_id + "\nevent: message\ndata: " + DumpJson(message) + "\n\n";
}

int JsonNestingDepth(std::string_view text) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// ---------------------------------------------------------------------------------------------
// McpHandler

McpFront::McpFront(const McpOptions& options)
    : max_json_depth_(options.max_json_depth),
      tool_aliases_(options.tool_aliases),
      catalog_(options.catalog) {
  McpModernDispatch::Options m;
  m.server_version = options.server_version;
  m.instructions = options.instructions;
  m.task_ttl_ms = options.task_ttl_ms;
  m.task_poll_interval_ms = options.task_poll_interval_ms;
  m.wall_clock_ms = options.wall_clock_ms;
  modern_ = std::make_unique<McpModernDispatch>(std::move(m), catalog_, tool_aliases_);
}

McpFront::~McpFront() = default;

void McpFront::ModernCallFinished() const {
  size_t n = modern_inflight_.load();
  while (n > 0 && !modern_inflight_.compare_exchange_weak(n, n - 1)) {
  }
}

McpPreflight McpFront::Preflight(const McpRequest& request) const {
  McpPreflight pre;
  auto answer = [&](HttpReply reply, const std::string& method) {
    McpDecision d;
    d.metric_method = method;
    d.reply = std::move(reply);
    pre.answer = std::move(d);
    return std::move(pre);
  };
  const std::string http_method = "http/" + request.http_method;
  if (request.http_method != "POST" && request.protocol_version &&
      IsModernMcpVersionName(*request.protocol_version)) {
    // 2026-07-28 is POST-only: no GET stream, no session to DELETE.
    HttpReply r =
        ErrorReply(405, rpc::kServerError,
                   "Method Not Allowed: protocol " + request.protocol_version->substr(0, 16) +
                       " uses POST only (no sessions, no GET stream)");
    r.headers.push_back({"Allow", "POST"});
    return answer(std::move(r), http_method);
  }
  if (request.http_method == "GET") {
    // No server-initiated stream: kiln sends notifications only on POST streams.
    HttpReply r = ErrorReply(405, rpc::kServerError,
                             "Method Not Allowed: this server offers no GET event stream");
    r.headers.push_back({"Allow", "POST, DELETE"});
    return answer(std::move(r), http_method);
  }
  if (request.http_method == "DELETE") {
    if (!request.session_id) {
      return answer(
          ErrorReply(400, rpc::kServerError, "Bad Request: MCP-Session-Id header is required"),
          http_method);
    }
    return pre;  // the session table decides
  }
  if (request.http_method != "POST") {
    HttpReply r = ErrorReply(405, rpc::kServerError, "Method Not Allowed");
    r.headers.push_back({"Allow", "POST, DELETE"});
    return answer(std::move(r), http_method);
  }
  pre.accept = ParseAccept(request.accept);
  if (!pre.accept.json && !pre.accept.sse) {
    return answer(ErrorReply(406, rpc::kServerError,
                             "Not Acceptable: Accept must include application/json and "
                             "text/event-stream"),
                  "invalid");
  }
  if (!IsJsonContentType(request.content_type)) {
    return answer(ErrorReply(415, rpc::kServerError,
                             "Unsupported Media Type: Content-Type must be application/json"),
                  "invalid");
  }
  if (JsonNestingDepth(request.body) > max_json_depth_) {
    return answer(ErrorReply(400, rpc::kParseError,
                             "Parse error: JSON nested deeper than " +
                                 std::to_string(max_json_depth_) + " levels"),
                  "invalid");
  }
  pre.body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (pre.body.is_discarded()) {
    return answer(ErrorReply(400, rpc::kParseError, "Parse error: body is not valid JSON"),
                  "invalid");
  }
  if (ClassifyMcpEra(request.protocol_version, pre.body) == McpEra::kModern) {
    McpDecision m = modern_->Handle(request, pre.body, pre.accept.sse || !pre.accept.json,
                                    next_seq_.fetch_add(1));
    modern_inflight_ += m.calls.size();
    pre.answer = std::move(m);
    pre.body = nullptr;
    return pre;
  }
  return pre;  // the session table decides
}

McpHandler::McpHandler(Options options)
    : options_([&] {
        if (!options.clock) options.clock = [] { return std::chrono::steady_clock::now(); };
        if (!options.new_session_id) options.new_session_id = RandomHex128;
        return std::move(options);
      }()),
      front_(options_) {}

McpHandler::~McpHandler() = default;

McpDecision McpHandler::Handle(const McpRequest& request) {
  McpPreflight pre = front_.Preflight(request);
  if (pre.answer) return std::move(*pre.answer);
  return HandleSession(request, std::move(pre));
}

McpDecision McpHandler::HandleSession(const McpRequest& request, McpPreflight pre) {
  McpDecision d = [&] {
    if (pre.answer) return std::move(*pre.answer);
    if (request.http_method == "DELETE") {
      McpDecision del;
      del.metric_method = "http/DELETE";
      auto it = request.session_id ? sessions_.find(*request.session_id) : sessions_.end();
      if (it == sessions_.end() || it->second.domain != request.domain) {
        del.reply = ErrorReply(404, rpc::kSessionNotFound, "Session not found");
        return del;
      }
      inflight_ -= it->second.inflight.size();
      sessions_.erase(it);
      del.reply = EmptyReply(204);
      return del;
    }
    return HandlePost(request, std::move(pre.body), pre.accept);
  }();
  UpdateGauges();
  return d;
}

McpDecision McpHandler::HandlePost(const McpRequest& request, json body, const McpAccept& accept) {
  McpDecision d;
  d.metric_method = body.is_array() ? "batch" : MetricMethod(body);
  if (body.is_object() && body.value("method", json()) == "initialize") {
    return HandleInitialize(request, body);
  }

  // Every other message needs a live session of the caller's domain.
  if (!request.session_id) {
    d.reply = ErrorReply(400, rpc::kServerError,
                         "Bad Request: MCP-Session-Id header is required (initialize first)");
    return d;
  }
  if (request.protocol_version && !IsSupportedMcpVersion(*request.protocol_version)) {
    d.reply = ErrorReply(400, rpc::kServerError,
                         "Bad Request: unsupported MCP-Protocol-Version; supported: "
                         "2025-11-25, 2025-06-18, 2025-03-26");
    return d;
  }
  auto it = sessions_.find(*request.session_id);
  if (it == sessions_.end() || it->second.domain != request.domain) {
    d.reply = ErrorReply(404, rpc::kSessionNotFound, "Session not found");
    return d;
  }
  Session& session = it->second;
  session.last_used = options_.clock();
  d.session_id = it->first;
  const std::string version = request.protocol_version.value_or(session.protocol_version);

  std::vector<json> messages;
  if (body.is_array()) {
    if (version != "2025-03-26") {
      d.reply = JsonReply(400, JsonRpcError(nullptr, rpc::kInvalidRequest,
                                            "Invalid Request: JSON-RPC batches are not "
                                            "supported in protocol " +
                                                version));
      return d;
    }
    if (body.empty()) {
      d.reply = JsonReply(
          400, JsonRpcError(nullptr, rpc::kInvalidRequest, "Invalid Request: empty batch"));
      return d;
    }
    d.batch = true;
    messages = body.get<std::vector<json>>();
  } else {
    messages.push_back(std::move(body));
  }

  bool any_bad = false;
  for (const json& m : messages) {
    Outcome o = HandleMessage(d.session_id, session, m, d);
    any_bad = any_bad || o.bad_request;
    if (o.call) {
      d.calls.push_back(std::move(*o.call));
    } else if (o.response) {
      d.ready_responses.push_back(std::move(*o.response));
    }
  }

  bool has_progress_token = false;
  for (const auto& c : d.calls) has_progress_token = has_progress_token || c.progress_token;
  d.sse = !d.calls.empty() &&
          (accept.sse || !accept.json || (has_progress_token && accept.sse_wildcard));

  if (!d.calls.empty()) return d;
  if (d.ready_responses.empty()) {
    d.reply = EmptyReply(202);  // only notifications and responses
    return d;
  }
  if (d.batch) {
    d.reply = JsonReply(200, json(d.ready_responses));
  } else {
    d.reply = JsonReply(any_bad ? 400 : 200, d.ready_responses.front());
  }
  d.ready_responses.clear();
  return d;
}

McpDecision McpHandler::HandleInitialize(const McpRequest& request, const json& message) {
  McpDecision d;
  d.metric_method = "initialize";
  if (message.value("jsonrpc", json()) != "2.0") {
    d.reply = ErrorReply(400, rpc::kInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\"");
    return d;
  }
  if (!message.contains("id")) {
    d.reply = EmptyReply(202);  // an "initialize" notification means nothing; ignore it
    return d;
  }
  const json& id = message["id"];
  if (!ValidId(id)) {
    d.reply =
        ErrorReply(400, rpc::kInvalidRequest, "Invalid Request: id must be a string or an integer");
    return d;
  }
  const json params = message.value("params", json());
  if (!params.is_object() || !params.contains("protocolVersion") ||
      !params["protocolVersion"].is_string()) {
    d.reply = JsonReply(200, JsonRpcError(id, rpc::kInvalidParams,
                                          "Invalid params: protocolVersion (string) required"));
    return d;
  }
  std::string asked = params["protocolVersion"].get<std::string>();
  std::string version = IsSupportedMcpVersion(asked) ? asked : kMcpLatestProtocolVersion;

  if (!MakeRoom(request.domain, id, d)) return d;
  std::string session_id;
  do {
    session_id = options_.new_session_id();
  } while (sessions_.count(session_id));
  {
    Session s;
    s.domain = request.domain;
    s.protocol_version = version;
    s.last_used = options_.clock();
    sessions_.emplace(session_id, std::move(s));
  }
  json result = {
      {"protocolVersion", version},
      {"capabilities", {{"tools", {{"listChanged", false}}}, {"logging", json::object()}}},
      {"serverInfo",
       {{"name", "kiln"}, {"title", "kiln image builder"}, {"version", options_.server_version}}},
  };
  if (!options_.instructions.empty()) {
    // Issue 16: the session's own domain in the push command.
    std::string text = options_.instructions;
    for (size_t at = text.find("<domain>"); at != std::string::npos;
         at = text.find("<domain>", at + request.domain.size()))
      text.replace(at, 8, request.domain);
    result["instructions"] = text;
  }
  d.session_id = session_id;
  d.reply = JsonReply(200, JsonRpcResult(id, std::move(result)));
  d.reply.headers.push_back({"MCP-Session-Id", session_id});
  return d;
}

bool McpHandler::MakeRoom(const std::string& domain, const json& id, McpDecision& d) {
  auto refuse = [&](const char* by, const std::string& why) {
    d.refused_by = by;
    d.reply = JsonReply(503, JsonRpcError(id, rpc::kServerError, why));
    d.reply.headers.push_back({"Retry-After", "10"});
    return false;
  };
  // The least recently used session without a call in flight of `owner`.
  auto lru_idle_of = [&](const std::string& owner) {
    auto lru = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const Session& s = it->second;
      if (s.domain != owner || !s.inflight.empty()) continue;
      if (lru == sessions_.end() || s.last_used < lru->second.last_used) lru = it;
    }
    return lru;
  };
  auto evict = [&](std::map<std::string, Session>::iterator it) {
    sessions_.erase(it);
    ++d.evicted_sessions;
  };
  if (sessions_.size() >= options_.max_sessions) EvictIdle();
  // Per-domain cap: make room from the caller's own sessions only; never from another domain's.
  if (options_.max_sessions_per_domain > 0 &&
      SessionCount(domain) >= options_.max_sessions_per_domain) {
    auto lru = lru_idle_of(domain);
    if (lru == sessions_.end()) {
      return refuse("sessions_per_domain",
                    "too many sessions for this domain (server.max_sessions_per_domain = " +
                        std::to_string(options_.max_sessions_per_domain) +
                        ") and every one has a call in flight; end unused sessions with DELETE "
                        "or wait for a call to finish");
    }
    evict(lru);
  }
  if (sessions_.size() >= options_.max_sessions) {
    // Global cap: a domain holding more sessions than the caller gives up its least recently
    // used idle one (the largest holder first), so a domain with few sessions always gets one.
    std::map<std::string, size_t> held;
    for (const auto& [sid, s] : sessions_) ++held[s.domain];
    const size_t mine = held[domain];
    std::vector<std::pair<size_t, std::string>> larger;
    for (const auto& [owner, n] : held)
      if (n > mine + 1) larger.push_back({n, owner});  // still >= the caller's afterwards
    std::sort(larger.rbegin(), larger.rend());
    for (const auto& [n, owner] : larger) {
      auto lru = lru_idle_of(owner);
      if (lru == sessions_.end()) continue;
      evict(lru);
      break;
    }
  }
  if (sessions_.size() >= options_.max_sessions) {
    return refuse("sessions", "too many sessions (limit " + std::to_string(options_.max_sessions) +
                                  "); end unused sessions with DELETE");
  }
  return true;
}

McpHandler::Outcome McpHandler::HandleMessage(const std::string& session_id, Session& session,
                                              const json& m, McpDecision& decision) {
  Outcome o;
  auto invalid = [&](const json& id, const std::string& why) {
    o.bad_request = true;
    o.response = JsonRpcError(id, rpc::kInvalidRequest, "Invalid Request: " + why);
    return o;
  };
  if (!m.is_object()) return invalid(nullptr, "message must be a JSON object");
  json id = nullptr;
  bool has_id = m.contains("id");
  if (has_id) {
    if (!ValidId(m["id"])) {
      return invalid(nullptr, "id must be a string (<= 1024 bytes) or an integer");
    }
    id = m["id"];
  }
  if (m.value("jsonrpc", json()) != "2.0") return invalid(id, "jsonrpc must be \"2.0\"");
  auto method_it = m.find("method");
  if (method_it == m.end()) {
    if (has_id && (m.contains("result") || m.contains("error"))) return o;  // a response: ignore
    return invalid(id, "method is required");
  }
  if (!method_it->is_string()) return invalid(id, "method must be a string");
  const std::string& method = method_it->get_ref<const std::string&>();
  json params = m.value("params", json());
  if (!params.is_null() && !params.is_object()) {
    if (!has_id) return o;
    o.response = JsonRpcError(id, rpc::kInvalidParams, "Invalid params: params must be an object");
    return o;
  }

  if (!has_id) {  // notification: never answered
    if (method == "notifications/cancelled" && params.is_object()) {
      HandleCancelled(session, params, decision);
    }
    return o;
  }
  if (method == "ping") {
    o.response = JsonRpcResult(id, json::object());
  } else if (method == "tools/list") {
    auto aliases = options_.tool_aliases.find(session.domain);
    static const std::map<std::string, std::string> kNone;
    o.response = JsonRpcResult(
        id, {{"tools", front_.catalog().ListFor(
                           aliases == options_.tool_aliases.end() ? kNone : aliases->second)}});
  } else if (method == "logging/setLevel") {
    std::optional<McpLogLevel> level;
    if (params.is_object() && params.contains("level") && params["level"].is_string()) {
      level = ParseMcpLogLevel(params["level"].get<std::string>());
    }
    if (!level) {
      o.response = JsonRpcError(id, rpc::kInvalidParams,
                                "Invalid params: level must be one of debug, info, notice, "
                                "warning, error, critical, alert, emergency");
    } else {
      session.log_level = level;
      o.response = JsonRpcResult(id, json::object());
    }
  } else if (method == "tools/call") {
    return HandleToolsCall(session_id, session, id, params);
  } else if (method == "initialize") {
    o.response = JsonRpcError(id, rpc::kInvalidRequest,
                              "Invalid Request: initialize must not be part of a batch");
  } else {
    o.response = JsonRpcError(id, rpc::kMethodNotFound, "Method not found: " + method);
  }
  return o;
}

McpHandler::Outcome McpHandler::HandleToolsCall(const std::string& session_id, Session& session,
                                                const json& id, const json& params) {
  Outcome o;
  auto bad_params = [&](const std::string& why) {
    o.response = JsonRpcError(id, rpc::kInvalidParams, why);
    return o;
  };
  if (!params.is_object()) return bad_params("Invalid params: params must be an object");
  auto name_it = params.find("name");
  if (name_it == params.end() || !name_it->is_string()) {
    return bad_params("Invalid params: name (string) is required");
  }
  const std::string& name = name_it->get_ref<const std::string&>();
  static const std::map<std::string, std::string> kNone;
  auto aliases = options_.tool_aliases.find(session.domain);
  std::optional<std::string> canonical = front_.catalog().Resolve(
      name, aliases == options_.tool_aliases.end() ? kNone : aliases->second);
  if (!canonical) return bad_params("Unknown tool: " + name);
  json arguments = json::object();
  if (params.contains("arguments")) {
    arguments = params["arguments"];
    if (arguments.is_null()) arguments = json::object();
    if (!arguments.is_object()) return bad_params("Invalid params: arguments must be an object");
  }
  if (session.inflight.size() >= options_.max_calls_per_session) {
    o.response = JsonRpcError(
        id, rpc::kServerError,
        "too many calls in flight (limit " + std::to_string(options_.max_calls_per_session) + ")");
    return o;
  }
  std::string key = DumpJson(id);
  if (session.inflight.count(key)) {
    o.response = JsonRpcError(id, rpc::kInvalidRequest,
                              "Invalid Request: request id already used by a call in flight");
    return o;
  }
  PendingCall call;
  call.request_id = id;
  call.id_key = key;
  call.seq = next_seq_++;
  call.call.domain = session.domain;
  call.call.tool = *canonical;
  call.call.arguments = std::move(arguments);
  call.tool_name = name;
  if (params.contains("_meta") && params["_meta"].is_object()) {
    const json& meta = params["_meta"];
    if (meta.contains("progressToken") &&
        (meta["progressToken"].is_string() || meta["progressToken"].is_number_integer())) {
      call.progress_token = meta["progressToken"];
    }
  }
  call.log_progress = session.log_level && *session.log_level <= McpLogLevel::kInfo;
  CallSlot slot;
  slot.seq = call.seq;
  session.inflight.emplace(key, slot);
  ++inflight_;
  (void)session_id;
  o.call = std::move(call);
  return o;
}

void McpHandler::HandleCancelled(Session& session, const json& params, McpDecision& decision) {
  if (!params.contains("requestId") || !ValidId(params["requestId"])) return;
  auto it = session.inflight.find(DumpJson(params["requestId"]));
  if (it == session.inflight.end() || it->second.cancelled) return;
  it->second.cancelled = true;
  if (it->second.handle) decision.cancel.push_back(*it->second.handle);
}

bool McpHandler::CallStarted(const std::string& session_id, const PendingCall& call,
                             uint64_t handle) {
  auto s = sessions_.find(session_id);
  if (s == sessions_.end()) return false;
  auto it = s->second.inflight.find(call.id_key);
  if (it == s->second.inflight.end() || it->second.seq != call.seq) return false;
  it->second.handle = handle;
  return it->second.cancelled;
}

bool McpHandler::CallFinished(const std::string& session_id, const PendingCall& call) {
  auto s = sessions_.find(session_id);
  if (s == sessions_.end()) return false;
  auto it = s->second.inflight.find(call.id_key);
  if (it == s->second.inflight.end() || it->second.seq != call.seq) return false;
  bool cancelled = it->second.cancelled;
  s->second.inflight.erase(it);
  s->second.last_used = options_.clock();
  --inflight_;
  UpdateGauges();
  return cancelled;
}

size_t McpHandler::EvictIdle() {
  auto now = options_.clock();
  size_t dropped = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.inflight.empty() && now - it->second.last_used > options_.session_idle_timeout) {
      it = sessions_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  UpdateGauges();
  return dropped;
}

size_t McpHandler::SessionCount(const std::string& domain) const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.domain == domain ? 1 : 0;
  return n;
}

void McpHandler::UpdateGauges() {
  session_gauge_.store(sessions_.size());
  inflight_gauge_.store(inflight_);
}

std::optional<McpLogLevel> McpHandler::SessionLogLevel(const std::string& session_id) const {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.log_level;
}

// ---------------------------------------------------------------------------------------------
// ProgressTracker

ProgressTracker::ProgressTracker(std::optional<json> token, bool log_progress, std::string tool)
    : token_(std::move(token)), log_progress_(log_progress), tool_(std::move(tool)) {}

std::vector<json> ProgressTracker::OnProgress(const ToolProgress& p) {
  std::vector<json> out;
  if (finished_ || (last_ && !(p.progress > *last_))) return out;
  last_ = p.progress;
  if (token_) {
    json params = {{"progressToken", *token_}, {"progress", p.progress}};
    if (p.total) params["total"] = *p.total;
    if (!p.message.empty()) params["message"] = p.message;
    out.push_back({{"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", params}});
  }
  if (log_progress_ && !p.message.empty()) {
    out.push_back(
        {{"jsonrpc", "2.0"},
         {"method", "notifications/message"},
         {"params", {{"level", "info"}, {"logger", "kiln"}, {"data", tool_ + ": " + p.message}}}});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// McpResponseStream

McpResponseStream::McpResponseStream(const McpDecision& decision, std::string stream_id)
    : sse_(decision.sse),
      batch_(decision.batch),
      stream_id_(std::move(stream_id)),
      calls_(decision.calls),
      modern_(decision.modern),
      result_meta_(decision.result_meta),
      task_timing_(decision.task_timing),
      done_(decision.calls.size(), false),
      ready_(decision.ready_responses),
      remaining_(decision.calls.size()) {
  for (const auto& c : decision.calls) {
    request_ids_.push_back(c.request_id);
    trackers_.emplace_back(c.progress_token, c.log_progress, c.tool_name);
  }
}

std::string McpResponseStream::Event(const json& message) {
  return SseEvent(message, stream_id_ + "-" + std::to_string(next_event_++));
}

std::string McpResponseStream::Start() {
  if (!sse_) return "";
  std::string out;
  for (const auto& r : ready_) out += Event(r);
  return out;
}

std::string McpResponseStream::OnProgress(size_t index, const ToolProgress& p) {
  if (!sse_ || index >= trackers_.size() || done_[index]) return "";
  std::string out;
  for (const auto& n : trackers_[index].OnProgress(p)) out += Event(n);
  return out;
}

std::string McpResponseStream::OnDone(size_t index, const ToolResult& result, bool cancelled) {
  if (index >= done_.size() || done_[index]) return "";
  done_[index] = true;
  trackers_[index].Finish();
  --remaining_;
  json response = Render(index, result);
  if (sse_) return cancelled ? "" : Event(response);
  ready_.push_back(std::move(response));
  return "";
}

json McpResponseStream::Render(size_t index, const ToolResult& result) const {
  const json& id = request_ids_[index];
  if (!modern_) return JsonRpcResult(id, ToolResultJson(result));
  const PendingCall& call = calls_[index];
  auto complete = [&](json r, const char* type = "complete") {
    r["resultType"] = type;
    r["_meta"] = result_meta_;
    return JsonRpcResult(id, std::move(r));
  };
  // A backend "not found" (the build aged out of the history, or never existed) has no status.
  const bool found = result.structured.is_object() && result.structured.contains("status");
  switch (call.kind) {
    case McpCallKind::kTool:
      return complete(ToolResultJson(result));
    case McpCallKind::kTaskCreate: {
      const bool deploy = call.call.tool == "deploy_candidate";
      const char* id_field = deploy ? "deploy_id" : "build_id";
      if (!found ||
          !(deploy ? DeployIsActive(result.structured) : BuildIsActive(result.structured)) ||
          !result.structured.value(id_field, json()).is_string()) {
        return complete(ToolResultJson(result));  // a quick, final answer stays a plain result
      }
      TaskRef ref;
      ref.domain = call.call.domain;
      ref.kind = deploy ? "deploy" : "build";
      if (deploy) ref.deploy_id = result.structured["deploy_id"].get<std::string>();
      ref.build_id = result.structured.value("build_id", json("")).is_string()
                         ? result.structured.value("build_id", std::string())
                         : std::string();
      ref.candidate = result.structured.value("candidate", json("")).is_string()
                          ? result.structured.value("candidate", std::string())
                          : std::string();
      ref.created_ms = task_timing_.now_ms;
      json task = TaskJson(ref, result, task_timing_);
      task.erase("result");
      return complete(std::move(task), "task");
    }
    case McpCallKind::kTaskGet:
      if (!found || !call.task) {
        return JsonRpcError(
            id, rpc::kInvalidParams,
            call.task && call.task->kind == "deploy"
                ? "Task not found: kiln no longer knows this deploy (it keeps the "
                  "recent ones); candidate_status shows the deployed build"
                : "Task not found: its build is no longer in the candidate's history "
                  "(or never existed); call build_candidate again");
      }
      return complete(TaskJson(*call.task, result, task_timing_));
    case McpCallKind::kTaskCancel:
      if (!found) {
        return JsonRpcError(id, rpc::kInvalidParams,
                            "Task not found: its build is no longer in the candidate's history");
      }
      return complete(json::object());
  }
  return complete(ToolResultJson(result));
}

std::string McpResponseStream::JsonBody() const {
  if (batch_) return DumpJson(json(ready_));
  return ready_.empty() ? "" : DumpJson(ready_.front());
}

}  // namespace kiln
