#include "transport/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/sha256.h"
#include "transport/fake_tool_backend.h"
#include "transport/operator_api.h"

namespace kiln {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A synchronous HTTP/1.1 client on one keep-alive connection.
class Client {
 public:
  explicit Client(uint16_t port) : stream_(ioc_) {
    stream_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }

  Response Send(http::verb method, const std::string& target, const std::string& body = "",
                std::map<std::string, std::string> headers = {}) {
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(stream_, buffer_, parser);
    auto& res = parser.get();
    Response r;
    r.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      r.headers[name] = std::string(f.value());
    }
    r.body = res.body();
    return r;
  }

  tcp::socket& socket() { return stream_.socket(); }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

std::vector<json> SseMessages(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find('\n', pos);
    out.push_back(json::parse(body.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

// A route authorizer that lets every request through (routes that do their own checks).
RouteAuthorizer Open() {
  return [](const HttpRequest&) { return std::optional<HttpRefusal>(); };
}

// Sends `head` (request line and headers, no body) on a fresh connection and returns all the
// server sends until it closes. `closed` tells whether it did (a 10 s receive timeout keeps a
// bug from hanging the test). Nothing of the announced body is ever sent.
std::string SendHeadersOnly(uint16_t port, const std::string& head, bool* closed = nullptr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (closed) *closed = n == 0 || errno == ECONNRESET;
      break;
    }
  }
  ::close(fd);
  return out;
}

std::string MetricsBody(HttpServer& server) { return server.MetricsText(); }

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest() {
    DomainConfig demo;
    demo.name = "demo";
    demo.token_sha256 = {Sha256Hex("demo-token")};
    config_.domains["demo"] = demo;
    DomainConfig other;
    other.name = "other";
    other.token_sha256 = {Sha256Hex("other-token")};
    config_.domains["other"] = other;
    config_.operator_token_sha256 = {Sha256Hex("op-token")};
  }

  void StartServer(FakeToolBackend::Options fake = {}, HttpServerOptions options = {},
                   std::function<void(HttpServer&)> before_start = nullptr) {
    backend_ = std::make_unique<FakeToolBackend>(fake);
    options.listen = "127.0.0.1:0";
    server_ = std::make_unique<HttpServer>(config_, *backend_, options);
    if (before_start) before_start(*server_);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NE(server_->port(), 0);
  }

  std::map<std::string, std::string> McpHeaders(const std::string& session = "",
                                                const std::string& token = "demo-token") {
    std::map<std::string, std::string> h = {{"Content-Type", "application/json"},
                                            {"Accept", "application/json, text/event-stream"}};
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    if (!session.empty()) {
      h["MCP-Session-Id"] = session;
      h["MCP-Protocol-Version"] = "2025-11-25";
    }
    return h;
  }

  Response Mcp(Client& c, const json& body, const std::string& session = "",
               const std::string& token = "demo-token") {
    return c.Send(http::verb::post, "/mcp", body.dump(), McpHeaders(session, token));
  }

  std::string Initialize(Client& c, const std::string& token = "demo-token") {
    Response r =
        Mcp(c,
            {{"jsonrpc", "2.0"},
             {"id", 0},
             {"method", "initialize"},
             {"params", {{"protocolVersion", "2025-11-25"}, {"capabilities", json::object()}}}},
            "", token);
    EXPECT_EQ(r.status, 200) << r.body;
    std::string session = r.Header("mcp-session-id");
    EXPECT_EQ(session.size(), 32u);
    EXPECT_EQ(Mcp(c, {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, session, token)
                  .status,
              202);
    return session;
  }

  static json ToolCall(const json& id, const std::string& tool, json args) {
    return {{"jsonrpc", "2.0"},
            {"id", id},
            {"method", "tools/call"},
            {"params", {{"name", tool}, {"arguments", std::move(args)}}}};
  }

  Config config_;
  std::unique_ptr<FakeToolBackend> backend_;  // outlives server_
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, HealthReadinessAndMetrics) {
  StartServer();
  Client c(server_->port());
  Response r = c.Send(http::verb::get, "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json({{"status", "ok"}}));

  r = c.Send(http::verb::get, "/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["ready"], true);
  backend_->set_ready(false);
  r = c.Send(http::verb::get, "/readyz");
  EXPECT_EQ(r.status, 503);
  json ready = json::parse(r.body);
  EXPECT_EQ(ready["ready"], false);
  EXPECT_EQ(ready["checks"]["builder"]["ok"], false);

  std::string session = Initialize(c);
  r = c.Send(http::verb::get, "/metrics", "", {{"Authorization", "Bearer op-token"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.Header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(r.body.find("kiln_mcp_requests_total{method=\"initialize\",status=\"200\"} 1\n"),
            std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("kiln_mcp_sessions 1\n"), std::string::npos);
  EXPECT_NE(r.body.find("kiln_mcp_inflight_calls 0\n"), std::string::npos);
  EXPECT_NE(r.body.find("kiln_fake_calls_total 0\n"), std::string::npos);
  EXPECT_EQ(c.Send(http::verb::post, "/healthz").status, 405);
  EXPECT_EQ(c.Send(http::verb::get, "/nope", "", {{"Authorization", "Bearer demo-token"}}).status,
            404);
}

TEST_F(HttpServerTest, AuthOriginAndSessionErrors) {
  StartServer();
  Client c(server_->port());
  json ping = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}};

  Response r = Mcp(c, ping, "", "");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Header("www-authenticate").rfind("Bearer", 0), 0u);
  EXPECT_EQ(r.Header("www-authenticate").find("invalid_token"), std::string::npos);
  r = Mcp(c, ping, "", "wrong-token");
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.Header("www-authenticate").find("error=\"invalid_token\""), std::string::npos);
  EXPECT_EQ(r.body.find("wrong-token"), std::string::npos);
  r = Mcp(c, ping, "", "op-token");
  EXPECT_EQ(r.status, 403);

  auto headers = McpHeaders();
  headers["Origin"] = "http://evil.example.com";
  EXPECT_EQ(c.Send(http::verb::post, "/mcp", ping.dump(), headers).status, 403);
  headers["Origin"] = "http://localhost:3000";
  headers.erase("Authorization");
  EXPECT_EQ(c.Send(http::verb::post, "/mcp", ping.dump(), headers).status, 401);  // origin ok
  headers = McpHeaders();
  headers["Host"] = "evil.example.com:8700";
  EXPECT_EQ(c.Send(http::verb::post, "/mcp", ping.dump(), headers).status, 403);

  std::string session = Initialize(c);
  EXPECT_EQ(Mcp(c, ping, session).status, 200);
  EXPECT_EQ(Mcp(c, ping).status, 400);                      // no session id
  EXPECT_EQ(Mcp(c, ping, "0123456789abcdef").status, 404);  // unknown
  Client other(server_->port());
  EXPECT_EQ(Mcp(other, ping, session, "other-token").status, 404);  // another domain's session
  EXPECT_EQ(c.Send(http::verb::get, "/mcp", "", McpHeaders(session)).status, 405);
  EXPECT_EQ(c.Send(http::verb::delete_, "/mcp", "", McpHeaders(session, "other-token")).status,
            404);
  EXPECT_EQ(c.Send(http::verb::delete_, "/mcp", "", McpHeaders(session)).status, 204);
  EXPECT_EQ(Mcp(c, ping, session).status, 404);
}

TEST_F(HttpServerTest, BodyOverLimitIs413) {
  HttpServerOptions options;
  options.max_request_bytes = 4096;
  StartServer({}, options);
  Client c(server_->port());
  std::string big = json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", std::string(10000, 'x')}}.dump();
  Response r = c.Send(http::verb::post, "/mcp", big, McpHeaders());
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("limit 4096 bytes"), std::string::npos) << r.body;
  // The server keeps serving other connections.
  Client c2(server_->port());
  EXPECT_EQ(c2.Send(http::verb::get, "/healthz").status, 200);
}

TEST_F(HttpServerTest, SlowBuildDoesNotDelayStatusOnAnotherConnectionAndCancelReachesIt) {
  StartServer();  // builds take 2 s unless cancelled
  Client a(server_->port());
  std::string session = Initialize(a);
  auto build = std::async(std::launch::async, [&] {
    return Mcp(a, ToolCall(41, "build_candidate", {{"candidate", "main"}}), session);
  });
  ASSERT_TRUE(WaitFor([&] { return backend_->calls().size() == 1; }));
  uint64_t build_handle = backend_->handle_of(0);

  Client b(server_->port());
  Response status = Mcp(b, ToolCall(42, "candidate_status", {{"candidate", "main"}}), session);
  ASSERT_EQ(status.status, 200);
  std::vector<json> msgs = SseMessages(status.body);
  ASSERT_EQ(msgs.size(), 1u) << status.body;
  EXPECT_EQ(msgs[0]["id"], 42);
  EXPECT_EQ(msgs[0]["result"]["structuredContent"]["state"], "idle");
  // The status answer arrived while the build was still running.
  EXPECT_EQ(backend_->finished().count(build_handle), 0u);
  EXPECT_EQ(build.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  // Cancel routes to the running build of this session.
  Response cancel = Mcp(b,
                        {{"jsonrpc", "2.0"},
                         {"method", "notifications/cancelled"},
                         {"params", {{"requestId", 41}, {"reason", "test"}}}},
                        session);
  EXPECT_EQ(cancel.status, 202);
  Response built = build.get();
  EXPECT_EQ(backend_->cancelled(), std::vector<uint64_t>{build_handle});
  EXPECT_EQ(built.status, 200);
  for (const json& m : SseMessages(built.body)) {
    EXPECT_FALSE(m.contains("id")) << "a cancelled call gets no response: " << m.dump();
  }
  // The fake records "finished" just after its done callback returned.
  EXPECT_TRUE(WaitFor([&] { return backend_->finished().count(build_handle) == 1; }));
}

TEST_F(HttpServerTest, SseProgressThenResultThenEnd) {
  FakeToolBackend::Options fake;
  fake.build_duration = std::chrono::milliseconds(300);
  fake.progress_interval = std::chrono::milliseconds(50);
  StartServer(fake);
  Client c(server_->port());
  std::string session = Initialize(c);
  ASSERT_EQ(Mcp(c,
                {{"jsonrpc", "2.0"},
                 {"id", 1},
                 {"method", "logging/setLevel"},
                 {"params", {{"level", "info"}}}},
                session)
                .status,
            200);
  json call = ToolCall("b-1", "build_candidate", {{"candidate", "main"}});
  call["params"]["_meta"] = {{"progressToken", 77}};
  Response r = Mcp(c, call, session);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "text/event-stream");
  std::vector<json> msgs = SseMessages(r.body);
  ASSERT_GE(msgs.size(), 3u) << r.body;
  double last = -1;
  int progress = 0, logs = 0;
  for (size_t i = 0; i + 1 < msgs.size(); ++i) {
    if (msgs[i]["method"] == "notifications/progress") {
      EXPECT_EQ(msgs[i]["params"]["progressToken"], 77);
      EXPECT_GT(msgs[i]["params"]["progress"].get<double>(), last);
      last = msgs[i]["params"]["progress"].get<double>();
      ++progress;
    } else {
      EXPECT_EQ(msgs[i]["method"], "notifications/message");
      EXPECT_EQ(msgs[i]["params"]["level"], "info");
      ++logs;
    }
  }
  EXPECT_GE(progress, 2);
  EXPECT_EQ(logs, progress);
  const json& result = msgs.back();
  EXPECT_EQ(result["id"], "b-1");
  EXPECT_EQ(result["result"]["isError"], false);
  EXPECT_EQ(result["result"]["structuredContent"]["status"], "succeeded");
  // The connection is reusable after the stream ended.
  EXPECT_EQ(Mcp(c, {{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}}, session).status, 200);
}

TEST_F(HttpServerTest, FailedBuildIsAnIsErrorResultInJsonMode) {
  FakeToolBackend::Options fake;
  fake.build_duration = std::chrono::milliseconds(50);
  StartServer(fake);
  Client c(server_->port());
  std::string session = Initialize(c);
  auto headers = McpHeaders(session);
  headers["Accept"] = "application/json";
  Response r = c.Send(http::verb::post, "/mcp",
                      ToolCall(5, "build_candidate", {{"candidate", "broken"}}).dump(), headers);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "application/json");
  json body = json::parse(r.body);
  EXPECT_EQ(body["id"], 5);
  EXPECT_EQ(body["result"]["isError"], true);
  EXPECT_EQ(body["result"]["structuredContent"]["diagnostics"][0]["message"], "undefined: x");
}

TEST_F(HttpServerTest, ClientDisconnectMidCallDoesNotCancelOrCrash) {
  FakeToolBackend::Options fake;
  fake.build_duration = std::chrono::milliseconds(200);
  fake.progress_interval = std::chrono::milliseconds(20);
  StartServer(fake);
  Client setup(server_->port());
  std::string session = Initialize(setup);
  {
    Client gone(server_->port());
    http::request<http::string_body> req(http::verb::post, "/mcp", 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : McpHeaders(session)) req.set(k, v);
    req.body() = ToolCall(9, "build_candidate", {{"candidate", "main"}}).dump();
    req.prepare_payload();
    http::write(gone.socket(), req);
    ASSERT_TRUE(WaitFor([&] { return backend_->calls().size() == 1; }));
  }  // closes the socket mid-call
  ASSERT_TRUE(WaitFor([&] { return backend_->finished().size() == 1; }));
  EXPECT_TRUE(backend_->cancelled().empty());
  Client after(server_->port());
  Response m = after.Send(http::verb::get, "/metrics", "", {{"Authorization", "Bearer op-token"}});
  EXPECT_NE(m.body.find("kiln_mcp_inflight_calls 0\n"), std::string::npos) << m.body;
  EXPECT_EQ(Mcp(after, {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, session).status, 200);
}

TEST_F(HttpServerTest, CustomRoutesCanStreamFromOtherThreads) {
  std::thread worker;
  StartServer({}, {}, [&](HttpServer& s) {
    s.AddRoute(
        "GET", "/v1/",
        [&](const HttpRequest& req, std::shared_ptr<HttpResponder> out) {
          std::string path = req.path;
          worker = std::thread([out, path] {
            out->StartStream(200, "text/plain");
            out->Write("hello ");
            out->Write(path);
            out->Finish();
          });
        },
        0, Open());
    s.AddRoute(
        "POST", "/git/",
        [](const HttpRequest& req, std::shared_ptr<HttpResponder> out) {
          out->Reply(200, "text/plain", std::to_string(req.body.size()));
        },
        /*max_body_bytes=*/8 << 20, Open());
  });
  Client c(server_->port());
  Response r = c.Send(http::verb::get, "/v1/status");
  worker.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello /v1/status");
  // A route may accept more than the MCP body limit.
  r = c.Send(http::verb::post, "/git/demo.git/git-receive-pack", std::string(3 << 20, 'p'));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, std::to_string(3 << 20));
}

TEST_F(HttpServerTest, StopClosesOpenStreamsAndLateCallbacksAreHarmless) {
  FakeToolBackend::Options fake;
  fake.build_duration = std::chrono::milliseconds(500);
  fake.progress_interval = std::chrono::milliseconds(50);
  StartServer(fake);
  Client c(server_->port());
  std::string session = Initialize(c);
  auto build = std::async(std::launch::async, [&] {
    try {
      Mcp(c, ToolCall(1, "build_candidate", {{"candidate", "main"}}), session);
      return false;
    } catch (const std::exception&) {
      return true;  // the stream was cut
    }
  });
  ASSERT_TRUE(WaitFor([&] { return backend_->calls().size() == 1; }));
  server_->Stop();
  EXPECT_TRUE(build.get());
  server_.reset();
  // The backend finishes the call after the server is gone; nothing may crash.
  ASSERT_TRUE(WaitFor([&] { return backend_->finished().size() == 1; }));
}

// ---- /v1 operator API (transport/operator_api.h) ----

TEST(OperatorRouteTest, ParsesPathsAndMethods) {
  EXPECT_EQ(ParseOperatorRoute("GET", "/v1/domains/demo").action, "domain_status");
  EXPECT_EQ(ParseOperatorRoute("GET", "/v1/domains/demo/").action, "domain_status");
  auto a = ParseOperatorRoute("POST", "/v1/domains/demo/apply");
  EXPECT_EQ(a.action, "apply");
  EXPECT_EQ(a.domain, "demo");
  EXPECT_EQ(ParseOperatorRoute("GET", "/v1/domains/demo/apply").status, 405);
  EXPECT_EQ(ParseOperatorRoute("POST", "/v1/domains/demo").status, 405);
  EXPECT_EQ(ParseOperatorRoute("GET", "/v1/domains/../etc").status, 404);
  EXPECT_EQ(ParseOperatorRoute("GET", "/v1/other").status, 404);
  EXPECT_EQ(ParseOperatorRoute("POST", "/v1/domains/demo/apply/x").status, 404);
}

TEST_F(HttpServerTest, OperatorApiAuthRoutesAndForwards) {
  std::unique_ptr<OperatorApi> api;
  StartServer({}, {}, [&](HttpServer& s) {
    api = std::make_unique<OperatorApi>(config_, *backend_);
    api->Register(s);
  });
  Client c(server_->port());
  EXPECT_EQ(c.Send(http::verb::get, "/v1/domains/demo").status, 401);
  auto r =
      c.Send(http::verb::get, "/v1/domains/demo", "", {{"Authorization", "Bearer demo-token"}});
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body.find("demo-token"), std::string::npos);
  std::map<std::string, std::string> op = {{"Authorization", "Bearer op-token"}};
  EXPECT_EQ(c.Send(http::verb::get, "/v1/domains/nope", "", op).status, 404);
  r = c.Send(http::verb::get, "/v1/domains/demo/apply", "", op);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "POST");
  EXPECT_EQ(c.Send(http::verb::post, "/v1/domains/demo/apply", "[1,2", op).status, 400);
  EXPECT_EQ(c.Send(http::verb::post, "/v1/domains/demo/apply", "[1]", op).status, 400);
  EXPECT_TRUE(backend_->calls().empty());
  c.Send(http::verb::post, "/v1/domains/demo/apply", R"({"candidate":"c1"})", op);
  c.Send(http::verb::get, "/v1/domains/other", "", op);
  auto calls = backend_->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].domain, "demo");
  EXPECT_EQ(calls[0].tool, "apply");
  EXPECT_EQ(calls[0].arguments, json({{"candidate", "c1"}}));
  EXPECT_EQ(calls[1].domain, "other");
  EXPECT_EQ(calls[1].tool, "domain_status");
}

