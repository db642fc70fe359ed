// Issue 17: MCP 2026-07-28 on /mcp (header/_meta validation, stateless dispatch) and the build
// task state machine, tested through McpHandler without any I/O.
#include "transport/mcp_modern.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/mcp_handler.h"
#include "transport/mcp_tasks.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1790000000000;  // 2026-09-21T...Z

class McpModernTest : public ::testing::Test {
 protected:
  McpModernTest() : handler_(MakeOptions()) {}

  static McpHandler::Options MakeOptions() {
    McpHandler::Options o;
    o.server_version = "9.9.9";
    o.instructions = "Build with build_candidate.";
    o.tool_aliases["demo"] = {{"build_epp", "build_candidate"}};
    o.wall_clock_ms = [] { return kNow; };
    o.catalog.include_deploy = true;  // deploy_candidate (deploy tasks)
    return o;
  }

  static json Meta(bool tasks = false) {
    json caps = json::object();
    if (tasks) caps["extensions"] = {{kMcpTasksExtension, json::object()}};
    return {{kMetaProtocolVersion, "2026-07-28"},
            {kMetaClientCapabilities, caps},
            {kMetaClientInfo, {{"name", "t"}, {"version", "1"}}}};
  }

  static json Request(const std::string& method, json params = json::object(), bool tasks = false,
                      json id = 1) {
    if (!params.contains("_meta")) params["_meta"] = Meta(tasks);
    return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
  }

  // A POST with the headers a 2026-07-28 client sends for `body`.
  static McpRequest Post(const json& body, const std::string& domain = "demo") {
    McpRequest r;
    r.http_method = "POST";
    r.domain = domain;
    r.accept = "application/json, text/event-stream";
    r.content_type = "application/json";
    r.protocol_version = "2026-07-28";
    r.mcp_method = body.value("method", "");
    const json params = body.value("params", json::object());
    if (params.contains("name") && params["name"].is_string()) r.mcp_name = params["name"];
    if (params.contains("taskId") && params["taskId"].is_string()) r.mcp_name = params["taskId"];
    r.body = body.dump();
    return r;
  }

  McpDecision Handle(const McpRequest& r) { return handler_.Handle(r); }
  static json Body(const McpDecision& d) { return json::parse(d.reply.body); }

  McpHandler handler_;
};

TEST_F(McpModernTest, EraClassification) {
  EXPECT_EQ(ClassifyMcpEra(std::nullopt, Request("tools/list")), McpEra::kModern);
  EXPECT_EQ(ClassifyMcpEra(std::string("2026-07-28"), json{{"method", "ping"}}), McpEra::kModern);
  EXPECT_EQ(ClassifyMcpEra(std::string("2025-11-25"), json{{"method", "tools/list"}}),
            McpEra::kLegacy);
  EXPECT_EQ(ClassifyMcpEra(std::nullopt, json{{"method", "initialize"}}), McpEra::kLegacy);
  EXPECT_EQ(ClassifyMcpEra(std::nullopt, json::array({Request("tools/list")})), McpEra::kModern);
  EXPECT_TRUE(IsModernMcpVersionName("2027-01-01"));
  EXPECT_FALSE(IsModernMcpVersionName("2025-11-25"));
}

TEST_F(McpModernTest, DiscoverIsStatelessAndCarriesServerInfo) {
  McpDecision d = Handle(Post(Request("server/discover")));
  ASSERT_EQ(d.reply.status, 200) << d.reply.body;
  EXPECT_TRUE(d.session_id.empty());
  json r = Body(d)["result"];
  EXPECT_EQ(r["resultType"], "complete");
  EXPECT_EQ(r["supportedVersions"][0], "2026-07-28");
  EXPECT_EQ(r["supportedVersions"].size(), 4u);
  EXPECT_TRUE(r["capabilities"]["extensions"].contains(kMcpTasksExtension));
  EXPECT_EQ(r["_meta"][kMetaServerInfo]["name"], "kiln");
  EXPECT_EQ(r["_meta"][kMetaServerInfo]["version"], "9.9.9");
  EXPECT_EQ(r["instructions"], "Build with build_candidate.");
  // No session was created.
  EXPECT_EQ(handler_.SessionCount(), 0u);
}

