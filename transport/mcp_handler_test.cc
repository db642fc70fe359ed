#include "transport/mcp_handler.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

using nlohmann::json;

class McpHandlerTest : public ::testing::Test {
 protected:
  McpHandlerTest() : handler_(MakeOptions()) {}

  McpHandler::Options MakeOptions() {
    McpHandler::Options o;
    o.server_version = "9.9.9";
    o.instructions = "Build with build_candidate.";
    o.max_sessions = 3;
    o.max_calls_per_session = 2;
    o.tool_aliases["demo"] = {{"build_epp", "build_candidate"}, {"ghost", "no_such_tool"}};
    o.clock = [this] { return now_; };
    o.new_session_id = [this] { return "s" + std::to_string(++ids_); };
    return o;
  }

  McpRequest Post(const std::string& body, std::optional<std::string> session = std::nullopt) {
    McpRequest r;
    r.http_method = "POST";
    r.domain = "demo";
    r.accept = "application/json, text/event-stream";
    r.content_type = "application/json";
    r.session_id = std::move(session);
    r.body = body;
    return r;
  }

  std::string Initialize(const std::string& version = "2025-11-25",
                         const std::string& domain = "demo") {
    McpRequest r = Post(json{{"jsonrpc", "2.0"},
                             {"id", 0},
                             {"method", "initialize"},
                             {"params",
                              {{"protocolVersion", version},
                               {"capabilities", json::object()},
                               {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}}
                            .dump());
    r.domain = domain;
    McpDecision d = handler_.Handle(r);
    EXPECT_EQ(d.reply.status, 200) << d.reply.body;
    return d.session_id;
  }

  McpDecision Send(const json& message, const std::string& session) {
    return handler_.Handle(Post(message.dump(), session));
  }

  static json Body(const McpDecision& d) { return json::parse(d.reply.body); }

  static json Call(const json& id, const std::string& tool, json args = json::object()) {
    return {{"jsonrpc", "2.0"},
            {"id", id},
            {"method", "tools/call"},
            {"params", {{"name", tool}, {"arguments", std::move(args)}}}};
  }

  std::chrono::steady_clock::time_point now_{};
  int ids_ = 0;
  McpHandler handler_;
};

TEST_F(McpHandlerTest, InitializeNegotiatesVersionAndReturnsSession) {
  McpDecision d = handler_.Handle(Post(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}})"));
  ASSERT_EQ(d.reply.status, 200);
  json b = Body(d);
  EXPECT_EQ(b["id"], 1);
  EXPECT_EQ(b["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(b["result"]["serverInfo"]["name"], "kiln");
  EXPECT_EQ(b["result"]["serverInfo"]["version"], "9.9.9");
  EXPECT_EQ(b["result"]["capabilities"]["tools"]["listChanged"], false);
  EXPECT_TRUE(b["result"]["capabilities"]["logging"].is_object());
  EXPECT_EQ(b["result"]["instructions"], "Build with build_candidate.");
  ASSERT_EQ(d.reply.headers.size(), 1u);
  EXPECT_EQ(d.reply.headers[0].first, "MCP-Session-Id");
  EXPECT_EQ(d.reply.headers[0].second, "s1");
  EXPECT_EQ(handler_.SessionCount(), 1u);
}

TEST_F(McpHandlerTest, InitializeWithUnsupportedVersionAnswersLatest) {
  McpDecision d = handler_.Handle(Post(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01"}})"));
  EXPECT_EQ(Body(d)["result"]["protocolVersion"], "2025-11-25");
}

TEST_F(McpHandlerTest, InitializeWithoutProtocolVersionIsInvalidParams) {
  McpDecision d =
      handler_.Handle(Post(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})"));
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
  EXPECT_EQ(handler_.SessionCount(), 0u);
}

TEST_F(McpHandlerTest, DefaultSessionIdsAre128BitHexAndDistinct) {
  McpHandler real(McpHandler::Options{});
  std::string body =
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}})";
  std::string a = real.Handle(Post(body)).session_id;
  std::string b = real.Handle(Post(body)).session_id;
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST_F(McpHandlerTest, MalformedJsonIsParseErrorWithNullId) {
  std::string s = Initialize();
  McpDecision d = handler_.Handle(Post("{\"jsonrpc\":\"2.0\",", s));
  EXPECT_EQ(d.reply.status, 400);
  json b = Body(d);
  EXPECT_EQ(b["error"]["code"], rpc::kParseError);
  EXPECT_TRUE(b["id"].is_null());
}

TEST_F(McpHandlerTest, TooDeepJsonIsRejectedClearly) {
  std::string s = Initialize();
  std::string deep(100, '[');
  deep += std::string(100, ']');
  McpDecision d = handler_.Handle(Post(deep, s));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_NE(Body(d)["error"]["message"].get<std::string>().find("deeper than 64"),
            std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[[[[\"[[["})"), 1);
}

TEST_F(McpHandlerTest, InvalidRequests) {
  std::string s = Initialize();
  struct Case {
    std::string body;
    json expected_id;
  } cases[] = {
      {R"("just a string")", nullptr},
      {R"(42)", nullptr},
      {R"({"jsonrpc":"1.0","id":5,"method":"ping"})", 5},
      {R"({"id":5,"method":"ping"})", 5},
      {R"({"jsonrpc":"2.0","id":5})", 5},
      {R"({"jsonrpc":"2.0","id":5,"method":7})", 5},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", nullptr},
      {R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", nullptr},
      {R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})", nullptr},
      {R"({"jsonrpc":"2.0","id":true,"method":"ping"})", nullptr},
      // An integer too large for 64 bits parses as a float: not a valid id.
      {R"({"jsonrpc":"2.0","id":100000000000000000000000000000,"method":"ping"})", nullptr},
      {R"({"jsonrpc":"2.0","id":")" + std::string(2000, 'x') + R"(","method":"ping"})", nullptr},
  };
  for (const auto& c : cases) {
    McpDecision d = handler_.Handle(Post(c.body, s));
    EXPECT_EQ(d.reply.status, 400) << c.body;
    json b = Body(d);
    EXPECT_EQ(b["error"]["code"], rpc::kInvalidRequest) << c.body;
    EXPECT_EQ(b["id"], c.expected_id) << c.body;
  }
}

TEST_F(McpHandlerTest, LargeIntegerAndStringIdsAreEchoed) {
  std::string s = Initialize();
  McpDecision d =
      Send({{"jsonrpc", "2.0"}, {"id", 18446744073709551615ull}, {"method", "ping"}}, s);
  EXPECT_EQ(Body(d)["id"], 18446744073709551615ull);
  d = Send({{"jsonrpc", "2.0"}, {"id", -9223372036854775807ll}, {"method", "ping"}}, s);
  EXPECT_EQ(Body(d)["id"], -9223372036854775807ll);
  d = Send({{"jsonrpc", "2.0"}, {"id", "abc"}, {"method", "ping"}}, s);
  EXPECT_EQ(Body(d)["id"], "abc");
  EXPECT_EQ(Body(d)["result"], json::object());
}

TEST_F(McpHandlerTest, UnknownMethodIsMethodNotFound) {
  std::string s = Initialize();
  McpDecision d = Send({{"jsonrpc", "2.0"}, {"id", 3}, {"method", "resources/list"}}, s);
  EXPECT_EQ(d.reply.status, 200);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kMethodNotFound);
  EXPECT_EQ(Body(d)["id"], 3);
}

TEST_F(McpHandlerTest, NullParamsAreTreatedAsAbsentButArraysAreInvalid) {
  std::string s = Initialize();
  McpDecision d = Send({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}, {"params", nullptr}}, s);
  EXPECT_EQ(Body(d)["result"], json::object());
  d = Send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}, {"params", json::array()}}, s);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
  d = Send({{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"}, {"params", nullptr}}, s);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
}

TEST_F(McpHandlerTest, SessionRules) {
  // Missing session id -> 400.
  McpDecision d = handler_.Handle(Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})"));
  EXPECT_EQ(d.reply.status, 400);
  // Unknown session -> 404.
  d = handler_.Handle(Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", "nope"));
  EXPECT_EQ(d.reply.status, 404);
  // Another domain's session -> 404.
  std::string other = Initialize("2025-11-25", "other");
  d = handler_.Handle(Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", other));
  EXPECT_EQ(d.reply.status, 404);
  McpRequest del;
  del.http_method = "DELETE";
  del.domain = "demo";
  del.session_id = other;
  EXPECT_EQ(handler_.Handle(del).reply.status, 404);
  // DELETE then use -> 404.
  std::string s = Initialize();
  EXPECT_EQ(Send({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, s).reply.status, 200);
  del.session_id = s;
  EXPECT_EQ(handler_.Handle(del).reply.status, 204);
  EXPECT_EQ(Send({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, s).reply.status, 404);
  EXPECT_EQ(handler_.Handle(del).reply.status, 404);
  del.session_id.reset();
  EXPECT_EQ(handler_.Handle(del).reply.status, 400);
}

TEST_F(McpHandlerTest, GetIs405WithAllow) {
  McpRequest get;
  get.http_method = "GET";
  get.domain = "demo";
  McpDecision d = handler_.Handle(get);
  EXPECT_EQ(d.reply.status, 405);
  ASSERT_FALSE(d.reply.headers.empty());
  EXPECT_EQ(d.reply.headers[0].first, "Allow");
}

TEST_F(McpHandlerTest, ProtocolVersionHeader) {
  std::string s = Initialize();
  McpRequest r = Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", s);
  r.protocol_version = "1999-01-01";
  EXPECT_EQ(handler_.Handle(r).reply.status, 400);
  r.protocol_version = "2025-06-18";  // supported, even if not the negotiated one
  EXPECT_EQ(handler_.Handle(r).reply.status, 200);
  r.protocol_version.reset();
  EXPECT_EQ(handler_.Handle(r).reply.status, 200);
}

TEST_F(McpHandlerTest, AcceptAndContentType) {
  std::string s = Initialize();
  McpRequest r = Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", s);
  r.accept = "text/html";
  EXPECT_EQ(handler_.Handle(r).reply.status, 406);
  r.accept = "application/json, text/event-stream";
  r.content_type = "text/plain";
  EXPECT_EQ(handler_.Handle(r).reply.status, 415);
  r.content_type = "application/json; charset=utf-8";
  EXPECT_EQ(handler_.Handle(r).reply.status, 200);
}

TEST_F(McpHandlerTest, NotificationsAndResponsesGet202) {
  std::string s = Initialize();
  McpDecision d = Send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, s);
  EXPECT_EQ(d.reply.status, 202);
  EXPECT_TRUE(d.reply.body.empty());
  d = Send({{"jsonrpc", "2.0"}, {"method", "notifications/whatever"}, {"params", 3}}, s);
  EXPECT_EQ(d.reply.status, 202);
  d = Send({{"jsonrpc", "2.0"}, {"id", 7}, {"result", json::object()}}, s);
  EXPECT_EQ(d.reply.status, 202);
}

TEST_F(McpHandlerTest, BatchesOnlyIn20250326) {
  std::string s = Initialize("2025-11-25");
  McpDecision d = handler_.Handle(Post(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", s));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidRequest);

  std::string old = Initialize("2025-03-26");
  d = handler_.Handle(Post("[]", old));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidRequest);

  d = handler_.Handle(Post(
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},5,{"jsonrpc":"2.0","id":2,"method":"nope"}])",
      old));
  ASSERT_EQ(d.reply.status, 200);
  json b = Body(d);
  ASSERT_TRUE(b.is_array());
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0]["id"], 1);
  EXPECT_EQ(b[1]["error"]["code"], rpc::kInvalidRequest);
  EXPECT_EQ(b[2]["error"]["code"], rpc::kMethodNotFound);

  // The header overrides the negotiated version.
  McpRequest r = Post(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", s);
  r.protocol_version = "2025-03-26";
  EXPECT_EQ(handler_.Handle(r).reply.status, 200);

  // A batch with tool calls dispatches them and keeps the ready answers.
  d = handler_.Handle(Post(json::array({Call(10, "list_candidates"),
                                        {{"jsonrpc", "2.0"}, {"id", 11}, {"method", "ping"}}})
                               .dump(),
                           old));
  EXPECT_TRUE(d.batch);
  ASSERT_EQ(d.calls.size(), 1u);
  ASSERT_EQ(d.ready_responses.size(), 1u);
  McpResponseStream stream(d, "x");
  EXPECT_TRUE(stream.sse());
  std::string start = stream.Start();
  EXPECT_NE(start.find("\"id\":11"), std::string::npos);
  std::string done = stream.OnDone(0, ToolResult{{{"candidates", json::array()}}, false}, false);
  EXPECT_NE(done.find("\"id\":10"), std::string::npos);
  EXPECT_TRUE(stream.complete());
}

TEST_F(McpHandlerTest, PingAndSetLevel) {
  std::string s = Initialize();
  EXPECT_EQ(Body(Send({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, s))["result"],
            json::object());
  McpDecision d = Send({{"jsonrpc", "2.0"},
                        {"id", 2},
                        {"method", "logging/setLevel"},
                        {"params", {{"level", "loud"}}}},
                       s);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
  EXPECT_FALSE(handler_.SessionLogLevel(s));
  d = Send({{"jsonrpc", "2.0"},
            {"id", 3},
            {"method", "logging/setLevel"},
            {"params", {{"level", "notice"}}}},
           s);
  EXPECT_EQ(Body(d)["result"], json::object());
  EXPECT_EQ(handler_.SessionLogLevel(s), McpLogLevel::kNotice);
  // notice > info: progress is not logged.
  d = Send(Call(4, "list_candidates"), s);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_FALSE(d.calls[0].log_progress);
  Send({{"jsonrpc", "2.0"},
        {"id", 5},
        {"method", "logging/setLevel"},
        {"params", {{"level", "debug"}}}},
       s);
  d = Send(Call(6, "list_candidates"), s);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_TRUE(d.calls[0].log_progress);
}

TEST_F(McpHandlerTest, ToolsListHasDefinitionsAndAliases) {
  std::string s = Initialize();
  json tools =
      Body(Send({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}}, s))["result"]["tools"];
  std::vector<std::string> names;
  for (const auto& t : tools) {
    names.push_back(t["name"]);
    EXPECT_TRUE(t["inputSchema"].is_object());
    EXPECT_EQ(t["inputSchema"]["type"], "object");
    EXPECT_TRUE(t["inputSchema"]["properties"].is_object()) << t["name"];
    EXPECT_TRUE(t["outputSchema"]["properties"].is_object()) << t["name"];
    EXPECT_EQ(t["outputSchema"]["type"], "object");
    EXPECT_TRUE(t["description"].is_string());
    EXPECT_TRUE(t["annotations"].contains("readOnlyHint"));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"build_candidate", "candidate_status", "build_log",
                                             "cancel_build", "list_candidates", "build_epp"}));
  EXPECT_EQ(tools[5]["inputSchema"], tools[0]["inputSchema"]);
  EXPECT_EQ(tools[0]["inputSchema"]["required"], json::array({"candidate"}));
  EXPECT_EQ(tools[0]["annotations"]["readOnlyHint"], false);
  EXPECT_EQ(tools[1]["annotations"]["readOnlyHint"], true);
}

