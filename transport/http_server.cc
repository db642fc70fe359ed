#include "transport/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/json_text.h"
#include "transport/mcp_handler.h"

namespace kiln {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr std::chrono::seconds kWriteTimeout{60};
constexpr size_t kHeaderLimit = 16 * 1024;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Splits "host:port" / "[v6]:port". Returns false when malformed.
bool SplitListen(const std::string& listen, std::string* host, uint16_t* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 >= listen.size()) return false;
  std::string h = listen.substr(0, colon);
  std::string p = listen.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  unsigned long n = std::stoul(p);
  if (n > 65535) return false;
  *host = h == "localhost" ? "127.0.0.1" : h;
  *port = static_cast<uint16_t>(n);
  return true;
}

bool IsLoopbackListen(const std::string& listen) {
  std::string host;
  uint16_t port;
  if (!SplitListen(listen, &host, &port)) return true;
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  return !ec && addr.is_loopback();
}

std::string StatusLine(int status) {
  auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  std::string r(reason.data(), reason.size());
  if (r.empty() || r == "<unknown-status>") r = "Status";
  return "HTTP/1.1 " + std::to_string(status) + " " + r + "\r\n";
}

// Header names/values must not carry CR/LF (response splitting).
std::string Clean(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '\r' || c == '\n'; }),
          s.end());
  return s;
}

std::string JsonError(const std::string& message) { return DumpJson(json{{"error", message}}); }

struct ServerShared;

}  // namespace

std::optional<std::string> HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

namespace {

// State shared with backend callbacks; outlives the server if a callback does.
struct ServerShared {
  explicit ServerShared(McpHandler::Options o) : handler(std::move(o)) {}
  std::mutex mu;
  bool stopped = false;  // guarded by mu: once set, nothing is posted to the io_context
  McpHandler handler;
  MetricsRegistry metrics;
};

}  // namespace

class Connection;

class HttpServer::Impl : public std::enable_shared_from_this<HttpServer::Impl> {
 public:
  Impl(const Config& config, ToolBackend& backend, HttpServerOptions options);
  ~Impl();

  struct Route {
    std::string method;
    std::string prefix;
    RouteHandler handler;
    size_t max_body;
  };

  Status Start();
  void Stop();
  void Dispatch(const HttpRequest& request, std::shared_ptr<HttpResponder> responder);
  size_t BodyLimitFor(const std::string& path) const;
  size_t MaxBodyLimit() const;
  void Forget(Connection* c);
  // Posts `fn` to the connection's strand unless the server stopped or the connection is gone.
  static void PostTo(const std::shared_ptr<ServerShared>& shared,
                     const std::weak_ptr<Connection>& conn, std::function<void(Connection&)> fn);

  const HttpServerOptions options_;
  ToolBackend& backend_;
  Authenticator auth_;
  std::shared_ptr<ServerShared> shared_;
  std::vector<Route> routes_;
  std::atomic<uint16_t> port_{0};
  std::atomic<uint64_t> stream_seq_{0};

  net::io_context ioc_;  // declared before everything that owns sockets or timers
  std::optional<tcp::acceptor> acceptor_;
  std::optional<net::steady_timer> evict_timer_;
  std::mutex conns_mu_;
  std::map<Connection*, std::shared_ptr<Connection>> conns_;  // guarded by conns_mu_
  std::vector<std::thread> threads_;
  bool started_ = false;

 private:
  void DoAccept();
  void ScheduleEviction();
  void HandleMcp(const HttpRequest& request, std::shared_ptr<HttpResponder> responder);
  void RunCalls(McpDecision decision, std::shared_ptr<HttpResponder> responder);
  void Readyz(std::shared_ptr<HttpResponder> responder);
  std::string MetricsText();
  const Route* FindRoute(const std::string& method, const std::string& path) const;
};

