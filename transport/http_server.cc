#include "transport/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/json_text.h"
#include "transport/mcp_call_table.h"  // CallWaitsForWork (issue 17)
#include "transport/mcp_handler.h"
#include "transport/mcp_session_host.h"

namespace kiln {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr std::chrono::milliseconds kAbortGrace{1000};  // refused: answer, then close
constexpr uint64_t kSmallRefusedBody = 16 * 1024;  // refused bodies up to this are read, dropped
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

std::string JsonError(const std::string& message) { return JsonErrorBody(message); }

struct ServerShared;

}  // namespace

std::optional<std::string> HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

namespace {

// Session requests handed to the session host and not decided yet (issue 17): the decision
// takes the entry; the server's sweep answers 503 to those past their deadline. Thread-safe.
class PendingDecisions {
 public:
  uint64_t Add(std::shared_ptr<HttpResponder> r, std::chrono::steady_clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = next_++;
    pending_.emplace(id, Entry{deadline, std::move(r)});
    return id;
  }
  /// True when the entry was still pending (the caller answers it now).
  bool Take(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.erase(id) > 0;
  }
  std::vector<std::shared_ptr<HttpResponder>> Expire(std::chrono::steady_clock::time_point now) {
    std::vector<std::shared_ptr<HttpResponder>> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        out.push_back(std::move(it->second.responder));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<HttpResponder> responder;
  };
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Entry> pending_;
};

// State shared with backend callbacks; outlives the server if a callback does.
struct ServerShared {
  explicit ServerShared(const McpOptions& o) : front(o) {}
  std::mutex mu;
  bool stopped = false;  // guarded by mu: once set, nothing is posted to the io_context
  const McpFront front;  // stateless MCP: validation, the era, all of 2026-07-28
  std::shared_ptr<McpSessionHost> sessions;  // the session revisions' state (issue 17)
  PendingDecisions pending;                  // session requests not decided yet
  std::atomic<uint64_t> stream_seq{0};
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
    RouteAuthorizer authorize;
  };

  Status Start();
  void Stop();
  void Dispatch(const HttpRequest& request, std::shared_ptr<HttpResponder> responder);
  size_t BodyLimitFor(const std::string& path) const;
  size_t MaxBodyLimit() const;
  void Forget(Connection* c);
  // Decides from the headers, before any body byte is read; nullopt: go on.
  std::optional<HttpRefusal> Authorize(const HttpRequest& head);
  void CountRefusal(const std::string& reason);
  std::string MetricsText();
  // Posts `fn` to the connection's strand unless the server stopped or the connection is gone
  // (then returns false).
  static bool PostTo(const std::shared_ptr<ServerShared>& shared,
                     const std::weak_ptr<Connection>& conn, std::function<void(Connection&)> fn);

  const HttpServerOptions options_;
  ToolBackend& backend_;
  Authenticator auth_;
  std::shared_ptr<ServerShared> shared_;
  std::vector<Route> routes_;
  std::atomic<uint16_t> port_{0};

  net::io_context ioc_;  // declared before everything that owns sockets or timers
  std::optional<tcp::acceptor> acceptor_;
  std::optional<net::steady_timer> evict_timer_;
  std::optional<net::steady_timer> sweep_timer_;  // session decisions past their deadline
  std::optional<net::steady_timer> accept_timer_;
  AcceptBackoff accept_backoff_;  // touched only by the accept chain (one operation at a time)
  std::mutex conns_mu_;
  std::map<Connection*, std::shared_ptr<Connection>> conns_;  // guarded by conns_mu_
  size_t serving_ = 0;  // guarded by conns_mu_: conns_ not being refused (max_connections)
  std::vector<std::thread> threads_;
  bool started_ = false;

 private:
  void DoAccept();
  void OnAcceptError(boost::system::error_code ec);
  void ScheduleEviction();
  void ScheduleSweep();
  void HandleMcp(const HttpRequest& request, std::shared_ptr<HttpResponder> responder);
  void RunModernCalls(McpDecision decision, std::shared_ptr<HttpResponder> responder);
  static std::vector<McpCallSink> OnSessionDecision(const std::shared_ptr<ServerShared>& shared,
                                                    uint64_t pending,
                                                    const std::shared_ptr<HttpResponder>& responder,
                                                    const McpDecision& d);
  void Readyz(std::shared_ptr<HttpResponder> responder);
  const Route* FindRoute(const std::string& method, const std::string& path) const;
};