TEST_F(McpHandlerTest, ToolsCallValidation) {
  std::string s = Initialize();
  json b = Body(Send(Call(1, "rm_rf"), s));
  EXPECT_EQ(b["error"]["code"], rpc::kInvalidParams);
  EXPECT_EQ(b["error"]["message"], "Unknown tool: rm_rf");
  // An alias pointing to an unknown tool is unknown too.
  EXPECT_EQ(Body(Send(Call(2, "ghost"), s))["error"]["code"], rpc::kInvalidParams);
  json bad_args = Call(3, "candidate_status");
  bad_args["params"]["arguments"] = json::array({"x"});
  EXPECT_EQ(Body(Send(bad_args, s))["error"]["code"], rpc::kInvalidParams);
  json no_name = {
      {"jsonrpc", "2.0"}, {"id", 4}, {"method", "tools/call"}, {"params", json::object()}};
  EXPECT_EQ(Body(Send(no_name, s))["error"]["code"], rpc::kInvalidParams);

  // Absent arguments become {}; aliases resolve to the canonical tool.
  json no_args = {
      {"jsonrpc", "2.0"}, {"id", 5}, {"method", "tools/call"}, {"params", {{"name", "build_epp"}}}};
  McpDecision d = Send(no_args, s);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].call.tool, "build_candidate");
  EXPECT_EQ(d.calls[0].tool_name, "build_epp");
  EXPECT_EQ(d.calls[0].call.domain, "demo");
  EXPECT_EQ(d.calls[0].call.arguments, json::object());
  EXPECT_TRUE(d.sse);  // Accept lists text/event-stream
}