TEST_F(McpModernTest, ToolsListIsDeterministicWithCacheHints) {
  McpDecision a = Handle(Post(Request("tools/list")));
  McpDecision b = Handle(Post(Request("tools/list")));
  ASSERT_EQ(a.reply.status, 200) << a.reply.body;
  EXPECT_EQ(a.reply.body, b.reply.body);
  json r = Body(a)["result"];
  EXPECT_EQ(r["resultType"], "complete");
  EXPECT_EQ(r["cacheScope"], "private");
  EXPECT_GT(r["ttlMs"].get<int64_t>(), 0);
  bool alias = false;
  for (const auto& t : r["tools"]) alias = alias || t["name"] == "build_epp";
  EXPECT_TRUE(alias);
}

TEST_F(McpModernTest, ProtocolHeaderMustMatchMeta) {
  McpRequest r = Post(Request("tools/list"));
  r.protocol_version = "2025-11-25";
  McpDecision d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kHeaderMismatch);

  r.protocol_version.reset();  // missing on a request
  d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kHeaderMismatch);
}

TEST_F(McpModernTest, UnsupportedVersionListsTheSupportedOnes) {
  json body = Request("tools/list");
  body["params"]["_meta"][kMetaProtocolVersion] = "2031-01-01";
  McpRequest r = Post(body);
  r.protocol_version = "2031-01-01";
  McpDecision d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  json e = Body(d)["error"];
  EXPECT_EQ(e["code"], rpc::kUnsupportedProtocolVersion);
  EXPECT_EQ(e["data"]["requested"], "2031-01-01");
  EXPECT_EQ(e["data"]["supported"][0], "2026-07-28");
}

TEST_F(McpModernTest, ModernHeaderWithoutEnvelopeIsInvalidParams) {
  json body = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}};
  McpDecision d = Handle(Post(body));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
}

TEST_F(McpModernTest, EnvelopeNeedsClientCapabilitiesAndAValidLogLevel) {
  json body = Request("tools/list");
  body["params"]["_meta"].erase(kMetaClientCapabilities);
  McpDecision d = Handle(Post(body));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);

  body = Request("tools/list");
  body["params"]["_meta"][kMetaLogLevel] = "loud";
  d = Handle(Post(body));
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
}

TEST_F(McpModernTest, McpMethodAndNameHeadersMustMatchTheBody) {
  McpRequest r = Post(Request("tools/list"));
  r.mcp_method = "tools/call";
  McpDecision d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kHeaderMismatch);

  r.mcp_method.reset();
  d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kHeaderMismatch);

  r = Post(
      Request("tools/call", {{"name", "candidate_status"}, {"arguments", {{"candidate", "a"}}}}));
  r.mcp_name = "build_candidate";
  d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kHeaderMismatch);
  EXPECT_TRUE(d.calls.empty());

  r.mcp_name.reset();
  d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_TRUE(d.calls.empty());
}

TEST_F(McpModernTest, McpNameBase64Sentinel) {
  EXPECT_EQ(DecodeMcpHeaderValue("plain"), "plain");
  EXPECT_EQ(DecodeMcpHeaderValue("=?base64?w6l0w6k=?="), "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(DecodeMcpHeaderValue("=?base64?!!?="), std::nullopt);
  // A tool named with the sentinel matches its body name.
  json body =
      Request("tools/call", {{"name", "candidate_status"}, {"arguments", {{"candidate", "a"}}}});
  McpRequest r = Post(body);
  r.mcp_name = "=?base64?Y2FuZGlkYXRlX3N0YXR1cw==?=";
  McpDecision d = Handle(r);
  ASSERT_EQ(d.calls.size(), 1u) << d.reply.body;
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, UnknownAndLegacyOnlyMethodsAre404) {
  for (const char* m : {"initialize", "ping", "logging/setLevel", "subscriptions/listen", "nope"}) {
    McpDecision d = Handle(Post(Request(m)));
    EXPECT_EQ(d.reply.status, 404) << m;
    EXPECT_EQ(Body(d)["error"]["code"], rpc::kMethodNotFound) << m;
  }
}

TEST_F(McpModernTest, GetAndDeleteAre405OnTheModernPath) {
  for (const char* m : {"GET", "DELETE"}) {
    McpRequest r;
    r.http_method = m;
    r.domain = "demo";
    r.protocol_version = "2026-07-28";
    McpDecision d = Handle(r);
    EXPECT_EQ(d.reply.status, 405) << m;
    ASSERT_FALSE(d.reply.headers.empty());
    EXPECT_EQ(d.reply.headers[0].second, "POST");
  }
}

TEST_F(McpModernTest, NotificationsAreAcknowledged) {
  json n = {{"jsonrpc", "2.0"},
            {"method", "notifications/cancelled"},
            {"params", {{"requestId", 1}, {"_meta", Meta()}}}};
  McpDecision d = Handle(Post(n));
  EXPECT_EQ(d.reply.status, 202);
  EXPECT_TRUE(d.calls.empty());
}

TEST_F(McpModernTest, BatchesAreRefused) {
  McpRequest r = Post(Request("tools/list"));
  r.body = json::array({Request("tools/list")}).dump();
  McpDecision d = Handle(r);
  EXPECT_EQ(d.reply.status, 400);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidRequest);
}