// Bounded output queue of one connection, shared with its responders: producers on other
// threads wait in WaitWritable while the queue is over the bound. Thread-safe.
struct FlowControl {
  explicit FlowControl(size_t l) : limit(l) {}
  const size_t limit;
  std::mutex mu;
  std::condition_variable cv;
  size_t queued = 0;    // guarded by mu: bytes handed to the connection, not yet written
  bool closed = false;  // guarded by mu

  void Add(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    queued += n;
  }
  void Sub(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queued -= std::min(n, queued);
    }
    cv.notify_all();
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
    }
    cv.notify_all();
  }
  bool Wait(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_until(lock, deadline, [&] { return closed || queued <= limit; });
    return !closed && queued <= limit;
  }
};

// One TCP connection: read request -> dispatch -> write response (possibly streamed) -> repeat.
// All members are touched only on the connection's strand (flow_ is thread-safe).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl* server, bool overloaded)
      : stream_(std::move(socket)),
        server_(server),
        flow_(std::make_shared<FlowControl>(server->options_.max_queued_output_bytes)),
        overloaded_(overloaded) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->overloaded_) return self->RefuseOverloaded();
      self->DoRead();
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    flow_->Close();
    auto hooks = std::move(close_hooks_);
    close_hooks_.clear();
    for (auto& fn : hooks) fn();
    if (abort_timer_) abort_timer_->cancel();
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
    close_hooks_.clear();
    Enqueue(std::move(out), 0);
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
    Enqueue(std::move(out), 0);
  }

  // `chunk.size()` bytes were counted in flow_ by the responder.
  void Write(uint64_t gen, const std::string& chunk) {
    if (gen != gen_ || !streaming_ || complete_ || closed_ || chunk.empty()) {
      flow_->Sub(chunk.size());
      return;
    }
    if (!chunked_) {
      Enqueue(chunk, chunk.size());
      return;
    }
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    Enqueue(size + chunk + "\r\n", chunk.size());
  }

  void Abort(uint64_t gen) {
    if (gen != gen_) return;
    Close();
  }

  // Issue 17: runs `fn` when the connection closes before response `gen` completed. While
  // hooks are set, a wait for readability watches the socket: readable with nothing to read
  // is the client's close (the request's stream ended), so the connection is closed and the
  // hooks run. Data from the client (a pipelined request) ends the watch; it stays buffered
  // in the socket for the next read.
  void OnClose(uint64_t gen, std::function<void()> fn) {
    if (closed_) return fn();
    if (gen != gen_ || complete_) return;
    close_hooks_.push_back(std::move(fn));
    if (!watching_) ArmCloseWatch();  // else the pending wait re-arms for this request
  }

  // A wait armed for an earlier request on this keep-alive connection may complete because
  // this request's bytes arrived (and were read since): it only re-arms for the current one.
  void ArmCloseWatch() {
    watching_ = true;
    const uint64_t armed = gen_;
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), armed](beast::error_code ec) {
          self->watching_ = false;
          if (ec || self->closed_ || self->complete_ || self->close_hooks_.empty()) return;
          if (armed != self->gen_) return self->ArmCloseWatch();
          beast::error_code aec;
          if (self->stream_.socket().available(aec) > 0 && !aec) return;
          self->Close();
        });
  }

  void Finish(uint64_t gen) {
    if (gen != gen_ || !streaming_ || complete_ || closed_) return;
    complete_ = true;
    close_hooks_.clear();
    Enqueue(chunked_ ? "0\r\n\r\n" : "", 0);
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
    // No body limit while the headers are parsed: a Content-Length over every limit is then
    // answered after authentication (401 before 413, so the refusal names the real cause).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    started_ = streaming_ = complete_ = false;
    abort_after_reply_ = false;
    if (requests_ == 0 || buffer_.size() > 0) return ReadHeader();
    // Keep-alive: wait (idle_timeout) for the next request's first byte, then its headers
    // get header_timeout.
    stream_.expires_after(server_->options_.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) {
                                if (ec == beast::error::timeout)
                                  self->server_->CountRefusal("idle_timeout");
                                return self->Close();
                              }
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    stream_.expires_after(server_->options_.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec, "header_timeout");
    ++requests_;
    auto& req = parser_->get();
    head_ = HttpRequest{};
    head_.method = std::string(req.method_string());
    head_.target = std::string(req.target());
    size_t q = head_.target.find('?');
    head_.path = head_.target.substr(0, q);
    if (q != std::string::npos) head_.query = head_.target.substr(q + 1);
    for (const auto& field : req) {
      std::string name = Lower(std::string(field.name_string()));
      auto [it, inserted] = head_.headers.emplace(name, std::string(field.value()));
      if (!inserted) it->second += ", " + std::string(field.value());
    }
    http11_ = req.version() >= 11;
    keep_alive_ = req.keep_alive();
    // Authentication before any body byte is read (and before 100 Continue).
    if (std::optional<HttpRefusal> refusal = server_->Authorize(head_)) {
      return Refuse(std::move(*refusal));
    }
    size_t limit = server_->BodyLimitFor(head_.path);
    body_limit_ = limit;
    auto length = parser_->content_length();
    if (length && *length > limit) return TooLarge(limit);
    parser_->body_limit(limit);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      stream_.expires_after(server_->options_.write_timeout);
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(stream_, net::buffer(*cont),
                       [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                         if (wec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  // Answers a request refused from its headers. When a body is still on the wire, the
  // connection is shut down after the answer without reading it (AbortClose).
  // A small announced body (<= kSmallRefusedBody) is read and dropped instead, so that the
  // connection stays usable (no Expect: 100-continue is answered).
  void Refuse(HttpRefusal r) {
    server_->CountRefusal(r.reason);
    auto length = parser_->content_length();
    bool expects_continue = beast::iequals(parser_->get()[http::field::expect], "100-continue");
    if (!parser_->is_done() && length && *length <= kSmallRefusedBody && !expects_continue &&
        keep_alive_) {
      parser_->body_limit(kSmallRefusedBody);
      stream_.expires_after(server_->options_.read_timeout);
      auto refusal = std::make_shared<HttpRefusal>(std::move(r));
      http::async_read(stream_, buffer_, *parser_,
                       [self = shared_from_this(), refusal](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->parser_->get().body().clear();
                         ++self->gen_;
                         self->Reply(self->gen_, refusal->status, "application/json", refusal->body,
                                     refusal->headers);
                       });
      return;
    }
    if (!parser_->is_done()) {
      keep_alive_ = false;
      abort_after_reply_ = true;
    }
    ++gen_;
    Reply(gen_, r.status, "application/json", r.body, r.headers);
  }

  void RefuseOverloaded() {
    server_->CountRefusal("connections");
    keep_alive_ = false;
    abort_after_reply_ = true;
    ++gen_;
    Reply(gen_, 503, "application/json",
          JsonError("too many connections (server.max_connections = " +
                    std::to_string(server_->options_.max_connections) +
                    "); close idle connections or retry shortly"),
          {{"Retry-After", "1"}});
  }

  void ReadBody() {
    stream_.expires_after(server_->options_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec, "body_timeout");
                       self->OnRequest();
                     });
  }

  void OnReadError(beast::error_code ec, const char* timeout_reason) {
    // The route's limit (a chunked body has no length to refuse it by up front).
    if (ec == http::error::body_limit)
      return TooLarge(body_limit_ ? body_limit_ : server_->options_.max_request_bytes);
    if (ec == http::error::header_limit) {
      server_->CountRefusal("headers_too_large");
      keep_alive_ = false;
      abort_after_reply_ = true;
      ++gen_;
      return Reply(gen_, 431, "application/json", JsonError("request headers too large"), {});
    }
    if (ec == beast::error::timeout) server_->CountRefusal(timeout_reason);
    Close();  // end of stream, timeout, reset, garbage: nothing sensible to answer
  }

  void TooLarge(size_t limit) {
    server_->CountRefusal("body_too_large");
    keep_alive_ = false;  // the unread body is still on the wire
    ++gen_;
    Reply(gen_, 413, "application/json",
          json{{"error", "request body too large (limit " + std::to_string(limit) + " bytes)"}}
              .dump(),
          {});
  }

  void OnRequest() {
    stream_.expires_never();  // the answer may take as long as the tool call
    HttpRequest r = std::move(head_);
    r.body = std::move(parser_->get().body());
    ++gen_;
    server_->Dispatch(r, MakeResponder());
  }

  std::shared_ptr<HttpResponder> MakeResponder();

  // `accounted`: bytes of `data` counted in flow_ (released once written).
  void Enqueue(std::string data, size_t accounted) {
    out_.emplace_back(std::move(data), accounted);
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    if (closed_) return;
    if (out_.empty()) {
      writing_ = false;
      if (complete_) {
        if (keep_alive_) return DoRead();
        return abort_after_reply_ ? AbortClose() : LingerClose();
      }
      stream_.expires_never();
      return;
    }
    writing_ = true;
    stream_.expires_after(server_->options_.write_timeout);
    net::async_write(stream_, net::buffer(out_.front().first),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) {
                         if (ec == beast::error::timeout)
                           self->server_->CountRefusal("write_timeout");
                         return self->Close();  // client left or stopped reading: drop the rest
                       }
                       self->flow_->Sub(self->out_.front().second);
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

  // For a request refused before its body: half-closes and, without reading anything more,
  // closes a moment later (time for the client to read the answer). Reads nothing: an
  // unauthenticated body never reaches kiln's memory.
  void AbortClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    abort_timer_.emplace(stream_.get_executor());
    abort_timer_->expires_after(kAbortGrace);
    abort_timer_->async_wait([self = shared_from_this()](beast::error_code) { self->Close(); });
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  std::shared_ptr<FlowControl> flow_;
  const bool overloaded_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest head_;  // the current request without its body, from OnHeader
  std::deque<std::pair<std::string, size_t>> out_;
  std::optional<net::steady_timer> abort_timer_;
  uint64_t gen_ = 0;
  uint64_t requests_ = 0;
  bool writing_ = false;
  bool started_ = false;
  bool streaming_ = false;
  bool chunked_ = true;
  bool complete_ = false;
  bool keep_alive_ = true;
  bool abort_after_reply_ = false;
  bool http11_ = true;
  size_t body_limit_ = 0;  // the current request's body limit (by route), 0 before its header
  bool closed_ = false;
  std::vector<std::function<void()>> close_hooks_;  // issue 17: see OnClose
  bool watching_ = false;                           // an OnClose readability wait is pending

  friend class HttpServer::Impl;
};

namespace {

class Responder : public HttpResponder {
 public:
  Responder(std::shared_ptr<ServerShared> shared, std::weak_ptr<Connection> conn, uint64_t gen,
            std::shared_ptr<FlowControl> flow)
      : shared_(std::move(shared)), conn_(std::move(conn)), gen_(gen), flow_(std::move(flow)) {}

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
    size_t n = chunk.size();
    flow_->Add(n);
    if (!HttpServer::Impl::PostTo(shared_, conn_,
                                  [=, s = std::move(chunk)](Connection& c) { c.Write(gen, s); }))
      flow_->Sub(n);
  }
  void Finish() override {
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(shared_, conn_, [=](Connection& c) { c.Finish(gen); });
  }
  void Abort() override {
    uint64_t gen = gen_;
    HttpServer::Impl::PostTo(shared_, conn_, [=](Connection& c) { c.Abort(gen); });
  }
  bool WaitWritable(std::chrono::steady_clock::time_point deadline) override {
    return flow_->Wait(deadline);
  }
  void OnClose(std::function<void()> fn) override {
    uint64_t gen = gen_;
    auto once = std::make_shared<std::function<void()>>(std::move(fn));
    if (!HttpServer::Impl::PostTo(shared_, conn_,
                                  [=](Connection& c) { c.OnClose(gen, [once] { (*once)(); }); }))
      (*once)();  // already gone
  }

 private:
  std::shared_ptr<ServerShared> shared_;
  std::weak_ptr<Connection> conn_;
  const uint64_t gen_;
  std::shared_ptr<FlowControl> flow_;
};

}  // namespace

std::shared_ptr<HttpResponder> Connection::MakeResponder() {
  return std::make_shared<Responder>(server_->shared_, weak_from_this(), gen_, flow_);
}

bool HttpServer::Impl::PostTo(const std::shared_ptr<ServerShared>& shared,
                              const std::weak_ptr<Connection>& conn,
                              std::function<void(Connection&)> fn) {
  std::lock_guard<std::mutex> lock(shared->mu);
  if (shared->stopped) return false;
  auto c = conn.lock();
  if (!c) return false;
  net::post(c->stream_.get_executor(), [c, fn = std::move(fn)] { fn(*c); });
  return true;
}

// ---------------------------------------------------------------------------------------------
// HttpServer::Impl

namespace {

McpOptions HandlerOptions(const Config& config, const HttpServerOptions& o) {
  McpOptions h;
  h.server_version = o.version;
  h.instructions = o.instructions;
  // Issue 16: the exact remote ("<domain>" is filled in per session by McpHandler).
  const std::string public_url = config.server.public_url.empty() ? "http://" + config.server.listen
                                                                  : config.server.public_url;
  for (size_t at = h.instructions.find("<kiln>"); at != std::string::npos;
       at = h.instructions.find("<kiln>", at + public_url.size()))
    h.instructions.replace(at, 6, public_url);
  h.max_sessions = o.max_sessions;
  h.max_sessions_per_domain = o.max_sessions_per_domain;
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
  // Issue 17: the session table lives with its owner (kiln: the MCP transport actor).
  if (options_.session_host)
    shared_->sessions = options_.session_host(HandlerOptions(config, options_));
  if (!shared_->sessions) {
    if (options_.session_host) spdlog::error("mcp: no session host; sessions are kept here");
    shared_->sessions =
        std::make_shared<LocalMcpSessionHost>(HandlerOptions(config, options_), backend);
  }
  MetricsRegistry& m = shared_->metrics;
  m.DeclareCounter("kiln_mcp_requests_total", "MCP HTTP requests by JSON-RPC method and status.");
  m.DeclareGauge("kiln_mcp_inflight_calls", "Tool calls running.");
  m.DeclareGauge("kiln_mcp_sessions", "Open MCP sessions.");
  m.DeclareCounter("kiln_mcp_stream_closed_total",
                   "2026-07-28 requests whose stream the client closed before the answer.");
  m.DeclareCounter("kiln_mcp_tool_calls_total", "Finished tool calls by tool and outcome.");
  m.DeclareHistogram("kiln_mcp_tool_call_seconds", "Tool call duration.",
                     {0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600});
  m.DeclareCounter("kiln_http_requests_total", "HTTP requests by route and status.");
  m.DeclareCounter("kiln_http_refusals_total",
                   "Requests and connections refused or closed by a transport limit, by reason.");
  m.DeclareCounter("kiln_http_accept_errors_total", "Failed accepts by error.");
  m.DeclareGauge("kiln_http_connections", "Open HTTP connections.");
  m.DeclareCounter("kiln_mcp_sessions_evicted_total",
                   "Idle MCP sessions evicted for a new one (the domain's or the global session "
                   "cap).");
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
  accept_timer_.emplace(ioc_);
  DoAccept();
  evict_timer_.emplace(ioc_);
  ScheduleEviction();
  sweep_timer_.emplace(ioc_);
  ScheduleSweep();
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
  if (options_.accept_fault) {
    if (int err = options_.accept_fault()) {
      return OnAcceptError(boost::system::error_code(err, boost::system::system_category()));
    }
  }
  acceptor_->async_accept(net::make_strand(ioc_),
                          [this](boost::system::error_code ec, tcp::socket socket) {
                            if (ec == net::error::operation_aborted || !acceptor_->is_open())
                              return;
                            if (ec) return OnAcceptError(ec);
                            accept_backoff_.Reset();
                            // Answers go out as they are written (SSE events, small replies):
                            // no Nagle delay waiting for the client's delayed ACK (~40 ms).
                            boost::system::error_code nd;
                            socket.set_option(tcp::no_delay(true), nd);
                            std::shared_ptr<Connection> c;
                            {
                              std::lock_guard<std::mutex> lock(conns_mu_);
                              // Connections being refused do not count: they close soon.
                              bool over = serving_ >= options_.max_connections;
                              if (!over) ++serving_;
                              c = std::make_shared<Connection>(std::move(socket), this, over);
                              conns_[c.get()] = c;
                            }
                            c->Start();
                            DoAccept();
                          });
}

void HttpServer::Impl::OnAcceptError(boost::system::error_code ec) {
  int err = ec.value();
  const char* name = err == EMFILE    ? "EMFILE"
                     : err == ENFILE  ? "ENFILE"
                     : err == ENOBUFS ? "ENOBUFS"
                     : err == ENOMEM  ? "ENOMEM"
                                      : "other";
  shared_->metrics.Increment("kiln_http_accept_errors_total", {{"error", name}});
  if (!IsAcceptResourceError(err)) {
    // A connection that went away before it was accepted, ...: take the next one at once.
    net::post(ioc_, [this] {
      if (acceptor_->is_open()) DoAccept();
    });
    return;
  }
  // Out of descriptors or memory: the pending connection stays in the backlog, so accepting at
  // once would fail again at once. Retry after a backoff.
  std::chrono::milliseconds delay = accept_backoff_.Next();
  spdlog::warn("http: accept failed ({}); retrying in {} ms", ec.message(), delay.count());
  accept_timer_->expires_after(delay);
  accept_timer_->async_wait([this](boost::system::error_code wait_ec) {
    if (wait_ec || !acceptor_->is_open()) return;
    DoAccept();
  });
}

void HttpServer::Impl::ScheduleEviction() {
  evict_timer_->expires_after(std::chrono::seconds(60));
  evict_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    shared_->sessions->EvictIdle();
    ScheduleEviction();
  });
}