// One TCP connection: read request -> dispatch -> write response (possibly streamed) -> repeat.
// All members are touched only on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    server_->Forget(this);
  }

  // Responder operations; `gen` identifies the request they answer.
  void Reply(uint64_t gen, int status, const std::string& content_type, const std::string& body,
             const HttpHeaders& headers) {
    if (gen != gen_ || started_ || closed_) return;
    started_ = true;
    std::string out = Head(status, headers);
    if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    out += body;
    complete_ = true;
    Enqueue(std::move(out));
  }

  void StartStream(uint64_t gen, int status, const std::string& content_type,
                   const HttpHeaders& headers) {
    if (gen != gen_ || started_ || closed_) return;
    started_ = true;
    streaming_ = true;
    chunked_ = http11_;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the stream is the close
    std::string out = Head(status, headers);
    out += "Content-Type: " + content_type + "\r\n";
    if (chunked_) out += "Transfer-Encoding: chunked\r\n";
    out += "\r\n";
    Enqueue(std::move(out));
  }

  void Write(uint64_t gen, const std::string& chunk) {
    if (gen != gen_ || !streaming_ || complete_ || closed_ || chunk.empty()) return;
    if (!chunked_) {
      Enqueue(chunk);
      return;
    }
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    Enqueue(size + chunk + "\r\n");
  }

  void Finish(uint64_t gen) {
    if (gen != gen_ || !streaming_ || complete_ || closed_) return;
    complete_ = true;
    Enqueue(chunked_ ? "0\r\n\r\n" : "");
  }

 private:
  std::string Head(int status, const HttpHeaders& headers) {
    std::string out = StatusLine(status);
    out += "Server: kiln\r\n";
    for (const auto& [k, v] : headers) out += Clean(k) + ": " + Clean(v) + "\r\n";
    if (!keep_alive_) out += "Connection: close\r\n";
    return out;
  }

  void DoRead() {
    if (closed_) return;
    parser_.emplace();
    body_limit_ = 0;
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_->MaxBodyLimit());
    started_ = streaming_ = complete_ = false;
    stream_.expires_after(server_->options_.read_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    auto& req = parser_->get();
    std::string target(req.target());
    std::string path = target.substr(0, target.find('?'));
    size_t limit = server_->BodyLimitFor(path);
    body_limit_ = limit;
    http11_ = req.version() >= 11;
    keep_alive_ = req.keep_alive();
    auto length = parser_->content_length();
    if (length && *length > limit) return TooLarge(limit);
    parser_->body_limit(limit);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      stream_.expires_after(kWriteTimeout);
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(stream_, net::buffer(*cont),
                       [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(server_->options_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       self->OnRequest();
                     });
  }

  void OnReadError(beast::error_code ec) {
    // The route's limit (a chunked body has no length to refuse it by up front).
    if (ec == http::error::body_limit)
      return TooLarge(body_limit_ ? body_limit_ : server_->options_.max_request_bytes);
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      ++gen_;
      return Reply(gen_, 431, "application/json", JsonError("request headers too large"), {});
    }
    Close();  // end of stream, timeout, reset, garbage: nothing sensible to answer
  }

  void TooLarge(size_t limit) {
    keep_alive_ = false;  // the unread body is still on the wire
    ++gen_;
    Reply(gen_, 413, "application/json",
          json{{"error", "request body too large (limit " + std::to_string(limit) + " bytes)"}}
              .dump(),
          {});
  }

  void OnRequest() {
    stream_.expires_never();  // the answer may take as long as the tool call
    auto& req = parser_->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    size_t q = r.target.find('?');
    r.path = r.target.substr(0, q);
    if (q != std::string::npos) r.query = r.target.substr(q + 1);
    for (const auto& field : req) {
      std::string name = Lower(std::string(field.name_string()));
      auto [it, inserted] = r.headers.emplace(name, std::string(field.value()));
      if (!inserted) it->second += ", " + std::string(field.value());
    }
    r.body = std::move(req.body());
    ++gen_;
    server_->Dispatch(r, MakeResponder());
  }

  std::shared_ptr<HttpResponder> MakeResponder();

  void Enqueue(std::string data) {
    out_.push_back(std::move(data));
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    if (closed_) return;
    if (out_.empty()) {
      writing_ = false;
      if (complete_) {
        if (keep_alive_) return DoRead();
        return LingerClose();
      }
      stream_.expires_never();
      return;
    }
    writing_ = true;
    stream_.expires_after(kWriteTimeout);
    net::async_write(stream_, net::buffer(out_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Close();  // client left: drop the rest
                       self->out_.pop_front();
                       self->DoWrite();
                     });
  }

  // Half-closes, then reads and discards what the client still sends (e.g. the rest of a body
  // we refused) for a moment, so that it sees our answer instead of a connection reset.
  void LingerClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    Drain(std::make_shared<std::array<char, 8192>>());
  }

  void Drain(std::shared_ptr<std::array<char, 8192>> buf) {
    stream_.async_read_some(net::buffer(*buf),
                            [self = shared_from_this(), buf](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Drain(buf);
                            });
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  uint64_t gen_ = 0;
  bool writing_ = false;
  bool started_ = false;
  bool streaming_ = false;
  bool chunked_ = true;
  bool complete_ = false;
  bool keep_alive_ = true;
  bool http11_ = true;
  size_t body_limit_ = 0;  // the current request's body limit (by route), 0 before its header
  bool closed_ = false;

  friend class HttpServer::Impl;
};