TEST_F(McpHandlerTest, ToolsCallJsonModeWhenOnlyJsonAccepted) {
  std::string s = Initialize();
  McpRequest r = Post(Call(1, "candidate_status", {{"candidate", "a"}}).dump(), s);
  r.accept = "application/json";
  McpDecision d = handler_.Handle(r);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_FALSE(d.sse);
  McpResponseStream stream(d, "x");
  EXPECT_EQ(stream.OnProgress(0, {1, std::nullopt, "m"}), "");
  EXPECT_FALSE(stream.complete());
  EXPECT_EQ(stream.OnDone(0, {{{"state", "idle"}}, false}, false), "");
  ASSERT_TRUE(stream.complete());
  json body = json::parse(stream.JsonBody());
  EXPECT_EQ(body["id"], 1);
  EXPECT_EQ(body["result"]["structuredContent"]["state"], "idle");
  EXPECT_EQ(body["result"]["content"][0]["type"], "text");
  EXPECT_EQ(json::parse(body["result"]["content"][0]["text"].get<std::string>())["state"], "idle");
  EXPECT_EQ(body["result"]["isError"], false);
}

TEST_F(McpHandlerTest, InflightLimitAndDuplicateIds) {
  std::string s = Initialize();
  McpDecision a = Send(Call(1, "list_candidates"), s);
  ASSERT_EQ(a.calls.size(), 1u);
  json dup = Body(Send(Call(1, "list_candidates"), s));
  EXPECT_EQ(dup["error"]["code"], rpc::kInvalidRequest);
  McpDecision b = Send(Call(2, "list_candidates"), s);
  ASSERT_EQ(b.calls.size(), 1u);
  json over = Body(Send(Call(3, "list_candidates"), s));
  EXPECT_EQ(over["error"]["code"], rpc::kServerError);
  EXPECT_EQ(over["error"]["message"], "too many calls in flight (limit 2)");
  EXPECT_EQ(handler_.InflightCalls(), 2u);
  EXPECT_FALSE(handler_.CallFinished(s, a.calls[0]));
  EXPECT_EQ(Send(Call(3, "list_candidates"), s).calls.size(), 1u);
}