TEST_F(McpModernTest, ToolsCallDispatchesWithProgressAndPerRequestLogLevel) {
  json params = {{"name", "build_epp"}, {"arguments", {{"candidate", "api"}}}};
  json meta = Meta();
  meta["progressToken"] = "p1";
  meta[kMetaLogLevel] = "info";
  params["_meta"] = meta;
  McpDecision d = Handle(Post(Request("tools/call", params)));
  ASSERT_EQ(d.calls.size(), 1u) << d.reply.body;
  EXPECT_TRUE(d.modern);
  EXPECT_TRUE(d.sse);
  const PendingCall& c = d.calls[0];
  EXPECT_EQ(c.call.tool, "build_candidate");
  EXPECT_EQ(c.kind, McpCallKind::kTool);  // no tasks extension declared
  EXPECT_EQ(c.progress_token, json("p1"));
  EXPECT_TRUE(c.log_progress);
  EXPECT_EQ(handler_.InflightCalls(), 1u);

  McpResponseStream stream(d, "x");
  std::string events = stream.OnProgress(0, {1, std::nullopt, "queued"});
  EXPECT_NE(events.find("notifications/progress"), std::string::npos);
  EXPECT_NE(events.find("notifications/message"), std::string::npos);
  std::string done =
      stream.OnDone(0, {{{"build_id", "b-1"}, {"status", "succeeded"}}, false}, false);
  json resp = json::parse(done.substr(done.find("data: ") + 6));
  EXPECT_EQ(resp["result"]["resultType"], "complete");
  EXPECT_EQ(resp["result"]["_meta"][kMetaServerInfo]["name"], "kiln");
  EXPECT_EQ(resp["result"]["structuredContent"]["build_id"], "b-1");
  handler_.ModernCallFinished();
  EXPECT_EQ(handler_.InflightCalls(), 0u);
  handler_.ModernCallFinished();  // never below zero
  EXPECT_EQ(handler_.InflightCalls(), 0u);
}

TEST_F(McpModernTest, NoLogMessagesWithoutALogLevel) {
  json params = {{"name", "build_candidate"}, {"arguments", {{"candidate", "api"}}}};
  json meta = Meta();
  meta["progressToken"] = 7;
  params["_meta"] = meta;
  McpDecision d = Handle(Post(Request("tools/call", params)));
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_FALSE(d.calls[0].log_progress);
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, UnknownToolIsInBandInvalidParams) {
  McpDecision d = Handle(Post(Request("tools/call", {{"name", "rm_rf"}})));
  EXPECT_EQ(d.reply.status, 200);
  EXPECT_EQ(Body(d)["error"]["code"], rpc::kInvalidParams);
  EXPECT_TRUE(d.calls.empty());
}

TEST_F(McpModernTest, LegacySessionsStillWork) {
  json init = {{"jsonrpc", "2.0"},
               {"id", 0},
               {"method", "initialize"},
               {"params", {{"protocolVersion", "2025-11-25"}, {"capabilities", json::object()}}}};
  McpRequest r;
  r.http_method = "POST";
  r.domain = "demo";
  r.accept = "application/json, text/event-stream";
  r.content_type = "application/json";
  r.body = init.dump();
  McpDecision d = Handle(r);
  ASSERT_EQ(d.reply.status, 200);
  EXPECT_FALSE(d.session_id.empty());
  json list = Body(d)["result"];
  EXPECT_FALSE(list.contains("resultType"));
  EXPECT_EQ(handler_.SessionCount(), 1u);
}

// --- tasks ------------------------------------------------------------------------------------