namespace {

class Responder : public HttpResponder {
 public:
  Responder(std::shared_ptr<ServerShared> shared, std::weak_ptr<Connection> conn, uint64_t gen)
      : shared_(std::move(shared)), conn_(std::move(conn)), gen_(gen) {}

  void Reply(int status, std::string content_type, std::string body, HttpHeaders headers) override {
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(
        shared_, conn_,
        [=, ct = std::move(content_type), b = std::move(body),
         h = std::move(headers)](Connection& c) { c.Reply(gen, status, ct, b, h); });
  }
  void StartStream(int status, std::string content_type, HttpHeaders headers) override {
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(
        shared_, conn_, [=, ct = std::move(content_type), h = std::move(headers)](Connection& c) {
          c.StartStream(gen, status, ct, h);
        });
  }
  void Write(std::string chunk) override {
    if (chunk.empty()) return;
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(shared_, conn_,
                             [=, s = std::move(chunk)](Connection& c) { c.Write(gen, s); });
  }
  void Finish() override {
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(shared_, conn_, [=](Connection& c) { c.Finish(gen); });
  }

 private:
  std::shared_ptr<ServerShared> shared_;
  std::weak_ptr<Connection> conn_;
  const uint64_t gen_;
};

}  // namespace

std::shared_ptr<HttpResponder> Connection::MakeResponder() {
  return std::make_shared<Responder>(server_->shared_, weak_from_this(), gen_);
}

void HttpServer::Impl::PostTo(const std::shared_ptr<ServerShared>& shared,
                              const std::weak_ptr<Connection>& conn,
                              std::function<void(Connection&)> fn) {
  std::lock_guard<std::mutex> lock(shared->mu);
  if (shared->stopped) return;
  auto c = conn.lock();
  if (!c) return;
  net::post(c->stream_.get_executor(), [c, fn = std::move(fn)] { fn(*c); });
}

// ---------------------------------------------------------------------------------------------
// HttpServer::Impl

namespace {

McpHandler::Options HandlerOptions(const Config& config, const HttpServerOptions& o) {
  McpHandler::Options h;
  h.server_version = o.version;
  h.instructions = o.instructions;
  h.max_sessions = o.max_sessions;
  h.max_calls_per_session = o.max_calls_per_session;
  h.session_idle_timeout = o.session_idle_timeout;
  h.catalog = o.catalog;
  for (const auto& [name, d] : config.domains) h.tool_aliases[name] = d.tool_aliases;
  return h;
}

HttpServerOptions Normalize(const Config& config, HttpServerOptions o) {
  if (o.listen.empty()) o.listen = config.server.listen;
  o.io_threads = std::max(1, o.io_threads);
  return o;
}

}  // namespace