TEST_F(McpHandlerTest, CancelRoutesToTheRightCallOfTheRightSession) {
  std::string s1 = Initialize();
  std::string s2 = Initialize();
  McpDecision a = Send(Call(7, "build_candidate", {{"candidate", "x"}}), s1);
  McpDecision b = Send(Call(7, "build_candidate", {{"candidate", "y"}}), s2);
  McpDecision c = Send(Call("7", "build_candidate", {{"candidate", "z"}}), s1);
  EXPECT_FALSE(handler_.CallStarted(s1, a.calls[0], 100));
  EXPECT_FALSE(handler_.CallStarted(s2, b.calls[0], 200));
  EXPECT_FALSE(handler_.CallStarted(s1, c.calls[0], 300));
  McpDecision cancel = Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 7}}}},
      s2);
  EXPECT_EQ(cancel.reply.status, 202);
  EXPECT_EQ(cancel.cancel, std::vector<uint64_t>{200});
  cancel = Send({{"jsonrpc", "2.0"},
                 {"method", "notifications/cancelled"},
                 {"params", {{"requestId", "7"}, {"reason", "user"}}}},
                s1);
  EXPECT_EQ(cancel.cancel, std::vector<uint64_t>{300});
  // Cancelling again or an unknown id does nothing.
  cancel = Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", "7"}}}},
      s1);
  EXPECT_TRUE(cancel.cancel.empty());
  cancel = Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 99}}}},
      s1);
  EXPECT_TRUE(cancel.cancel.empty());
  EXPECT_TRUE(handler_.CallFinished(s2, b.calls[0]));
  EXPECT_FALSE(handler_.CallFinished(s1, a.calls[0]));
}

