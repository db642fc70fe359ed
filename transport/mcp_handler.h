// McpHandler: the pure MCP / JSON-RPC 2.0 logic of the Streamable HTTP transport, in two parts.
//
//   - McpFront (stateless, thread-safe): what any HTTP thread decides from one request alone —
//     methods, Accept, Content-Type, the JSON depth and parse, the era (ClassifyMcpEra), and
//     the whole of MCP 2026-07-28 (McpModernDispatch). Its answer (McpPreflight) is either a
//     decision, or the parsed body of a session-era request for the session table.
//   - McpHandler (not thread-safe; one owner): the session revisions' state — the session
//     table (ids, negotiated versions, log levels, per-session in-flight calls and their
//     cancellations) and every decision that reads it. In kiln its owner is the MCP transport
//     actor (actors/mcp_transport_actor.h); tests and the fake server serialize one with
//     LocalMcpSessionHost (transport/mcp_session_host.h). Handle() runs both parts, for tests.
//
// Neither does I/O or calls the ToolBackend: the owner does that and reports back
// (CallStarted, CallFinished).
//
// Protocol decisions (see docs in the implementation for details):
//   - versions 2025-11-25 (latest), 2025-06-18, 2025-03-26; initialize with another version is
//     answered with the latest;
//   - MCP-Protocol-Version header: unsupported -> 400; missing -> the version negotiated by the
//     session (the spec's "other way to identify the version"), which decides whether JSON
//     arrays (batches, allowed only in 2025-03-26) are accepted;
//   - session caps, per domain and global, so that one domain cannot take another's sessions:
//     max_sessions_per_domain (a domain at its cap loses its own least recently used session
//     without a call in flight, else 503) and max_sessions (global: idle sessions past the idle
//     timeout are dropped first; then the least recently used session without a call in flight
//     of the domain holding the most sessions, when that domain holds more than the caller;
//     else 503);
//   - missing MCP-Session-Id on a non-initialize request -> 400; unknown, ended, evicted or
//     another domain's session -> 404;
//   - DELETE ends a session (204); calls still running keep running and finish normally;
//   - GET -> 405 (no server-initiated stream; allowed by the spec);
//   - notifications and responses -> 202; ping -> {}; logging/setLevel stored per session;
//   - tools/call answers as SSE when the client accepts text/event-stream or sent a
//     progressToken; progress becomes notifications/progress (with a token) and, when the
//     session set a log level <= info, notifications/message at level info.
//
// Thread-safety: McpFront is immutable after construction (Preflight is const; its counter of
// 2026-07-28 calls in flight is atomic). McpHandler is not thread-safe except SessionCount()
// and InflightCalls() (atomic gauges, readable from any thread). McpResponseStream and
// ProgressTracker are not thread-safe (one owner at a time).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tool_backend.h"
#include "transport/mcp_tasks.h"
#include "transport/tool_catalog.h"

namespace kiln {

class McpModernDispatch;

inline constexpr const char* kMcpLatestProtocolVersion = "2025-11-25";
inline constexpr const char* kMcpDefaultProtocolVersion = "2025-03-26";

/// True for the protocol versions kiln speaks.
bool IsSupportedMcpVersion(std::string_view version);

enum class McpLogLevel { kDebug, kInfo, kNotice, kWarning, kError, kCritical, kAlert, kEmergency };

/// Parses an MCP (syslog) level name; nullopt when unknown.
std::optional<McpLogLevel> ParseMcpLogLevel(std::string_view name);
const char* McpLogLevelName(McpLogLevel level);

/// JSON-RPC error codes.
namespace rpc {
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kServerError = -32000;      // limits (too many calls / sessions)
inline constexpr int kSessionNotFound = -32001;  // as the TypeScript SDK
}  // namespace rpc

/// {"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}
nlohmann::json JsonRpcError(const nlohmann::json& id, int code, const std::string& message);
/// {"jsonrpc":"2.0","id":id,"result":result}
nlohmann::json JsonRpcResult(const nlohmann::json& id, nlohmann::json result);
/// The CallToolResult for a backend result: text block with the JSON, structuredContent,
/// isError.
nlohmann::json ToolResultJson(const ToolResult& result);
/// One SSE event: "id: <id>\nevent: message\ndata: <json>\n\n".
std::string SseEvent(const nlohmann::json& message, const std::string& event_id);
/// Maximum {/[ nesting depth of `text` outside strings (a cheap pre-parse scan).
int JsonNestingDepth(std::string_view text);

/// The parts of an HTTP request McpHandler looks at.
struct McpRequest {
  std::string http_method;  // "POST", "GET", "DELETE", ...
  std::string domain;       // authenticated caller's domain
  std::optional<std::string> accept;
  std::optional<std::string> content_type;
  std::optional<std::string> session_id;
  std::optional<std::string> protocol_version;
  std::string body;
  // --- MCP 2026-07-28 (issue 17): standard request headers ---
  std::optional<std::string> mcp_method;  // Mcp-Method
  std::optional<std::string> mcp_name;    // Mcp-Name (may use the =?base64?...?= sentinel)
};

/// An immediate HTTP answer.
struct HttpReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type;  // empty when there is no body
  std::string body;
};