TEST(McpTasks, TaskIdRoundTripsAndIsScopedToItsDomain) {
  TaskRef ref{"demo", "build", "api", "b-0123", kNow, ""};
  std::string id = EncodeTaskId(ref);
  EXPECT_EQ(id.rfind("kt1.", 0), 0u);
  auto back = DecodeTaskId(id, "demo");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->candidate, "api");
  EXPECT_EQ(back->build_id, "b-0123");
  EXPECT_EQ(back->created_ms, kNow);
  EXPECT_FALSE(DecodeTaskId(id, "other"));
  EXPECT_FALSE(DecodeTaskId("kt1.!!", "demo"));
  EXPECT_FALSE(DecodeTaskId("nope", "demo"));
  EXPECT_FALSE(DecodeTaskId(id + "x", "demo"));
}

TEST(McpTasks, Base64UrlRoundTrip) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(Base64UrlDecode(Base64UrlEncode(s)), s);
  }
  EXPECT_FALSE(Base64UrlDecode("a"));
}

TEST(McpTasks, StateMachine) {
  EXPECT_EQ(TaskStatusForBuild({{"status", "queued"}}), "working");
  EXPECT_EQ(TaskStatusForBuild({{"status", "running"}}), "working");
  EXPECT_EQ(TaskStatusForBuild({{"status", "succeeded"}}), "completed");
  EXPECT_EQ(TaskStatusForBuild({{"status", "failed"}, {"error_kind", "compile"}}), "completed");
  EXPECT_EQ(TaskStatusForBuild({{"status", "interrupted"}}), "completed");
  EXPECT_EQ(TaskStatusForBuild({{"status", "cancelled"}, {"error_kind", "superseded"}}),
            "completed");
  EXPECT_EQ(TaskStatusForBuild({{"status", "cancelled"}, {"error_kind", "cancelled"}}),
            "cancelled");
  EXPECT_EQ(TaskStatusMessage({{"status", "queued"}, {"phase", "queued"}, {"queue_position", 2}}),
            "phase: queued (queue position 2)");
  EXPECT_EQ(TaskStatusMessage({{"status", "running"}, {"phase", "building"}}), "phase: building");
  EXPECT_EQ(TaskStatusMessage(
                {{"status", "failed"}, {"error_kind", "compile"}, {"error", "main.go:3: x\nmore"}}),
            "build failed (compile): main.go:3: x");
}

TEST(McpTasks, TaskJsonCarriesTheResultOnlyWhenCompleted) {
  TaskRef ref{"demo", "build", "api", "b-1", kNow - 5000, ""};
  TaskTiming t{kNow, 3600000, 1000};
  json working = TaskJson(ref, {{{"status", "running"}, {"phase", "building"}}, false}, t);
  EXPECT_EQ(working["status"], "working");
  EXPECT_EQ(working["pollIntervalMs"], 1000);
  EXPECT_FALSE(working.contains("result"));
  EXPECT_EQ(working["createdAt"], IsoTime(kNow - 5000));
  EXPECT_EQ(working["lastUpdatedAt"], IsoTime(kNow));

  json failed = TaskJson(ref, {{{"status", "failed"}, {"error_kind", "compile"}}, true}, t);
  EXPECT_EQ(failed["status"], "completed");
  EXPECT_EQ(failed["result"]["isError"], true);
  EXPECT_EQ(failed["result"]["resultType"], "complete");
  EXPECT_EQ(failed["result"]["structuredContent"]["error_kind"], "compile");
  EXPECT_EQ(IsoTime(0), "1970-01-01T00:00:00.000Z");
}