TEST_F(McpHandlerTest, CancelBeforeHandleKnownIsReportedByCallStarted) {
  std::string s = Initialize();
  McpDecision a = Send(Call(1, "build_candidate", {{"candidate", "x"}}), s);
  McpDecision cancel = Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 1}}}},
      s);
  EXPECT_TRUE(cancel.cancel.empty());
  EXPECT_TRUE(handler_.CallStarted(s, a.calls[0], 5));
}

TEST_F(McpHandlerTest, ProgressIsStrictlyIncreasingAndStopsAfterResponse) {
  std::string s = Initialize();
  json call = Call(1, "build_candidate", {{"candidate", "x"}});
  call["params"]["_meta"] = {{"progressToken", "tok"}};
  McpDecision d = Send(call, s);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].progress_token, json("tok"));
  McpResponseStream stream(d, "s");
  ASSERT_TRUE(stream.sse());
  EXPECT_EQ(stream.Start(), "");
  std::string e1 = stream.OnProgress(0, {1, 4.0, "queued"});
  EXPECT_EQ(e1.rfind("id: s-1\nevent: message\ndata: ", 0), 0u) << e1;
  json n1 = json::parse(e1.substr(e1.find("data: ") + 6));
  EXPECT_EQ(n1["method"], "notifications/progress");
  EXPECT_EQ(n1["params"]["progressToken"], "tok");
  EXPECT_EQ(n1["params"]["progress"], 1);
  EXPECT_EQ(n1["params"]["total"], 4);
  EXPECT_EQ(n1["params"]["message"], "queued");
  EXPECT_EQ(stream.OnProgress(0, {1, 4.0, "again"}), "");   // not increasing
  EXPECT_EQ(stream.OnProgress(0, {0.5, 4.0, "back"}), "");  // going back
  std::string e2 = stream.OnProgress(0, {2, 4.0, "building"});
  EXPECT_NE(e2.find("id: s-2\n"), std::string::npos);
  std::string r = stream.OnDone(0, {{{"status", "succeeded"}}, false}, false);
  EXPECT_NE(r.find("id: s-3\n"), std::string::npos);
  EXPECT_NE(r.find("\"result\""), std::string::npos);
  EXPECT_EQ(stream.OnProgress(0, {3, 4.0, "late"}), "");
  EXPECT_EQ(stream.OnDone(0, {{{"status", "failed"}}, true}, false), "");
  EXPECT_TRUE(stream.complete());
}

