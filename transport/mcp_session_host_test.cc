// Issue 17: the session table's owner, as a plain class: McpHandler's caps (per domain and
// global: one domain cannot take another's sessions), DispatchSessionCalls (cancellation before
// the call's handle is known, exactly one answer per call), and LocalMcpSessionHost over the
// fake backend.
#include "transport/mcp_session_host.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "transport/fake_tool_backend.h"

namespace kiln {
namespace {

using nlohmann::json;

McpRequest Post(const std::string& domain, const json& body,
                std::optional<std::string> session = std::nullopt) {
  McpRequest r;
  r.http_method = "POST";
  r.domain = domain;
  r.accept = "application/json";
  r.content_type = "application/json";
  r.session_id = std::move(session);
  r.body = body.dump();
  return r;
}

json Init() {
  return {{"jsonrpc", "2.0"},
          {"id", 0},
          {"method", "initialize"},
          {"params", {{"protocolVersion", "2025-11-25"}, {"capabilities", json::object()}}}};
}

json Call(int id, const std::string& tool, json args) {
  return {{"jsonrpc", "2.0"},
          {"id", id},
          {"method", "tools/call"},
          {"params", {{"name", tool}, {"arguments", std::move(args)}}}};
}

class SessionCapsTest : public ::testing::Test {
 protected:
  SessionCapsTest() : handler_(Options()) {}
  McpOptions Options() {
    McpOptions o;
    o.max_sessions = 4;
    o.max_sessions_per_domain = 3;
    o.clock = [this] { return now_ += std::chrono::seconds(1); };
    o.new_session_id = [this] { return "s" + std::to_string(++ids_); };
    return o;
  }
  McpDecision Initialize(const std::string& domain) {
    return handler_.Handle(Post(domain, Init()));
  }
  std::chrono::steady_clock::time_point now_{};
  int ids_ = 0;
  McpHandler handler_;
};

TEST_F(SessionCapsTest, AtTheGlobalCapTheLargestHolderGivesUpItsOldestIdleSession) {
  // Domain a takes 3 (its own cap), b takes 1: the table is full (4).
  std::string a1 = Initialize("a").session_id;
  Initialize("a");
  Initialize("a");
  ASSERT_EQ(Initialize("b").reply.status, 200);
  ASSERT_EQ(handler_.SessionCount(), 4u);
  // c has none: a (3 sessions, more than c's 0 + 1) loses its least recently used one.
  McpDecision c = Initialize("c");
  ASSERT_EQ(c.reply.status, 200) << c.reply.body;
  EXPECT_EQ(c.evicted_sessions, 1u);
  EXPECT_EQ(handler_.SessionCount("a"), 2u);
  EXPECT_EQ(handler_.SessionCount("b"), 1u);
  EXPECT_EQ(handler_.SessionCount("c"), 1u);
  // a1 was the oldest: it is gone (404), the others still answer.
  EXPECT_EQ(handler_.Handle(Post("a", {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}, a1))
                .reply.status,
            404);
  // b (1) and c (1) hold no more than d's 0 + 1, a holds 2: a gives up another.
  EXPECT_EQ(Initialize("d").reply.status, 200);
  EXPECT_EQ(handler_.SessionCount("a"), 1u);
  // Now every domain holds one: a new domain e is refused rather than taking one (503).
  McpDecision e = Initialize("e");
  EXPECT_EQ(e.reply.status, 503);
  EXPECT_EQ(e.refused_by, "sessions");
  EXPECT_EQ(handler_.SessionCount(), 4u);
}

TEST_F(SessionCapsTest, SessionsWithACallInFlightAreNeverEvicted) {
  std::vector<std::string> a;
  for (int i = 0; i < 3; ++i) a.push_back(Initialize("a").session_id);
  ASSERT_EQ(Initialize("b").reply.status, 200);
  for (int i = 0; i < 3; ++i) {
    McpDecision d = handler_.Handle(Post("a", Call(i, "candidate_status", json::object()), a[i]));
    ASSERT_EQ(d.calls.size(), 1u) << d.reply.body;
  }
  McpDecision c = Initialize("c");
  EXPECT_EQ(c.reply.status, 503);
  EXPECT_EQ(handler_.SessionCount("a"), 3u);
  EXPECT_EQ(handler_.InflightCalls(), 3u);
}

TEST_F(SessionCapsTest, DeleteForgetsTheSessionsCallsInTheGauge) {
  std::string s = Initialize("a").session_id;
  ASSERT_EQ(handler_.Handle(Post("a", Call(1, "candidate_status", json::object()), s)).calls.size(),
            1u);
  EXPECT_EQ(handler_.InflightCalls(), 1u);
  McpRequest del = Post("a", json(), s);
  del.http_method = "DELETE";
  del.body.clear();
  EXPECT_EQ(handler_.Handle(del).reply.status, 204);
  EXPECT_EQ(handler_.SessionCount(), 0u);
  EXPECT_EQ(handler_.InflightCalls(), 0u);
}

// A dispatch that records what it was asked and answers calls only when told.
struct Recorder {
  McpHandler handler{McpOptions{}};
  std::vector<uint64_t> cancelled;
  std::map<uint64_t, ToolBackend::DoneFn> running;
  uint64_t next = 100;
  McpSessionDispatch Dispatch() {
    McpSessionDispatch d;
    d.call = [this](const ToolCall&, ToolBackend::ProgressFn, ToolBackend::DoneFn done) {
      running[next] = std::move(done);
      return next++;
    };
    d.cancel = [this](uint64_t h) { cancelled.push_back(h); };
    d.finished = [this](const std::string& s, const PendingCall& c) {
      return handler.CallFinished(s, c);
    };
    d.started = [this](const std::string& s, const PendingCall& c, uint64_t h) {
      return handler.CallStarted(s, c, h);
    };
    return d;
  }
};

TEST(DispatchSessionCallsTest, ACancelledCallIsCancelledByHandleAndAnsweredOnceAsCancelled) {
  Recorder r;
  std::string s = r.handler.Handle(Post("a", Init())).session_id;
  McpDecision call =
      r.handler.Handle(Post("a", Call(5, "build_candidate", {{"candidate", "x"}}), s));
  ASSERT_EQ(call.calls.size(), 1u);
  std::vector<std::pair<bool, bool>> answers;  // (is_error, cancelled)
  std::vector<McpCallSink> sinks(1);
  sinks[0].done = [&](ToolResult res, bool cancelled) {
    answers.push_back({res.is_error, cancelled});
  };
  DispatchSessionCalls(call, std::move(sinks), r.Dispatch());
  ASSERT_EQ(r.running.size(), 1u);
  EXPECT_TRUE(r.cancelled.empty());
  // notifications/cancelled on another POST names the running call's handle.
  McpDecision cancel = r.handler.Handle(Post(
      "a",
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 5}}}},
      s));
  EXPECT_EQ(cancel.reply.status, 202);
  DispatchSessionCalls(cancel, {}, r.Dispatch());
  ASSERT_EQ(r.cancelled, std::vector<uint64_t>{100});
  r.running[100](ToolResult{{{"status", "cancelled"}}, true});
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_TRUE(answers[0].first);
  EXPECT_TRUE(answers[0].second);
  EXPECT_EQ(r.handler.InflightCalls(), 0u);
}