/// How the answer to a dispatched call is rendered (MCP 2026-07-28, issue 17).
enum class McpCallKind {
  kTool,        // a CallToolResult
  kTaskCreate,  // build_candidate as a task: CreateTaskResult while the build is active
  kTaskGet,     // tasks/get: the task (backend tool "build_result")
  kTaskCancel,  // tasks/cancel: an empty ack (backend tool "cancel_build")
};

/// A tools/call to hand to the ToolBackend.
struct PendingCall {
  nlohmann::json request_id;
  std::string id_key;  // request_id.dump(): the key notifications/cancelled uses
  uint64_t seq = 0;    // unique per handler; pass back to CallStarted/CallFinished
  ToolCall call;
  std::string tool_name;  // as the client named it (may be an alias)
  std::optional<nlohmann::json> progress_token;
  bool log_progress = false;  // send progress as notifications/message (level info)
  // --- MCP 2026-07-28 (issue 17) ---
  bool modern = false;  // a stateless 2026-07-28 request (no session)
  McpCallKind kind = McpCallKind::kTool;
  std::optional<TaskRef> task;  // kTaskGet / kTaskCancel: the task the request names
};

struct McpDecision {
  /// The answer when `calls` is empty.
  HttpReply reply;
  /// Tool calls to dispatch; the answer is assembled by an McpResponseStream.
  std::vector<PendingCall> calls;
  std::vector<nlohmann::json> ready_responses;  // responses already known (batch members)
  bool batch = false;
  bool sse = false;  // answer the calls as text/event-stream
  std::string session_id;
  /// Backend handles to Cancel now (from notifications/cancelled).
  std::vector<uint64_t> cancel;
  /// Method label for metrics ("initialize", "tools/call", "batch", "invalid", ...).
  std::string metric_method;
  /// HTTP transport caps: the limit that refused this request ("sessions" for the global cap,
  /// "sessions_per_domain"), empty when none did; and how many of the caller's own idle
  /// sessions were evicted to make room.
  std::string refused_by;
  size_t evicted_sessions = 0;
  // --- MCP 2026-07-28 (issue 17) ---
  bool modern = false;
  nlohmann::json result_meta;  // modern: the _meta every result carries (serverInfo)
  TaskTiming task_timing;      // modern: clock and hints for task results
};

/// What the request's Accept header allows.
struct McpAccept {
  bool json = false;
  bool sse = false;           // explicitly lists text/event-stream
  bool sse_wildcard = false;  // */* or text/*
};

/// McpFront's answer: `answer` when the request is decided without session state (an immediate
/// reply, or a 2026-07-28 decision); otherwise a session-era request whose parsed `body` (null
/// for DELETE) McpHandler::HandleSession decides.
struct McpPreflight {
  std::optional<McpDecision> answer;
  nlohmann::json body;
  McpAccept accept;
};

/// McpHandler's options (also McpFront's: it reads the catalog, version, instructions, limits
/// of the body and the 2026-07-28 hints).
struct McpOptions {
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  using IdGenerator = std::function<std::string()>;