TEST_F(McpHandlerTest, ProgressAsLogMessagesOnlyWhenLevelSet) {
  ProgressTracker quiet(std::nullopt, false, "build_candidate");
  EXPECT_TRUE(quiet.OnProgress({1, std::nullopt, "building"}).empty());
  ProgressTracker logging(std::nullopt, true, "build_candidate");
  auto out = logging.OnProgress({1, std::nullopt, "building"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["method"], "notifications/message");
  EXPECT_EQ(out[0]["params"]["level"], "info");
  EXPECT_EQ(out[0]["params"]["data"], "build_candidate: building");
}

TEST_F(McpHandlerTest, CancelledCallGetsNoSseResponse) {
  std::string s = Initialize();
  McpDecision d = Send(Call(1, "build_candidate", {{"candidate", "x"}}), s);
  McpResponseStream stream(d, "s");
  EXPECT_EQ(stream.OnDone(0, {{{"status", "cancelled"}}, true}, true), "");
  EXPECT_TRUE(stream.complete());
}

TEST_F(McpHandlerTest, MaxSessionsEvictsIdleFirst) {
  Initialize();
  Initialize();
  std::string busy = Initialize();
  McpDecision call = Send(Call(1, "list_candidates"), busy);
  ASSERT_EQ(call.calls.size(), 1u);
  McpDecision d = handler_.Handle(Post(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}})"));
  EXPECT_EQ(d.reply.status, 503);
  EXPECT_NE(Body(d)["error"]["message"].get<std::string>().find("too many sessions"),
            std::string::npos);
  now_ += std::chrono::hours(2);
  d = handler_.Handle(Post(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}})"));
  EXPECT_EQ(d.reply.status, 200);
  // The session with a call in flight survived; the two idle ones were dropped.
  EXPECT_EQ(handler_.SessionCount(), 2u);
  EXPECT_EQ(Send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}}, busy).reply.status, 200);
}