TEST(DispatchSessionCallsTest, ACancelBeforeTheHandleIsKnownCancelsRightAfterTheCallStarts) {
  Recorder r;
  std::string s = r.handler.Handle(Post("a", Init())).session_id;
  McpDecision call =
      r.handler.Handle(Post("a", Call(6, "build_candidate", {{"candidate", "x"}}), s));
  // The cancellation is decided before the call was dispatched (no handle yet).
  McpDecision cancel = r.handler.Handle(Post(
      "a",
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 6}}}},
      s));
  EXPECT_TRUE(cancel.cancel.empty());
  DispatchSessionCalls(call, std::vector<McpCallSink>(1), r.Dispatch());
  EXPECT_EQ(r.cancelled, std::vector<uint64_t>{100});
}

TEST(LocalMcpSessionHostTest, DecidesDispatchesAndAnswersThroughTheSinks) {
  FakeToolBackend backend;
  LocalMcpSessionHost host(McpOptions{}, backend);
  McpFront front{McpOptions{}};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<McpDecision> decided;
  std::vector<ToolResult> answers;
  auto handle = [&](McpRequest req) {
    McpPreflight pre = front.Preflight(req);
    ASSERT_FALSE(pre.answer);
    host.Handle(req, std::move(pre), [&](const McpDecision& d) {
      std::lock_guard<std::mutex> l(mu);
      decided.push_back(d);
      std::vector<McpCallSink> sinks(d.calls.size());
      for (auto& s : sinks) {
        s.done = [&](ToolResult r, bool) {
          std::lock_guard<std::mutex> l2(mu);
          answers.push_back(std::move(r));
          cv.notify_all();
        };
      }
      return sinks;
    });
  };
  handle(Post("demo", Init()));
  ASSERT_EQ(decided.size(), 1u);
  ASSERT_EQ(decided[0].reply.status, 200);
  std::string s = decided[0].session_id;
  EXPECT_EQ(host.SessionCount(), 1u);
  handle(Post("demo", Call(2, "candidate_status", {{"candidate", "main"}}), s));
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return answers.size() == 1; }));
  EXPECT_EQ(decided.size(), 2u);
  EXPECT_EQ(backend.calls().at(0).tool, "candidate_status");
  EXPECT_EQ(backend.calls().at(0).domain, "demo");
  l.unlock();
  // Another domain's session is not found.
  handle(Post("other", Call(3, "candidate_status", {{"candidate", "main"}}), s));
  l.lock();
  ASSERT_EQ(decided.size(), 3u);
  EXPECT_EQ(decided[2].reply.status, 404);
}

}  // namespace
}  // namespace kiln
