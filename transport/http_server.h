// HttpServer: kiln's HTTP/1.1 front door (Boost.Beast/Asio). Serves the MCP Streamable HTTP
// endpoint (/mcp: POST, GET -> 405, DELETE), /healthz, /readyz, /metrics, and routes other
// modules register with AddRoute (/v1, /git).
//
// Threads: `io_threads` threads run one io_context; each connection runs on its own strand.
// Nothing blocks an io thread: ToolBackend::Call/Cancel must return at once, and backend
// callbacks (from any thread) only post onto the connection's strand. A client that
// disconnects mid-call does not cancel the call (MCP: a dropped connection is not a
// cancellation); its answer is dropped. Exception (issue 17): for a 2026-07-28 request,
// closing its stream cancels the request (HttpResponder::OnClose; see docs/tools.md).
//
// MCP (issue 17): the server decides what needs no state (McpFront: validation, the era, all of
// 2026-07-28, whose calls go to ToolBackend::Call) and hands session-era requests to the
// McpSessionHost (HttpServerOptions::session_host), which decides and dispatches them; the
// server only writes what it is told, or 503 when no decision came in time.
//
// Limits of the transport (docs/security.md, "Limits of the HTTP transport"):
//   - authentication before the body: the server authorizes every request from its headers
//     (bearer token for /mcp and /metrics, each route's `authorize` hook, else a valid bearer
//     token) before reading a body byte or answering `Expect: 100-continue`; a refused request
//     with a body pending is answered (Connection: close) and the connection is shut down
//     without reading the rest;
//   - max_connections: over the cap, a new connection gets a short 503 and is closed;
//   - accept errors from resource exhaustion (EMFILE, ENFILE, ENOBUFS, ENOMEM) re-arm the accept
//     only after a backoff (AcceptBackoff: 50 ms doubling to 1 s);
//   - header_timeout for a request's headers, idle_timeout between keep-alive requests,
//     read_timeout for a body, write_timeout for a client that stops reading;
//   - backpressure: a connection's queued output is bounded (max_queued_output_bytes);
//     producers on other threads call HttpResponder::WaitWritable before writing more.
// Every refusal is counted in kiln_http_refusals_total{reason}.
//
// Ownership: the backend must outlive the server. Backend callbacks may outlive the server
// safely: they hold only shared, stop-aware state.
// Thread-safety: AddRoute before Start only; Start/Stop from one controlling thread; port()
// and metrics() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "config/config.h"
#include "core/tool_backend.h"
#include "transport/auth.h"
#include "transport/mcp_session_host.h"
#include "transport/tool_catalog.h"

namespace kiln {

struct HttpServerOptions {
  std::string listen;  // "host:port"; empty: config.server.listen. Port 0 picks a free port.
  int io_threads = 2;
  size_t max_request_bytes = 1 << 20;  // larger bodies -> 413
  size_t max_sessions = 1000;
  size_t max_calls_per_session = 16;
  std::chrono::seconds read_timeout{30};  // per request body
  std::chrono::seconds session_idle_timeout{3600};
  // --- HTTP transport caps (issue 15) ---
  size_t max_connections = 1024;             // open connections; more get 503 and are closed
  std::chrono::seconds header_timeout{10};   // a request's headers (slowloris)
  std::chrono::seconds idle_timeout{60};     // a keep-alive connection between requests
  std::chrono::seconds write_timeout{30};    // a client that stops reading loses its connection
  size_t max_queued_output_bytes = 1 << 20;  // per connection; see HttpResponder::WaitWritable
  size_t max_sessions_per_domain = 64;       // MCP sessions per domain (0: no per-domain cap)
  /// Serve only /metrics and /healthz, with no token (the operator's metrics listener);
  /// everything else is 404. /metrics then renders `metrics_text` (e.g. the main server's).
  bool metrics_only = false;
  std::function<std::string()> metrics_text;
  /// Tests: asked before each accept; a non-zero errno is handled as if accept had failed
  /// with it (no connection is taken).
  std::function<int()> accept_fault;
  // --- end HTTP transport caps ---
  std::string version = "0.1.0";
  /// The MCP `instructions`. Issue 16: "<kiln>" is replaced by server.public_url and
  /// "<domain>" by the session's domain, so the push command is exact for the agent.
  std::string instructions =
      "kiln builds and deploys container images of your code. 1. Commit your work and push it "
      "with git to kiln, your git remote, one branch per candidate: git -c "
      "http.extraHeader=\"Authorization: Bearer <your token>\" push <kiln>/git/<domain>.git "
      "HEAD:refs/heads/<candidate> (your token is the one you call kiln's tools with). "
      "2. Call build_candidate with that candidate (long builds: wait=false, then poll "
      "candidate_status). A failed build returns isError=true with error (what happened), "
      "error_kind (compile, test, containerfile, base_image, output_missing, timeout, "
      "cancelled, superseded, not_pushed, invalid_argument, infrastructure, ...), next_step "
      "(what to do) and compiler diagnostics with repository-relative file:line:column; read "
      "more with build_log (tail=N for the last N bytes). infrastructure means not your code: "
      "retry later. 3. Call deploy_candidate to roll the built image out; a failed deploy says "
      "why (error_kind deploy_crash, deploy_unready, deploy_image, ...; reason, message, the "
      "container's exit code and last log lines). 4. candidate_status and list_candidates show "
      "where each candidate is.";
  ToolCatalog::Options catalog;
  // --- MCP session revisions (issue 17) ---
  /// Who owns the session table: called once, in the constructor, with the McpHandler options
  /// (kiln: Runtime::ServeMcpSessions, the MCP transport actor). Unset: a LocalMcpSessionHost
  /// over the backend (tests, the fake server).
  std::function<std::shared_ptr<McpSessionHost>(McpOptions)> session_host;
  /// A session request the host has not decided by then is answered 503 (checked each second).
  std::chrono::seconds session_decision_timeout{10};
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

/// A parsed request as routes see it.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path?query
  std::string path;
  std::string query;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;