// HTTP transport caps: a domain at its own cap loses its least recently used idle session;
// another domain's sessions and initialize are untouched.
TEST(McpHandlerDomainCapTest, ADomainAtItsCapEvictsItsOwnLruIdleSessionOnly) {
  std::chrono::steady_clock::time_point now{};
  int ids = 0;
  McpHandler::Options o;
  o.max_sessions = 100;
  o.max_sessions_per_domain = 2;
  o.clock = [&] { return now; };
  o.new_session_id = [&] { return "s" + std::to_string(++ids); };
  McpHandler h(o);
  auto init = [&](const std::string& domain) {
    McpRequest r;
    r.http_method = "POST";
    r.domain = domain;
    r.accept = "application/json, text/event-stream";
    r.content_type = "application/json";
    r.body =
        R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}})";
    now += std::chrono::seconds(1);
    return h.Handle(r);
  };
  auto post = [&](const std::string& session, const std::string& domain, const std::string& body) {
    McpRequest r;
    r.http_method = "POST";
    r.domain = domain;
    r.accept = "application/json, text/event-stream";
    r.content_type = "application/json";
    r.session_id = session;
    r.body = body;
    now += std::chrono::seconds(1);
    return h.Handle(r);
  };
  const std::string ping = R"({"jsonrpc":"2.0","id":7,"method":"ping"})";
  std::string b1 = init("b").session_id;
  std::string a1 = init("a").session_id;
  std::string a2 = init("a").session_id;
  ASSERT_EQ(post(a1, "a", ping).reply.status, 200);  // a2 is now a's least recently used
  McpDecision d = init("a");
  EXPECT_EQ(d.reply.status, 200);
  EXPECT_EQ(d.evicted_sessions, 1u);
  EXPECT_EQ(post(a2, "a", ping).reply.status, 404);  // evicted
  EXPECT_EQ(post(a1, "a", ping).reply.status, 200);
  EXPECT_EQ(h.SessionCount("a"), 2u);
  // Domain a hammering initialize never touches b.
  for (int i = 0; i < 50; ++i) ASSERT_EQ(init("a").reply.status, 200);
  EXPECT_EQ(h.SessionCount("a"), 2u);
  EXPECT_EQ(post(b1, "b", ping).reply.status, 200);
  EXPECT_EQ(init("b").reply.status, 200);
  EXPECT_EQ(h.SessionCount("b"), 2u);

  // Every session of a with a call in flight: a's initialize is refused, naming the limit.
  std::string a3 = init("a").session_id;
  std::string a4 = init("a").session_id;
  for (const std::string& s : {a3, a4}) {
    d = post(
        s, "a",
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_candidates"}})");
    ASSERT_EQ(d.calls.size(), 1u);
  }
  d = init("a");
  EXPECT_EQ(d.reply.status, 503);
  EXPECT_EQ(d.refused_by, "sessions_per_domain");
  EXPECT_NE(json::parse(d.reply.body)["error"]["message"].get<std::string>().find(
                "server.max_sessions_per_domain"),
            std::string::npos);
  EXPECT_EQ(init("b").reply.status, 200);  // b still gets in
}

TEST(ToolResultJsonTest, TextBlockCarriesTheSameJson) {
  json r = ToolResultJson({{{"build_id", "b1"}, {"status", "failed"}}, true});
  EXPECT_EQ(r["isError"], true);
  EXPECT_EQ(json::parse(r["content"][0]["text"].get<std::string>()), r["structuredContent"]);
}

TEST(ToolCatalogTest, ResolveAndDeployHook) {
  ToolCatalog plain;
  EXPECT_EQ(plain.Resolve("deploy_candidate", {}), std::nullopt);
  ToolCatalog::Options o;
  o.include_deploy = true;
  ToolCatalog with_deploy(o);
  EXPECT_EQ(with_deploy.Resolve("deploy_candidate", {}), "deploy_candidate");
  EXPECT_EQ(plain.Resolve("b", {{"b", "build_log"}}), "build_log");
}

}  // namespace
}  // namespace kiln