TEST_F(McpModernTest, BuildWithTasksExtensionBecomesATask) {
  json params = {{"name", "build_candidate"}, {"arguments", {{"candidate", "api"}}}};
  McpDecision d = Handle(Post(Request("tools/call", params, /*tasks=*/true)));
  ASSERT_EQ(d.calls.size(), 1u) << d.reply.body;
  EXPECT_EQ(d.calls[0].kind, McpCallKind::kTaskCreate);
  EXPECT_EQ(d.calls[0].call.arguments["wait"], false);
  EXPECT_FALSE(d.sse);  // a task handle is a quick JSON answer

  McpResponseStream stream(d, "x");
  stream.OnDone(
      0,
      {{{"build_id", "b-7"}, {"candidate", "api"}, {"status", "running"}, {"phase", "resolving"}},
       false},
      false);
  ASSERT_TRUE(stream.complete());
  json r = json::parse(stream.JsonBody())["result"];
  EXPECT_EQ(r["resultType"], "task");
  EXPECT_EQ(r["status"], "working");
  EXPECT_EQ(r["statusMessage"], "phase: resolving");
  EXPECT_EQ(r["_meta"][kMetaServerInfo]["name"], "kiln");
  auto ref = DecodeTaskId(r["taskId"].get<std::string>(), "demo");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->build_id, "b-7");
  handler_.ModernCallFinished();

  // tasks/get with that id asks the backend for build b-7 and renders the task.
  json get = Request("tasks/get", {{"taskId", r["taskId"]}}, true, 2);
  McpDecision g = Handle(Post(get));
  ASSERT_EQ(g.calls.size(), 1u) << g.reply.body;
  EXPECT_EQ(g.calls[0].kind, McpCallKind::kTaskGet);
  EXPECT_EQ(g.calls[0].call.tool, "build_result");
  EXPECT_EQ(g.calls[0].call.arguments["build_id"], "b-7");
  McpResponseStream gs(g, "y");
  gs.OnDone(0, {{{"build_id", "b-7"}, {"status", "failed"}, {"error_kind", "compile"}}, true},
            false);
  json task = json::parse(gs.JsonBody())["result"];
  EXPECT_EQ(task["status"], "completed");
  EXPECT_EQ(task["resultType"], "complete");
  EXPECT_EQ(task["result"]["isError"], true);
  handler_.ModernCallFinished();

  // Another domain's caller: not found, and nothing is dispatched.
  McpDecision other = Handle(Post(get, "other"));
  EXPECT_TRUE(other.calls.empty());
  EXPECT_EQ(Body(other)["error"]["code"], rpc::kInvalidParams);

  // tasks/cancel cancels the build and answers an empty ack.
  McpDecision c = Handle(Post(Request("tasks/cancel", {{"taskId", r["taskId"]}}, true, 3)));
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].call.tool, "cancel_build");
  McpResponseStream cs(c, "z");
  cs.OnDone(0, {{{"build_id", "b-7"}, {"status", "cancelled"}}, false}, false);
  json ack = json::parse(cs.JsonBody())["result"];
  EXPECT_EQ(ack["resultType"], "complete");
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, FinalAnswerStaysAPlainResultEvenWithTasks) {
  json params = {{"name", "build_candidate"}, {"arguments", {{"candidate", "nope"}}}};
  McpDecision d = Handle(Post(Request("tools/call", params, true)));
  ASSERT_EQ(d.calls.size(), 1u);
  McpResponseStream stream(d, "x");
  stream.OnDone(0, {{{"error", "candidate 'nope' was never pushed"}}, true}, false);
  json r = json::parse(stream.JsonBody())["result"];
  EXPECT_EQ(r["resultType"], "complete");
  EXPECT_EQ(r["isError"], true);
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, WaitFalseKeepsItsOldMeaningWithTasks) {
  json params = {{"name", "build_candidate"},
                 {"arguments", {{"candidate", "api"}, {"wait", false}}}};
  McpDecision d = Handle(Post(Request("tools/call", params, true)));
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].kind, McpCallKind::kTool);
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, TaskGetOfAPrunedBuildIsNotFound) {
  std::string id = EncodeTaskId({"demo", "build", "api", "b-gone", kNow, ""});
  McpDecision g = Handle(Post(Request("tasks/get", {{"taskId", id}}, true)));
  ASSERT_EQ(g.calls.size(), 1u);
  McpResponseStream gs(g, "y");
  gs.OnDone(0, {{{"error", "build 'b-gone' not found"}}, true}, false);
  json resp = json::parse(gs.JsonBody());
  EXPECT_EQ(resp["error"]["code"], rpc::kInvalidParams);
  handler_.ModernCallFinished();
}