HttpServer::Impl::Impl(const Config& config, ToolBackend& backend, HttpServerOptions options)
    : options_(Normalize(config, std::move(options))),
      backend_(backend),
      auth_(config, IsLoopbackListen(options_.listen)),
      shared_(std::make_shared<ServerShared>(HandlerOptions(config, options_))) {
  MetricsRegistry& m = shared_->metrics;
  m.DeclareCounter("kiln_mcp_requests_total", "MCP HTTP requests by JSON-RPC method and status.");
  m.DeclareGauge("kiln_mcp_inflight_calls", "Tool calls running.");
  m.DeclareGauge("kiln_mcp_sessions", "Open MCP sessions.");
  m.DeclareCounter("kiln_mcp_tool_calls_total", "Finished tool calls by tool and outcome.");
  m.DeclareHistogram("kiln_mcp_tool_call_seconds", "Tool call duration.",
                     {0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600});
  m.DeclareCounter("kiln_http_requests_total", "HTTP requests by route and status.");
}

HttpServer::Impl::~Impl() { Stop(); }

Status HttpServer::Impl::Start() {
  if (started_) return Status::FailedPrecondition("server already started");
  std::string host;
  uint16_t port = 0;
  if (!SplitListen(options_.listen, &host, &port)) {
    return Status::InvalidArgument("server.listen: expected host:port, got '" + options_.listen +
                                   "'");
  }
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("server.listen: bad address '" + host + "'");
  tcp::endpoint endpoint(addr, port);
  acceptor_.emplace(ioc_);
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor_.reset();
    return Status::Unavailable("cannot listen on " + options_.listen + ": " + ec.message());
  }
  port_ = acceptor_->local_endpoint().port();
  started_ = true;
  DoAccept();
  evict_timer_.emplace(ioc_);
  ScheduleEviction();
  for (int i = 0; i < options_.io_threads; ++i) {
    threads_.emplace_back([this] { ioc_.run(); });
  }
  spdlog::info("http: listening on {}:{}", host, port_.load());
  return Status::Ok();
}

void HttpServer::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) return;
    shared_->stopped = true;
  }
  if (!started_) return;
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::map<Connection*, std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    conns.swap(conns_);
  }
  // No io thread runs now, so touching the connections directly is safe. Close every socket
  // explicitly: a connection with an operation pending is also referenced by the stopped
  // io_context and would otherwise keep its socket (and its client) open.
  for (auto& [ptr, c] : conns) c->Close();
  conns.clear();
}

void HttpServer::Impl::DoAccept() {
  acceptor_->async_accept(net::make_strand(ioc_),
                          [this](boost::system::error_code ec, tcp::socket socket) {
                            if (ec == net::error::operation_aborted || !acceptor_->is_open())
                              return;
                            if (!ec) {
                              auto c = std::make_shared<Connection>(std::move(socket), this);
                              {
                                std::lock_guard<std::mutex> lock(conns_mu_);
                                conns_[c.get()] = c;
                              }
                              c->Start();
                            }
                            DoAccept();
                          });
}

void HttpServer::Impl::ScheduleEviction() {
  evict_timer_->expires_after(std::chrono::seconds(60));
  evict_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    size_t n = shared_->handler.EvictIdle();
    if (n) spdlog::info("mcp: evicted {} idle sessions", n);
    ScheduleEviction();
  });
}

void HttpServer::Impl::Forget(Connection* c) {
  std::shared_ptr<Connection> keep;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(conns_mu_);
  auto it = conns_.find(c);
  if (it != conns_.end()) {
    keep = std::move(it->second);
    conns_.erase(it);
  }
}

const HttpServer::Impl::Route* HttpServer::Impl::FindRoute(const std::string& method,
                                                           const std::string& path) const {
  const Route* best = nullptr;
  for (const auto& r : routes_) {
    if (!r.method.empty() && r.method != method) continue;
    if (path.compare(0, r.prefix.size(), r.prefix) != 0) continue;
    if (!best || r.prefix.size() > best->prefix.size()) best = &r;
  }
  return best;
}