  /// The header's value, or nullopt when absent. `name` must be lowercase.
  std::optional<std::string> Header(const std::string& name) const;
};

/// A refusal decided from a request's headers alone, before any body byte is read.
struct HttpRefusal {
  int status = 401;
  std::string body;  // JSON
  HttpHeaders headers;
  std::string reason;  // label for kiln_http_refusals_total

  /// A refusal with the standard JSON error body.
  static HttpRefusal Make(int status, const std::string& message, std::string reason,
                          HttpHeaders headers = {});
};

/// Decides from the request's method, path, query and headers (the body is empty) whether it
/// may go on; nullopt to go on. Called on an io thread: must not block.
using RouteAuthorizer = std::function<std::optional<HttpRefusal>(const HttpRequest& head)>;

/// The accept loop's backoff after resource errors: 50 ms, doubling, at most 1 s; Reset()
/// after an accept succeeds. Plain value type; not thread-safe.
class AcceptBackoff {
 public:
  std::chrono::milliseconds Next();
  void Reset() { next_ = std::chrono::milliseconds(0); }

 private:
  std::chrono::milliseconds next_{0};
};

/// True for accept errors that mean "out of descriptors or memory": retry only after a backoff.
bool IsAcceptResourceError(int err);

/// How a route answers, possibly later and from any thread. Thread-safe. After the client
/// disconnected or the server stopped, every method is a no-op.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  /// Sends one complete response. Ignored when a response was already started.
  virtual void Reply(int status, std::string content_type, std::string body,
                     HttpHeaders headers = {}) = 0;
  /// Starts a chunked response (e.g. text/event-stream). Ignored when already started.
  virtual void StartStream(int status, std::string content_type, HttpHeaders headers = {}) = 0;
  /// Sends one chunk of a started stream. Empty chunks are ignored.
  virtual void Write(std::string chunk) = 0;
  /// Ends a started stream; the connection then serves its next request.
  virtual void Finish() = 0;
  /// Backpressure for producers on their own thread (never an io thread or an actor): blocks
  /// until the connection's queued output is under the server's bound. Returns false when
  /// `deadline` passed first or the connection is gone (the producer should stop).
  virtual bool WaitWritable(std::chrono::steady_clock::time_point deadline) {
    (void)deadline;
    return true;
  }
  /// Closes the connection without completing the response (a stream cut short must not look
  /// complete to the client).
  virtual void Abort() {}
  /// Issue 17 (MCP 2026-07-28: closing a request's stream cancels it): `fn` runs once, on an io
  /// thread, when the connection closes before this response completed (the client went away,
  /// or the server stopped); never after the response completed. Must not block.
  virtual void OnClose(std::function<void()> fn) { (void)fn; }
};

using RouteHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpResponder>)>;

class HttpServer {
 public:
  HttpServer(const Config& config, ToolBackend& backend, HttpServerOptions options = {});
  ~HttpServer();  // calls Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Registers a handler for requests whose path starts with `path_prefix` and whose method is
  /// `method` (empty: any). The longest matching prefix wins. `max_body_bytes` 0 means
  /// options.max_request_bytes. `authorize` runs on the headers before the body is read (see
  /// RouteAuthorizer); without one, a valid bearer token (any principal) is required before
  /// the body. Routes still do their own authentication (see authenticator()); the Origin/Host
  /// check has already passed. Call before Start.
  void AddRoute(std::string method, std::string path_prefix, RouteHandler handler,
                size_t max_body_bytes = 0, RouteAuthorizer authorize = nullptr);

  /// Binds and starts serving. Returns InvalidArgument for a bad listen address, Unavailable
  /// when binding fails, FailedPrecondition when already started.
  Status Start();

  /// Stops accepting, closes every connection (open SSE streams included) and joins the io
  /// threads. Running tool calls continue in the backend; their answers are dropped.
  /// Idempotent.
  void Stop();

  /// The bound port (useful with port 0); 0 before Start.
  uint16_t port() const;

  const Authenticator& authenticator() const;
  /// Registry for /metrics; other modules may declare their own series here.
  MetricsRegistry& metrics();
  /// What /metrics answers (this server's registry plus the backend's text). Thread-safe.
  std::string MetricsText();

  class Impl;  // implementation detail (http_server.cc)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