  std::string server_version = "0.1.0";
  std::string instructions;
  /// Sessions in all (global cap; see the header comment for what is evicted at it).
  size_t max_sessions = 1000;
  /// Sessions one domain may hold (0: no per-domain cap). A domain at its cap loses its
  /// least recently used session without a call in flight; when every one of its sessions
  /// has a call in flight, its initialize is refused (503). Other domains are never touched.
  size_t max_sessions_per_domain = 64;
  size_t max_calls_per_session = 16;
  std::chrono::seconds session_idle_timeout{3600};
  int max_json_depth = 64;
  /// domain -> (alias -> tool)
  std::map<std::string, std::map<std::string, std::string>> tool_aliases;
  ToolCatalog::Options catalog;
  Clock clock;                 // default: steady_clock::now
  IdGenerator new_session_id;  // default: 128 random bits (OpenSSL RAND_bytes) as hex
  // --- MCP 2026-07-28 (issue 17) ---
  int64_t task_ttl_ms = 3600000;
  int64_t task_poll_interval_ms = 1000;
  std::function<int64_t()> wall_clock_ms;  // default: system clock (Unix milliseconds)
};

/// The stateless part (see the header comment). Thread-safe.
class McpFront {
 public:
  explicit McpFront(const McpOptions& options);
  ~McpFront();
  McpFront(const McpFront&) = delete;
  McpFront& operator=(const McpFront&) = delete;

  /// Decides what needs no session state. Never fails.
  McpPreflight Preflight(const McpRequest& request) const;

  /// MCP 2026-07-28: forgets a dispatched stateless call (finished, or its stream closed).
  /// Call exactly once per modern PendingCall.
  void ModernCallFinished() const;
  /// 2026-07-28 calls dispatched and not yet finished.
  size_t ModernInflight() const { return modern_inflight_.load(); }

  const ToolCatalog& catalog() const { return catalog_; }

 private:
  const int max_json_depth_;
  const std::map<std::string, std::map<std::string, std::string>> tool_aliases_;
  const ToolCatalog catalog_;
  std::unique_ptr<McpModernDispatch> modern_;
  mutable std::atomic<uint64_t> next_seq_{1};
  mutable std::atomic<size_t> modern_inflight_{0};
};

class McpHandler {
 public:
  using Clock = McpOptions::Clock;
  using IdGenerator = McpOptions::IdGenerator;
  using Options = McpOptions;

  explicit McpHandler(Options options);
  ~McpHandler();
  McpHandler(const McpHandler&) = delete;
  McpHandler& operator=(const McpHandler&) = delete;

  /// Decides what to answer (Preflight, then HandleSession). Never fails: protocol errors
  /// become HTTP/JSON-RPC error replies.
  McpDecision Handle(const McpRequest& request);

  /// The session part: decides a request McpFront::Preflight left undecided (`pre.answer`
  /// empty). Never fails.
  McpDecision HandleSession(const McpRequest& request, McpPreflight pre);

  /// Records the backend handle of a dispatched call. Returns true when the client cancelled
  /// the call before its handle was known: the caller must Cancel(handle) now. Unknown or
  /// already finished calls return false.
  bool CallStarted(const std::string& session_id, const PendingCall& call, uint64_t handle);

  /// Forgets a finished call. Returns true when the client had cancelled it (the answer may
  /// then be left out of an SSE stream).
  bool CallFinished(const std::string& session_id, const PendingCall& call);

  /// Drops sessions idle longer than the idle timeout and without calls in flight. Returns how
  /// many were dropped.
  size_t EvictIdle();

  /// Sessions held (thread-safe).
  size_t SessionCount() const { return session_gauge_.load(); }
  /// Sessions held by `domain`.
  size_t SessionCount(const std::string& domain) const;
  /// Session calls in flight plus this handler's front's 2026-07-28 calls (thread-safe).
  size_t InflightCalls() const { return inflight_gauge_.load() + front_.ModernInflight(); }

  /// MCP 2026-07-28 calls decided by Handle(): see McpFront::ModernCallFinished.
  void ModernCallFinished() { front_.ModernCallFinished(); }

  /// The log level a session set, if any (nullopt also for unknown sessions).
  std::optional<McpLogLevel> SessionLogLevel(const std::string& session_id) const;

  const ToolCatalog& catalog() const { return front_.catalog(); }