// ---------------------------------------------------------------------------------------------
// HTTP transport caps (issue 15)

TEST_F(HttpServerTest, UnauthenticatedBodiesAreRefusedFromTheHeadersAlone) {
  std::atomic<int> reached{0};
  StartServer({}, {}, [&](HttpServer& s) {
    // A route without an authorizer needs a valid bearer token before its body.
    s.AddRoute(
        "POST", "/v1/",
        [&](const HttpRequest&, std::shared_ptr<HttpResponder> out) {
          ++reached;
          out->Reply(200, "text/plain", "ok");
        },
        64 << 20);
  });
  const std::string huge = "Content-Length: 104857600\r\n";  // 100 MiB that never come
  struct Case {
    std::string head;
    int status;
  };
  std::vector<Case> cases = {
      {"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + huge +
           "\r\n",
       401},
      {"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n", 401},
      {"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n" + huge + "\r\n",
       401},
      {"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer op-token\r\n" + huge +
           "\r\n",
       403},
      {"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n" + huge + "\r\n", 401},
      {"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + huge + "\r\n", 401},
      {"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer demo-token\r\n" + huge +
           "\r\n",
       404},
      {"POST /mcp HTTP/1.1\r\nHost: evil.example.com\r\n" + huge + "\r\n", 403},
  };
  for (const Case& c : cases) {
    bool closed = false;
    std::string answer = SendHeadersOnly(server_->port(), c.head, &closed);
    // The answer came although not one body byte was sent, and the connection was closed.
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(c.status) + " ", 0), 0u)
        << c.head << "\n->\n"
        << answer;
    EXPECT_TRUE(closed) << c.head;
    EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
    EXPECT_EQ(answer.find("100 Continue"), std::string::npos) << answer;
    if (c.status == 401) {
      EXPECT_NE(answer.find("WWW-Authenticate: Bearer"), std::string::npos) << answer;
    }
  }
  EXPECT_EQ(reached.load(), 0);
  EXPECT_EQ(backend_->calls().size(), 0u);
  EXPECT_GE(server_->metrics().Value("kiln_http_refusals_total", {{"reason", "unauthenticated"}}),
            5);

  // With a valid token, 100-continue is answered and the body is then read.
  bool closed = false;
  std::string answer =
      SendHeadersOnly(server_->port(),
                      "POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer op-token\r\n"
                      "Expect: 100-continue\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
                      &closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ", 0), 0u) << answer;
  EXPECT_EQ(reached.load(), 1);
}