void HttpServer::Impl::ScheduleSweep() {
  sweep_timer_->expires_after(std::chrono::seconds(1));
  sweep_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (auto& r : shared_->pending.Expire(std::chrono::steady_clock::now())) {
      shared_->metrics.Increment("kiln_mcp_requests_total",
                                 {{"method", "undecided"}, {"status", "503"}});
      r->Reply(503, "application/json",
               DumpJson(JsonRpcError(nullptr, rpc::kServerError,
                                     "kiln's MCP transport did not decide this request within " +
                                         std::to_string(options_.session_decision_timeout.count()) +
                                         " s; retry it")),
               {{"Retry-After", "1"}});
    }
    ScheduleSweep();
  });
}

void HttpServer::Impl::Forget(Connection* c) {
  std::shared_ptr<Connection> keep;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(conns_mu_);
  auto it = conns_.find(c);
  if (it != conns_.end()) {
    if (!c->overloaded_) --serving_;
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

HttpRefusal HttpRefusal::Make(int status, const std::string& message, std::string reason,
                              HttpHeaders headers) {
  HttpRefusal r;
  r.status = status;
  r.body = JsonErrorBody(message);
  r.headers = std::move(headers);
  r.reason = std::move(reason);
  return r;
}

void HttpServer::Impl::CountRefusal(const std::string& reason) {
  shared_->metrics.Increment("kiln_http_refusals_total", {{"reason", reason}});
}

namespace {

HttpRefusal Refusal(int status, const std::string& message, std::string reason,
                    HttpHeaders headers = {}) {
  return HttpRefusal::Make(status, message, std::move(reason), std::move(headers));
}

HttpRefusal Unauthenticated(const AuthDecision& auth) {
  return Refusal(auth.status, auth.message, "unauthenticated",
                 {{"WWW-Authenticate", auth.www_authenticate}});
}

}  // namespace

std::optional<HttpRefusal> HttpServer::Impl::Authorize(const HttpRequest& head) {
  const std::string& path = head.path;
  if (options_.metrics_only) {
    if (path == "/metrics" || path == "/healthz") return std::nullopt;
    return Refusal(404, "not found: this listener serves only /metrics and /healthz", "not_found");
  }
  if (path == "/healthz" || path == "/readyz") return std::nullopt;
  if (path == "/metrics") {
    // /metrics names every domain: on the agents' port it is the operator's only.
    AuthDecision auth = auth_.Authenticate(head.Header("authorization").value_or(""));
    if (!auth.ok()) return Unauthenticated(auth);
    if (auth.principal->kind != Principal::Kind::kOperator) {
      return Refusal(403,
                     "/metrics needs the operator token (or use the metrics listener, "
                     "server.metrics_listen)",
                     "forbidden");
    }
    return std::nullopt;
  }
  AuthDecision origin =
      auth_.CheckOrigin(head.Header("origin").value_or(""), head.Header("origin").has_value(),
                        head.Header("host").value_or(""));
  if (!origin.ok()) return Refusal(origin.status, origin.message, "origin");
  if (path == "/mcp") {
    auto count = [&](const char* method, int status) {
      shared_->metrics.Increment("kiln_mcp_requests_total",
                                 {{"method", method}, {"status", std::to_string(status)}});
    };
    AuthDecision auth = auth_.Authenticate(head.Header("authorization").value_or(""));
    if (!auth.ok()) {
      count("unauthenticated", auth.status);
      return Unauthenticated(auth);
    }
    if (auth.principal->kind != Principal::Kind::kDomain) {
      count("forbidden", 403);
      return Refusal(403, "operator tokens cannot use /mcp; use a domain token", "forbidden");
    }
    return std::nullopt;
  }
  const Route* route = FindRoute(head.method, path);
  if (!route) return Refusal(404, "not found: no such endpoint (see /mcp and /git/)", "not_found");
  if (route->authorize) return route->authorize(head);
  AuthDecision auth = auth_.Authenticate(head.Header("authorization").value_or(""));
  if (!auth.ok()) return Unauthenticated(auth);
  return std::nullopt;
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
    return responder->Reply(200, "text/plain; version=0.0.4; charset=utf-8",
                            options_.metrics_text ? options_.metrics_text() : MetricsText());
  }
  if (options_.metrics_only) {
    count("unknown", 404);
    return responder->Reply(404, "application/json", JsonError("not found"));
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
  m.Set("kiln_mcp_sessions", {}, static_cast<double>(shared_->sessions->SessionCount()));
  m.Set("kiln_mcp_inflight_calls", {},
        static_cast<double>(shared_->sessions->InflightCalls() + shared_->front.ModernInflight()));
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    m.Set("kiln_http_connections", {}, static_cast<double>(serving_));
  }
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
  mr.mcp_method = request.Header("mcp-method");  // issue 17 (2026-07-28)
  mr.mcp_name = request.Header("mcp-name");
  McpPreflight pre = shared_->front.Preflight(mr);
  if (pre.answer) {  // decided without session state: a reply, or a 2026-07-28 call
    McpDecision d = std::move(*pre.answer);
    if (d.calls.empty()) {
      count(d.metric_method, d.reply.status);
      return responder->Reply(d.reply.status, d.reply.content_type, std::move(d.reply.body),
                              std::move(d.reply.headers));
    }
    count(d.metric_method, 200);
    return RunModernCalls(std::move(d), std::move(responder));
  }
  // The session revisions: the session host (kiln: the MCP transport actor) decides and
  // dispatches; this layer answers with what it decided, or 503 past the deadline.
  std::shared_ptr<ServerShared> shared = shared_;
  uint64_t pending = shared->pending.Add(
      responder, std::chrono::steady_clock::now() + options_.session_decision_timeout);
  shared->sessions->Handle(std::move(mr), std::move(pre),
                           [shared, pending, responder](const McpDecision& d) {
                             return OnSessionDecision(shared, pending, responder, d);
                           });
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
  // Issue 17 (2026-07-28, one call per run): the call's slot was given back (answered, or
  // its stream closed first), and whether the stream closed first. Guarded by mu.
  bool slot_freed = false;
  bool stream_closed = false;
  std::optional<uint64_t> handle;  // the backend's handle of the call, once known
};

// Starts the response of a decision with calls (the SSE head and the ready answers).
std::shared_ptr<CallRun> StartRun(const std::shared_ptr<ServerShared>& shared,
                                  const McpDecision& decision,
                                  std::shared_ptr<HttpResponder> responder) {
  auto run = std::make_shared<CallRun>(decision, std::to_string(++shared->stream_seq), responder);
  if (run->stream.sse()) {
    responder->StartStream(200, "text/event-stream",
                           {{"Cache-Control", "no-cache, no-store"}, {"X-Accel-Buffering", "no"}});
    std::lock_guard<std::mutex> lock(run->mu);
    responder->Write(run->stream.Start());
  }
  return run;
}

// Where call `i` of `run` reports: progress as events, the answer into the stream (and the
// reply once every call answered), the call's metrics.
McpCallSink SinkFor(const std::shared_ptr<ServerShared>& shared,
                    const std::shared_ptr<CallRun>& run, size_t i, const PendingCall& call) {
  McpCallSink sink;
  sink.progress = [run, i](const ToolProgress& p) {
    std::lock_guard<std::mutex> lock(run->mu);
    run->responder->Write(run->stream.OnProgress(i, p));
  };
  auto start = std::chrono::steady_clock::now();
  sink.done = [run, i, shared, tool = call.call.tool, start](ToolResult result, bool cancelled) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    shared->metrics.Increment("kiln_mcp_tool_calls_total", {{"tool", tool},
                                                            {"outcome", cancelled ? "cancelled"
                                                                        : result.is_error ? "error"
                                                                                          : "ok"}});
    shared->metrics.Observe("kiln_mcp_tool_call_seconds", {{"tool", tool}}, seconds);
    std::lock_guard<std::mutex> lock(run->mu);
    std::string text = run->stream.OnDone(i, result, cancelled);
    if (run->stream.sse()) {
      run->responder->Write(std::move(text));
      if (run->stream.complete()) run->responder->Finish();
    } else if (run->stream.complete()) {
      run->responder->Reply(200, "application/json", run->stream.JsonBody());
    }
  };
  return sink;
}

}  // namespace