size_t HttpServer::Impl::BodyLimitFor(const std::string& path) const {
  size_t limit = options_.max_request_bytes;
  const Route* best = nullptr;
  for (const auto& r : routes_) {
    if (path.compare(0, r.prefix.size(), r.prefix) != 0) continue;
    if (!best || r.prefix.size() > best->prefix.size()) best = &r;
  }
  if (best && path != "/mcp" && best->max_body) limit = best->max_body;
  return limit;
}

size_t HttpServer::Impl::MaxBodyLimit() const {
  size_t limit = options_.max_request_bytes;
  for (const auto& r : routes_) limit = std::max(limit, r.max_body);
  return limit;
}

void HttpServer::Impl::Dispatch(const HttpRequest& request,
                                std::shared_ptr<HttpResponder> responder) {
  auto count = [&](const std::string& route, int status) {
    shared_->metrics.Increment(
        "kiln_http_requests_total",
        {{"route", route}, {"status", status ? std::to_string(status) : "routed"}});
  };
  if (request.path == "/healthz" || request.path == "/readyz" || request.path == "/metrics") {
    if (request.method != "GET") {
      count(request.path, 405);
      return responder->Reply(405, "application/json", JsonError("method not allowed"),
                              {{"Allow", "GET"}});
    }
    count(request.path, 200);
    if (request.path == "/healthz") {
      return responder->Reply(200, "application/json", R"({"status":"ok"})");
    }
    if (request.path == "/readyz") return Readyz(responder);
    return responder->Reply(200, "text/plain; version=0.0.4; charset=utf-8", MetricsText());
  }
  AuthDecision origin =
      auth_.CheckOrigin(request.Header("origin").value_or(""), request.Header("origin").has_value(),
                        request.Header("host").value_or(""));
  if (!origin.ok()) {
    count("origin", origin.status);
    return responder->Reply(origin.status, "application/json", JsonError(origin.message));
  }
  if (request.path == "/mcp") return HandleMcp(request, std::move(responder));
  if (const Route* route = FindRoute(request.method, request.path)) {
    count(route->prefix, 0);
    return route->handler(request, std::move(responder));
  }
  count("unknown", 404);
  responder->Reply(404, "application/json", JsonError("not found: " + request.path));
}

void HttpServer::Impl::Readyz(std::shared_ptr<HttpResponder> responder) {
  json checks = backend_.Readiness();
  bool ready = checks.is_object();
  if (ready) {
    for (const auto& [name, v] : checks.items()) {
      bool ok = v.is_boolean()  ? v.get<bool>()
                : v.is_object() ? v.value("ok", false)
                : v.is_array()  ? (!v.empty() && v[0].is_boolean() && v[0].get<bool>())
                                : false;
      ready = ready && ok;
    }
  }
  responder->Reply(ready ? 200 : 503, "application/json",
                   DumpJson(json{{"ready", ready}, {"checks", checks}}));
}

std::string HttpServer::Impl::MetricsText() {
  MetricsRegistry& m = shared_->metrics;
  m.Set("kiln_mcp_sessions", {}, static_cast<double>(shared_->handler.SessionCount()));
  m.Set("kiln_mcp_inflight_calls", {}, static_cast<double>(shared_->handler.InflightCalls()));
  std::string text = m.Render();
  std::string extra = backend_.MetricsText();
  if (!extra.empty() && extra.back() != '\n') extra += '\n';
  return text + extra;
}