TEST_F(HttpServerTest, ConnectionsOverTheCapGetA503) {
  HttpServerOptions options;
  options.max_connections = 2;
  StartServer({}, options);
  auto a = std::make_unique<Client>(server_->port());
  Client b(server_->port());
  EXPECT_EQ(a->Send(http::verb::get, "/healthz").status, 200);
  EXPECT_EQ(b.Send(http::verb::get, "/healthz").status, 200);
  bool closed = false;
  std::string answer =
      SendHeadersOnly(server_->port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 503 ", 0), 0u) << answer;
  EXPECT_NE(answer.find("server.max_connections"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
  EXPECT_TRUE(closed);
  EXPECT_EQ(server_->metrics().Value("kiln_http_refusals_total", {{"reason", "connections"}}), 1);
  EXPECT_EQ(b.Send(http::verb::get, "/healthz").status, 200);  // the open ones still work
  // One connection freed: a new one is served.
  a.reset();
  ASSERT_TRUE(WaitFor([&] {
    return SendHeadersOnly(server_->port(),
                           "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
               .rfind("HTTP/1.1 200 ", 0) == 0;
  }));
}

TEST(AcceptBackoffTest, DoublesFrom50msTo1sAndResets) {
  AcceptBackoff b;
  std::vector<long> seen;
  for (int i = 0; i < 7; ++i) seen.push_back(static_cast<long>(b.Next().count()));
  EXPECT_EQ(seen, (std::vector<long>{50, 100, 200, 400, 800, 1000, 1000}));
  b.Reset();
  EXPECT_EQ(b.Next().count(), 50);
  EXPECT_TRUE(IsAcceptResourceError(EMFILE));
  EXPECT_TRUE(IsAcceptResourceError(ENFILE));
  EXPECT_TRUE(IsAcceptResourceError(ENOBUFS));
  EXPECT_FALSE(IsAcceptResourceError(ECONNABORTED));
}

TEST_F(HttpServerTest, AcceptErrorsBackOffInsteadOfSpinning) {
  std::atomic<bool> failing{true};
  std::atomic<int> attempts{0};
  HttpServerOptions options;
  options.accept_fault = [&] {
    ++attempts;
    return failing.load() ? EMFILE : 0;
  };
  StartServer({}, options);
  // A spinning accept loop would try hundreds of thousands of times in this while.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  failing = false;
  int during = attempts.load();
  EXPECT_GE(during, 2);
  EXPECT_LE(during, 8);  // 50 + 100 + 200 ms of backoff fit in 400 ms: about 4 attempts
  // Once descriptors are back, connections are accepted again (after the current backoff).
  Client c(server_->port());
  EXPECT_EQ(c.Send(http::verb::get, "/healthz").status, 200);
  EXPECT_GE(server_->metrics().Value("kiln_http_accept_errors_total", {{"error", "EMFILE"}}),
            during - 1);
}

TEST_F(HttpServerTest, SlowHeadersAndIdleKeepAliveConnectionsTimeOut) {
  HttpServerOptions options;
  options.header_timeout = std::chrono::seconds(1);
  options.idle_timeout = std::chrono::seconds(1);
  StartServer({}, options);
  // Slowloris: headers that never end. The server closes without answering.
  bool closed = false;
  std::string answer =
      SendHeadersOnly(server_->port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(answer, "");
  EXPECT_TRUE(WaitFor([&] {
    return server_->metrics().Value("kiln_http_refusals_total", {{"reason", "header_timeout"}}) ==
           1;
  }));
  // An idle keep-alive connection is closed after its request was served.
  closed = false;
  answer =
      SendHeadersOnly(server_->port(), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 ", 0), 0u) << answer;
  EXPECT_TRUE(closed);
  // (beast closes the socket before the handler that counts runs)
  EXPECT_TRUE(WaitFor([&] {
    return server_->metrics().Value("kiln_http_refusals_total", {{"reason", "idle_timeout"}}) == 1;
  }));
}

TEST_F(HttpServerTest, OneDomainFillingItsSessionCapDoesNotAffectAnother) {
  HttpServerOptions options;
  options.max_sessions = 8;
  options.max_sessions_per_domain = 3;
  StartServer({}, options);
  Client c(server_->port());
  std::vector<std::string> demo;
  for (int i = 0; i < 20; ++i) demo.push_back(Initialize(c));  // all 200: own LRU evicted
  Client o(server_->port());
  std::string other = Initialize(o, "other-token");
  json ping = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}};
  EXPECT_EQ(Mcp(o, ping, other, "other-token").status, 200);
  EXPECT_EQ(Mcp(c, ping, demo.back()).status, 200);
  EXPECT_EQ(Mcp(c, ping, demo.front()).status, 404);  // evicted
  EXPECT_GE(server_->metrics().Value("kiln_mcp_sessions_evicted_total"), 17);
}

// Issue 17: session requests are decided by the session host (kiln: the MCP transport actor);
// one it never decides is answered 503 at the deadline, and the connection serves on.
class SilentSessionHost : public McpSessionHost {
 public:
  void Handle(McpRequest, McpPreflight, McpDecidedFn decided) override {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(std::move(decided));  // never called
  }
  void EvictIdle() override {}
  size_t SessionCount() const override { return 0; }
  size_t InflightCalls() const override { return 0; }
  std::mutex mu;
  std::vector<McpDecidedFn> held;
};

TEST_F(HttpServerTest, ASessionRequestTheHostNeverDecidesIsAnswered503AtTheDeadline) {
  auto host = std::make_shared<SilentSessionHost>();
  HttpServerOptions options;
  options.session_decision_timeout = std::chrono::seconds(1);
  options.session_host = [host](McpOptions) { return host; };
  StartServer({}, options);
  Client c(server_->port());
  auto start = std::chrono::steady_clock::now();
  Response r =
      Mcp(c, {{"jsonrpc", "2.0"},
              {"id", 0},
              {"method", "initialize"},
              {"params", {{"protocolVersion", "2025-11-25"}, {"capabilities", json::object()}}}});
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("did not decide"), std::string::npos) << r.body;
  EXPECT_GE(waited, std::chrono::milliseconds(900));
  EXPECT_LT(waited, std::chrono::seconds(5));
  // A 2026-07-28 request needs no session host: it is answered at once on the same connection.
  Response d = c.Send(http::verb::post, "/mcp",
                      json{{"jsonrpc", "2.0"},
                           {"id", 1},
                           {"method", "server/discover"},
                           {"params",
                            {{"_meta",
                              {{"io.modelcontextprotocol/protocolVersion", "2026-07-28"},
                               {"io.modelcontextprotocol/clientCapabilities", json::object()}}}}}}
                          .dump(),
                      {{"Content-Type", "application/json"},
                       {"Accept", "application/json, text/event-stream"},
                       {"Authorization", "Bearer demo-token"},
                       {"MCP-Protocol-Version", "2026-07-28"},
                       {"Mcp-Method", "server/discover"}});
  EXPECT_EQ(d.status, 200) << d.body;
  // A decision that comes after the deadline is harmless (the client already has its 503).
  std::lock_guard<std::mutex> l(host->mu);
  ASSERT_EQ(host->held.size(), 1u);
  McpDecision late;
  late.reply.status = 200;
  EXPECT_TRUE(host->held[0](late).empty());
}

TEST_F(HttpServerTest, ASlowReaderBlocksTheProducerAndLosesItsConnection) {
  std::atomic<size_t> produced{0};
  std::atomic<bool> gave_up{false};
  std::thread worker;
  HttpServerOptions options;
  options.max_queued_output_bytes = 256 << 10;
  options.write_timeout = std::chrono::seconds(2);
  StartServer({}, options, [&](HttpServer& s) {
    s.AddRoute(
        "GET", "/v1/",
        [&](const HttpRequest&, std::shared_ptr<HttpResponder> out) {
          worker = std::thread([&, out] {
            out->StartStream(200, "application/octet-stream");
            const std::string chunk(64 << 10, 'x');
            // Up to 1 GiB unless the connection pushes back.
            while (produced < (size_t{1} << 30)) {
              if (!out->WaitWritable(std::chrono::steady_clock::now() + std::chrono::seconds(5))) {
                gave_up = true;
                break;
              }
              out->Write(chunk);
              produced += chunk.size();
            }
            out->Abort();
          });
        },
        0, Open());
  });
  // A client that asks and then reads nothing.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 64 << 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(server_->port());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string req = "GET /v1/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  ASSERT_TRUE(WaitFor([&] { return gave_up.load(); }, std::chrono::milliseconds(30000)));
  worker.join();
  // What left the producer is bounded by the queue plus the kernel's socket buffers.
  EXPECT_LT(produced.load(), size_t{64} << 20) << produced.load();
  EXPECT_TRUE(WaitFor([&] {
    return server_->metrics().Value("kiln_http_refusals_total", {{"reason", "write_timeout"}}) == 1;
  }));
  ::close(fd);
}

TEST_F(HttpServerTest, MetricsNeedTheOperatorTokenOnTheMainPortAndNothingNamesADomain) {
  StartServer();
  Client c(server_->port());
  Initialize(c);
  Response r = c.Send(http::verb::get, "/metrics");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Header("www-authenticate").rfind("Bearer", 0), 0u);
  Client c2(server_->port());
  r = c2.Send(http::verb::get, "/metrics", "", {{"Authorization", "Bearer demo-token"}});
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("server.metrics_listen"), std::string::npos);
  Client c3(server_->port());
  r = c3.Send(http::verb::get, "/metrics", "", {{"Authorization", "Bearer op-token"}});
  EXPECT_EQ(r.status, 200);
  // The agents' port: health, readiness and error bodies name no domain.
  for (const char* path : {"/healthz", "/readyz", "/nope", "/git/other.git/info/refs"}) {
    Client k(server_->port());
    Response e = k.Send(http::verb::get, path, "", {{"Authorization", "Bearer demo-token"}});
    EXPECT_EQ(e.body.find("other"), std::string::npos) << path << ": " << e.body;
    EXPECT_EQ(e.body.find("demo"), std::string::npos) << path << ": " << e.body;
  }

  // The operator's metrics listener: no token, the main server's series, nothing else.
  HttpServerOptions mo;
  mo.listen = "127.0.0.1:0";
  mo.metrics_only = true;
  HttpServer* main = server_.get();
  mo.metrics_text = [main] { return MetricsBody(*main); };
  HttpServer metrics(config_, *backend_, mo);
  ASSERT_TRUE(metrics.Start().ok());
  Client m(metrics.port());
  r = m.Send(http::verb::get, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("kiln_mcp_sessions 1\n"), std::string::npos) << r.body;
  EXPECT_EQ(m.Send(http::verb::get, "/healthz").status, 200);
  Client m2(metrics.port());
  EXPECT_EQ(m2.Send(http::verb::post, "/mcp", "{}", McpHeaders()).status, 404);
  Client m3(metrics.port());
  EXPECT_EQ(m3.Send(http::verb::get, "/readyz").status, 404);
  metrics.Stop();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Issue 17: a 2026-07-28 request whose connection closes mid-build is cancelled at once (its
// slot is freed before the build ends), while the build itself is not cancelled.
TEST_F(HttpServerTest, ModernStreamClosedMidBuildFreesItsSlotAndKeepsTheBuild) {
  FakeToolBackend::Options fake;
  fake.build_duration = std::chrono::milliseconds(3000);
  fake.progress_interval = std::chrono::milliseconds(50);
  StartServer(fake);
  json meta = {{"io.modelcontextprotocol/protocolVersion", "2026-07-28"},
               {"io.modelcontextprotocol/clientCapabilities", json::object()}};
  json body = ToolCall(5, "build_candidate", {{"candidate", "main"}});
  body["params"]["_meta"] = meta;
  body["params"]["_meta"]["progressToken"] = "p";
  std::map<std::string, std::string> headers = McpHeaders();
  headers["MCP-Protocol-Version"] = "2026-07-28";
  headers["Mcp-Method"] = "tools/call";
  headers["Mcp-Name"] = "build_candidate";
  auto inflight = [&] {
    return MetricsBody(*server_).find("kiln_mcp_inflight_calls 1\n") != std::string::npos;
  };
  {
    Client gone(server_->port());
    http::request<http::string_body> req(http::verb::post, "/mcp", 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body.dump();
    req.prepare_payload();
    http::write(gone.socket(), req);
    ASSERT_TRUE(WaitFor([&] { return backend_->calls().size() == 1; }));
    ASSERT_TRUE(WaitFor(inflight));
  }  // closes the stream mid-build
  ASSERT_TRUE(WaitFor([&] {
    return MetricsBody(*server_).find("kiln_mcp_inflight_calls 0\n") != std::string::npos;
  }));
  EXPECT_TRUE(backend_->finished().empty()) << "the slot was freed before the build ended";
  EXPECT_NE(MetricsBody(*server_).find("kiln_mcp_stream_closed_total 1\n"), std::string::npos);
  ASSERT_TRUE(WaitFor([&] { return backend_->finished().size() == 1; }));
  EXPECT_TRUE(backend_->cancelled().empty()) << "the build keeps running for others to join";

  // The same call on a connection that stays open answers as SSE with resultType.
  Client c(server_->port());
  Response r = c.Send(http::verb::post, "/mcp", body.dump(), headers);
  ASSERT_EQ(r.status, 200);
  std::vector<json> events = SseMessages(r.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["result"]["resultType"], "complete");
  EXPECT_EQ(events.back()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "kiln");
  EXPECT_EQ(Mcp(c, {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}).status, 400)
      << "a session-less legacy request still needs its session";
}

}  // namespace
}  // namespace kiln