std::vector<McpCallSink> HttpServer::Impl::OnSessionDecision(
    const std::shared_ptr<ServerShared>& shared, uint64_t pending,
    const std::shared_ptr<HttpResponder>& responder, const McpDecision& d) {
  auto count = [&](const std::string& method, int status) {
    shared->metrics.Increment("kiln_mcp_requests_total",
                              {{"method", method}, {"status", std::to_string(status)}});
  };
  if (!d.refused_by.empty()) {
    shared->metrics.Increment("kiln_http_refusals_total", {{"reason", d.refused_by}});
  }
  if (d.evicted_sessions) {
    shared->metrics.Increment("kiln_mcp_sessions_evicted_total", {},
                              static_cast<double>(d.evicted_sessions));
  }
  // Past the deadline the client was answered 503: its calls (if any) still run, unheard.
  const bool answer = shared->pending.Take(pending);
  if (d.calls.empty()) {
    if (!answer) return {};
    count(d.metric_method, d.reply.status);
    HttpReply r = d.reply;
    responder->Reply(r.status, r.content_type, std::move(r.body), std::move(r.headers));
    return {};
  }
  if (answer) count(d.metric_method, 200);
  auto run = StartRun(shared, d, responder);
  std::vector<McpCallSink> sinks;
  for (size_t i = 0; i < d.calls.size(); ++i) sinks.push_back(SinkFor(shared, run, i, d.calls[i]));
  return sinks;
}