 private:
  struct CallSlot {
    uint64_t seq = 0;
    std::optional<uint64_t> handle;
    bool cancelled = false;
  };
  struct Session {
    std::string domain;
    std::string protocol_version;
    std::optional<McpLogLevel> log_level;
    std::chrono::steady_clock::time_point last_used;
    std::map<std::string, CallSlot> inflight;  // by request id key
  };
  // Per-message outcome.
  struct Outcome {
    std::optional<nlohmann::json> response;
    std::optional<PendingCall> call;
    bool bad_request = false;  // the single message was unparseable/invalid (HTTP 400)
  };

  McpDecision HandlePost(const McpRequest& request, nlohmann::json body, const McpAccept& accept);
  McpDecision HandleInitialize(const McpRequest& request, const nlohmann::json& message);
  // Makes room for one more session of `domain` (the caps in the header comment); fills
  // `d.refused_by` and `d.reply` when there is none.
  bool MakeRoom(const std::string& domain, const nlohmann::json& id, McpDecision& d);
  Outcome HandleMessage(const std::string& session_id, Session& session,
                        const nlohmann::json& message, McpDecision& decision);
  Outcome HandleToolsCall(const std::string& session_id, Session& session, const nlohmann::json& id,
                          const nlohmann::json& params);
  void HandleCancelled(Session& session, const nlohmann::json& params, McpDecision& decision);
  void UpdateGauges();

  const Options options_;
  const McpFront front_;  // Handle()'s first part, and the catalog
  std::map<std::string, Session> sessions_;
  uint64_t next_seq_ = 1;
  size_t inflight_ = 0;  // session calls in flight
  std::atomic<size_t> session_gauge_{0};
  std::atomic<size_t> inflight_gauge_{0};
};

/// Converts one call's progress reports into notifications: strictly increasing progress,
/// nothing after Finish(). Not thread-safe.
class ProgressTracker {
 public:
  ProgressTracker(std::optional<nlohmann::json> token, bool log_progress, std::string tool);

  /// The notifications to send for `p` (0, 1 or 2 messages). Empty when `p.progress` is not
  /// strictly greater than the last one sent, or after Finish().
  std::vector<nlohmann::json> OnProgress(const ToolProgress& p);
  void Finish() { finished_ = true; }

 private:
  std::optional<nlohmann::json> token_;
  bool log_progress_;
  std::string tool_;
  std::optional<double> last_;
  bool finished_ = false;
};

/// Assembles the answer to one POST that dispatched tool calls: SSE events as progress and
/// results arrive, or one JSON body when everything finished. For 2026-07-28 calls it renders
/// each kind (McpCallKind): CallToolResult or CreateTaskResult, the task of tasks/get, the ack
/// of tasks/cancel, all with resultType and the serverInfo _meta. Not thread-safe.
class McpResponseStream {
 public:
  McpResponseStream(const McpDecision& decision, std::string stream_id);

  bool sse() const { return sse_; }
  /// SSE text for the responses known at once (batch members); empty in JSON mode.
  std::string Start();
  /// SSE text for a progress report of call `index` (may be empty). Empty in JSON mode.
  std::string OnProgress(size_t index, const ToolProgress& p);
  /// Records call `index`'s result. Returns the SSE text to send (empty in JSON mode, or when
  /// the client cancelled the call: it gets no response). A second result for the same
  /// index is ignored.
  std::string OnDone(size_t index, const ToolResult& result, bool cancelled);
  /// True when every call has finished.
  bool complete() const { return remaining_ == 0; }
  /// JSON mode: the response body (object, or array for a batch). Valid when complete().
  std::string JsonBody() const;

 private:
  std::string Event(const nlohmann::json& message);
  nlohmann::json Render(size_t index, const ToolResult& result) const;

  const bool sse_;
  const bool batch_;
  const std::string stream_id_;
  uint64_t next_event_ = 1;
  std::vector<nlohmann::json> request_ids_;
  std::vector<PendingCall> calls_;  // kind, task and domain of each call
  const bool modern_;
  const nlohmann::json result_meta_;
  const TaskTiming task_timing_;
  std::vector<ProgressTracker> trackers_;
  std::vector<bool> done_;
  std::vector<nlohmann::json> ready_;  // ready responses, then results as they come
  size_t remaining_;
};

}  // namespace kiln
