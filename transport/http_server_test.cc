#include "transport/http_server.h"

#include <gtest/gtest.h>

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
  r = c.Send(http::verb::get, "/metrics");
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
  Response m = after.Send(http::verb::get, "/metrics");
  EXPECT_NE(m.body.find("kiln_mcp_inflight_calls 0\n"), std::string::npos) << m.body;
  EXPECT_EQ(Mcp(after, {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, session).status, 200);
}

TEST_F(HttpServerTest, CustomRoutesCanStreamFromOtherThreads) {
  std::thread worker;
  StartServer({}, {}, [&](HttpServer& s) {
    s.AddRoute("GET", "/v1/", [&](const HttpRequest& req, std::shared_ptr<HttpResponder> out) {
      std::string path = req.path;
      worker = std::thread([out, path] {
        out->StartStream(200, "text/plain");
        out->Write("hello ");
        out->Write(path);
        out->Finish();
      });
    });
    s.AddRoute(
        "POST", "/git/",
        [](const HttpRequest& req, std::shared_ptr<HttpResponder> out) {
          out->Reply(200, "text/plain", std::to_string(req.body.size()));
        },
        /*max_body_bytes=*/8 << 20);
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
  auto r = c.Send(http::verb::get, "/v1/domains/demo", "", {{"Authorization", "Bearer demo-token"}});
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

}  // namespace
}  // namespace kiln