void HttpServer::Impl::RunModernCalls(McpDecision decision,
                                      std::shared_ptr<HttpResponder> responder) {
  std::shared_ptr<ServerShared> shared = shared_;
  auto run = StartRun(shared, decision, responder);
  // Closing the request's stream cancels the request: its slot is freed and its answer
  // dropped; the domain decides about a build it started (build.cancel_on_disconnect,
  // docs/tools.md). Only calls that wait for work watch the socket: a quick call is answered
  // (or answered `timeout` by the transport actor's deadline) without it, and the watch costs
  // a reactor operation per request (issue 17 bench).
  const bool watch_close =
      std::any_of(decision.calls.begin(), decision.calls.end(),
                  [](const PendingCall& c) { return CallWaitsForWork(c.call); });
  if (watch_close) {
    ToolBackend* backend = &backend_;
    responder->OnClose([run, shared, backend] {
      std::optional<uint64_t> handle;
      {
        std::lock_guard<std::mutex> lock(run->mu);
        if (run->slot_freed) return;
        run->slot_freed = true;
        run->stream_closed = true;
        handle = run->handle;
        shared->front.ModernCallFinished();
        shared->metrics.Increment("kiln_mcp_stream_closed_total", {});
      }
      if (handle) backend->Disconnected(*handle);  // the domain decides about its build
    });
  }
  for (size_t i = 0; i < decision.calls.size(); ++i) {
    const PendingCall& call = decision.calls[i];
    McpCallSink sink = SinkFor(shared, run, i, call);
    auto done = [run, shared, sink_done = std::move(sink.done)](ToolResult result) {
      bool cancelled;
      {
        std::lock_guard<std::mutex> lock(run->mu);
        cancelled = run->stream_closed;
        if (!run->slot_freed) {
          run->slot_freed = true;
          shared->front.ModernCallFinished();
        }
      }
      sink_done(std::move(result), cancelled);
    };
    uint64_t handle = backend_.Call(call.call, std::move(sink.progress), std::move(done));
    bool closed;
    {
      std::lock_guard<std::mutex> lock(run->mu);
      run->handle = handle;
      closed = run->stream_closed && !run->stream.complete();
    }
    if (closed) backend_.Disconnected(handle);  // closed before the handle was known
  }
}

// ---------------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(const Config& config, ToolBackend& backend, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(config, backend, std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddRoute(std::string method, std::string path_prefix, RouteHandler handler,
                          size_t max_body_bytes, RouteAuthorizer authorize) {
  impl_->routes_.push_back({std::move(method), std::move(path_prefix), std::move(handler),
                            max_body_bytes, std::move(authorize)});
}

Status HttpServer::Start() { return impl_->Start(); }
void HttpServer::Stop() { impl_->Stop(); }
uint16_t HttpServer::port() const { return impl_->port_; }
const Authenticator& HttpServer::authenticator() const { return impl_->auth_; }
MetricsRegistry& HttpServer::metrics() { return impl_->shared_->metrics; }
std::string HttpServer::MetricsText() { return impl_->MetricsText(); }

std::chrono::milliseconds AcceptBackoff::Next() {
  next_ = next_.count() == 0 ? std::chrono::milliseconds(50)
                             : std::min(next_ * 2, std::chrono::milliseconds(1000));
  return next_;
}

bool IsAcceptResourceError(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

}  // namespace kiln