// Issue 17: deploy_candidate with the tasks extension is a deploy task.
TEST_F(McpModernTest, DeployWithTasksExtensionBecomesADeployTask) {
  json params = {{"name", "deploy_candidate"}, {"arguments", {{"candidate", "api"}}}};
  McpDecision d = Handle(Post(Request("tools/call", params, /*tasks=*/true)));
  ASSERT_EQ(d.calls.size(), 1u) << d.reply.body;
  EXPECT_EQ(d.calls[0].kind, McpCallKind::kTaskCreate);
  EXPECT_EQ(d.calls[0].call.arguments["wait"], false);
  McpResponseStream stream(d, "x");
  stream.OnDone(0,
                {{{"deploy_id", "d-9"},
                  {"build_id", "b-7"},
                  {"candidate", "api"},
                  {"status", "in_progress"},
                  {"reason", nullptr}},
                 false},
                false);
  json r = json::parse(stream.JsonBody())["result"];
  EXPECT_EQ(r["resultType"], "task");
  EXPECT_EQ(r["status"], "working");
  EXPECT_EQ(r["statusMessage"], "phase: deploying");
  EXPECT_EQ(r["pollIntervalMs"], 1000);
  auto ref = DecodeTaskId(r["taskId"].get<std::string>(), "demo");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->kind, "deploy");
  EXPECT_EQ(ref->deploy_id, "d-9");
  EXPECT_FALSE(DecodeTaskId(r["taskId"].get<std::string>(), "other"));
  handler_.ModernCallFinished();

  // tasks/get asks the domain for the deploy; a failed deploy is a completed task with isError.
  McpDecision g = Handle(Post(Request("tasks/get", {{"taskId", r["taskId"]}}, true, 2)));
  ASSERT_EQ(g.calls.size(), 1u) << g.reply.body;
  EXPECT_EQ(g.calls[0].call.tool, "deploy_result");
  EXPECT_EQ(g.calls[0].call.arguments, json({{"deploy_id", "d-9"}}));
  McpResponseStream gs(g, "y");
  gs.OnDone(0,
            {{{"deploy_id", "d-9"},
              {"status", "failed"},
              {"reason", "CrashLoopBackOff"},
              {"error", "the program exits at start\nmore"},
              {"error_kind", "deploy_crash"}},
             true},
            false);
  json task = json::parse(gs.JsonBody())["result"];
  EXPECT_EQ(task["status"], "completed");
  EXPECT_EQ(task["statusMessage"], "deploy failed (CrashLoopBackOff): the program exits at start");
  EXPECT_EQ(task["result"]["isError"], true);
  EXPECT_EQ(task["result"]["structuredContent"]["error_kind"], "deploy_crash");
  handler_.ModernCallFinished();

  // tasks/cancel cancels the deploy.
  McpDecision c = Handle(Post(Request("tasks/cancel", {{"taskId", r["taskId"]}}, true, 3)));
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].call.tool, "cancel_deploy");
  EXPECT_EQ(c.calls[0].call.arguments, json({{"deploy_id", "d-9"}}));
  handler_.ModernCallFinished();
}

TEST_F(McpModernTest, AFinishedDeployStaysAPlainResult) {
  json params = {{"name", "deploy_candidate"}, {"arguments", {{"candidate", "api"}}}};
  McpDecision d = Handle(Post(Request("tools/call", params, true)));
  ASSERT_EQ(d.calls.size(), 1u);
  McpResponseStream stream(d, "x");
  // An unknown candidate (error without status), and a deploy already rolled out (joined).
  stream.OnDone(0, {{{"error", "candidate 'api' has no successful build"}}, true}, false);
  json r = json::parse(stream.JsonBody())["result"];
  EXPECT_EQ(r["resultType"], "complete");
  EXPECT_EQ(r["isError"], true);
  handler_.ModernCallFinished();
}

TEST(McpTasks, DeployStateMachine) {
  EXPECT_EQ(TaskStatusForDeploy({{"status", "in_progress"}}), "working");
  EXPECT_EQ(TaskStatusForDeploy({{"status", "rolled_out"}}), "completed");
  EXPECT_EQ(TaskStatusForDeploy({{"status", "failed"}, {"reason", "Superseded"}}), "completed");
  EXPECT_EQ(TaskStatusForDeploy({{"status", "failed"}, {"reason", "Interrupted"}}), "completed");
  EXPECT_EQ(TaskStatusForDeploy({{"status", "failed"}, {"reason", "Cancelled"}}), "cancelled");
  EXPECT_EQ(DeployTaskStatusMessage({{"status", "rolled_out"}}), "deploy rolled out");
  TaskRef ref{"demo", "deploy", "api", "b-1", kNow, "d-1"};
  EXPECT_TRUE(DecodeTaskId(EncodeTaskId(ref), "demo"));
  ref.deploy_id.clear();  // a deploy task names its deploy
  EXPECT_FALSE(DecodeTaskId(EncodeTaskId(ref), "demo"));
  json done =
      TaskJson({"demo", "deploy", "api", "b-1", kNow, "d-1"},
               {{{"status", "rolled_out"}, {"deploy_id", "d-1"}}, false}, {kNow, 3600000, 1000});
  EXPECT_EQ(done["status"], "completed");
  EXPECT_FALSE(done.contains("pollIntervalMs"));
  EXPECT_EQ(done["result"]["isError"], false);
}

}  // namespace
}  // namespace kiln
