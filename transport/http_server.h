// HttpServer: kiln's HTTP/1.1 front door (Boost.Beast/Asio). Serves the MCP Streamable HTTP
// endpoint (/mcp: POST, GET -> 405, DELETE), /healthz, /readyz, /metrics, and routes other
// modules register with AddRoute (/v1, /git).
//
// Threads: `io_threads` threads run one io_context; each connection runs on its own strand.
// Nothing blocks an io thread: ToolBackend::Call/Cancel must return at once, and backend
// callbacks (from any thread) only post onto the connection's strand. A client that
// disconnects mid-call does not cancel the call (MCP: a dropped connection is not a
// cancellation); its answer is dropped.
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
#include "transport/auth.h"
#include "transport/tool_backend.h"
#include "transport/tool_catalog.h"

namespace kiln {

struct HttpServerOptions {
  std::string listen;  // "host:port"; empty: config.server.listen. Port 0 picks a free port.
  int io_threads = 2;
  size_t max_request_bytes = 1 << 20;  // larger bodies -> 413
  size_t max_sessions = 1000;
  size_t max_calls_per_session = 16;
  std::chrono::seconds read_timeout{30};  // per request (headers + body), and keep-alive idle
  std::chrono::seconds session_idle_timeout{3600};
  std::string version = "0.1.0";
  std::string instructions =
      "kiln builds container images of your code. Push your work with git to the kiln remote "
      "(branch = candidate name), then call build_candidate. Long builds: pass wait=false and "
      "poll candidate_status. A failed build returns isError=true with compiler diagnostics; "
      "read more with build_log.";
  ToolCatalog::Options catalog;
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
  /// options.max_request_bytes. Routes do their own authentication (see authenticator()); the
  /// Origin/Host check has already passed. Call before Start.
  void AddRoute(std::string method, std::string path_prefix, RouteHandler handler,
                size_t max_body_bytes = 0);

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

  class Impl;  // implementation detail (http_server.cc)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