void HttpServer::Impl::HandleMcp(const HttpRequest& request,
                                 std::shared_ptr<HttpResponder> responder) {
  auto count = [&](const std::string& method, int status) {
    shared_->metrics.Increment("kiln_mcp_requests_total",
                               {{"method", method}, {"status", std::to_string(status)}});
  };
  AuthDecision auth = auth_.Authenticate(request.Header("authorization").value_or(""));
  if (!auth.ok()) {
    count("unauthenticated", auth.status);
    return responder->Reply(auth.status, "application/json", JsonError(auth.message),
                            {{"WWW-Authenticate", auth.www_authenticate}});
  }
  if (auth.principal->kind != Principal::Kind::kDomain) {
    count("forbidden", 403);
    return responder->Reply(403, "application/json",
                            JsonError("operator tokens cannot use /mcp; use a domain token"));
  }
  McpRequest mr;
  mr.http_method = request.method;
  mr.domain = auth.principal->domain;
  mr.accept = request.Header("accept");
  mr.content_type = request.Header("content-type");
  mr.session_id = request.Header("mcp-session-id");
  mr.protocol_version = request.Header("mcp-protocol-version");
  mr.body = request.body;
  McpDecision d = shared_->handler.Handle(mr);
  for (uint64_t h : d.cancel) backend_.Cancel(h);
  if (d.calls.empty()) {
    count(d.metric_method, d.reply.status);
    return responder->Reply(d.reply.status, d.reply.content_type, std::move(d.reply.body),
                            std::move(d.reply.headers));
  }
  count(d.metric_method, 200);
  RunCalls(std::move(d), std::move(responder));
}

namespace {

// One POST's tool calls and the stream assembling their answers. Callbacks from the backend
// lock `mu` so that events are computed and posted in order.
struct CallRun {
  CallRun(const McpDecision& d, std::string id, std::shared_ptr<HttpResponder> r)
      : stream(d, std::move(id)), responder(std::move(r)) {}
  std::mutex mu;
  McpResponseStream stream;  // guarded by mu
  std::shared_ptr<HttpResponder> responder;
};

}  // namespace

void HttpServer::Impl::RunCalls(McpDecision decision, std::shared_ptr<HttpResponder> responder) {
  auto run = std::make_shared<CallRun>(decision, std::to_string(++stream_seq_), responder);
  if (run->stream.sse()) {
    responder->StartStream(200, "text/event-stream",
                           {{"Cache-Control", "no-cache, no-store"}, {"X-Accel-Buffering", "no"}});
    std::lock_guard<std::mutex> lock(run->mu);
    responder->Write(run->stream.Start());
  }
  std::shared_ptr<ServerShared> shared = shared_;
  const std::string session = decision.session_id;
  for (size_t i = 0; i < decision.calls.size(); ++i) {
    PendingCall call = decision.calls[i];
    auto progress = [run, i](const ToolProgress& p) {
      std::lock_guard<std::mutex> lock(run->mu);
      run->responder->Write(run->stream.OnProgress(i, p));
    };
    auto start = std::chrono::steady_clock::now();
    auto done = [run, i, shared, session, call, start](ToolResult result) {
      bool cancelled = shared->handler.CallFinished(session, call);
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      shared->metrics.Increment("kiln_mcp_tool_calls_total",
                                {{"tool", call.call.tool},
                                 {"outcome", cancelled         ? "cancelled"
                                             : result.is_error ? "error"
                                                               : "ok"}});
      shared->metrics.Observe("kiln_mcp_tool_call_seconds", {{"tool", call.call.tool}}, seconds);
      std::lock_guard<std::mutex> lock(run->mu);
      std::string text = run->stream.OnDone(i, result, cancelled);
      if (run->stream.sse()) {
        run->responder->Write(std::move(text));
        if (run->stream.complete()) run->responder->Finish();
      } else if (run->stream.complete()) {
        run->responder->Reply(200, "application/json", run->stream.JsonBody());
      }
    };
    uint64_t handle = backend_.Call(call.call, std::move(progress), std::move(done));
    if (shared_->handler.CallStarted(session, call, handle)) backend_.Cancel(handle);
  }
}

// ---------------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(const Config& config, ToolBackend& backend, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(config, backend, std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddRoute(std::string method, std::string path_prefix, RouteHandler handler,
                          size_t max_body_bytes) {
  impl_->routes_.push_back(
      {std::move(method), std::move(path_prefix), std::move(handler), max_body_bytes});
}

Status HttpServer::Start() { return impl_->Start(); }
void HttpServer::Stop() { impl_->Stop(); }
uint16_t HttpServer::port() const { return impl_->port_; }
const Authenticator& HttpServer::authenticator() const { return impl_->auth_; }
MetricsRegistry& HttpServer::metrics() { return impl_->shared_->metrics; }

}  // namespace kiln
