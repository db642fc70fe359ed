// The MCP transport actor against scripted domain actors (real CAF scheduler): answers,
// progress through the sink, cancellation before and after the build id is known, deadlines,
// and calls left in flight when kiln stops.
#include "actors/mcp_transport_actor.h"

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace kiln {
namespace {

struct Cfg : caf::actor_system_config {
  Cfg() {
    set("scheduler.max-threads", size_t{2});
    set("logger.verbosity", caf::atom("quiet"));
  }
};

// What the callbacks and the scripted domain saw, with a wait for a condition.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ToolResult> done;
  std::vector<double> progress;
  std::vector<std::string> cancelled_builds;  // cancel_build calls the domain got
  template <class Pred>
  bool WaitFor(Pred p) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(20), [&] { return p(); });
  }
};

McpCallCallbacks Callbacks(std::shared_ptr<Seen> seen) {
  return {[seen](const ToolProgress& p) {
            std::lock_guard<std::mutex> l(seen->mu);
            seen->progress.push_back(p.progress);
            seen->cv.notify_all();
          },
          [seen](ToolResult r) {
            std::lock_guard<std::mutex> l(seen->mu);
            seen->done.push_back(std::move(r));
            seen->cv.notify_all();
          }};
}

// A domain that answers candidate_status at once, never answers "hang", and for
// build_candidate reports started + progress to the sink and answers only after cancel_build.
caf::behavior ScriptedDomain(caf::event_based_actor* self, std::shared_ptr<Seen> seen) {
  auto pending = std::make_shared<std::vector<caf::response_promise>>();
  return {[=](tool_atom, ToolCall& call, caf::actor& sink) -> caf::result<ToolResult> {
    if (call.tool == "candidate_status") return ToolResult{{{"state", "idle"}}, false};
    if (call.tool == "cancel_build") {
      {
        std::lock_guard<std::mutex> l(seen->mu);
        seen->cancelled_builds.push_back(call.arguments["build_id"]);
        seen->cv.notify_all();
      }
      for (auto& rp : *pending) rp.deliver(ToolResult{{{"status", "cancelled"}}, true});
      pending->clear();
      return ToolResult{{{"ok", true}}, false};
    }
    if (call.tool == "build_candidate") {
      if (sink) {
        self->send(sink, started_atom::value, BuildId("b-42"));
        self->send(sink, progress_atom::value, ToolProgress{1, 3, "resolve"});
      }
      pending->push_back(self->make_response_promise());
      return pending->back();
    }
    // "hang": never answered (the promise is dropped silently only at exit)
    pending->push_back(self->make_response_promise());
    return pending->back();
  }};
}

class TransportActorTest : public ::testing::Test {
 protected:
  void Start(CallTimeouts t = {}) {
    domain_ = sys_.spawn(ScriptedDomain, seen_);
    transport_ = SpawnMcpTransport(sys_, {{"a", domain_}}, {{"a", t}});
  }
  void TearDown() override {
    caf::anon_send_exit(transport_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(domain_, caf::exit_reason::user_shutdown);
  }
  Cfg cfg_;
  caf::actor_system sys_{cfg_};
  std::shared_ptr<Seen> seen_ = std::make_shared<Seen>();
  caf::actor domain_;
  mcp_transport_actor transport_;
};

TEST_F(TransportActorTest, AnswersAQuickCallOnce) {
  Start();
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{1},
                 ToolCall{"a", "candidate_status", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  EXPECT_FALSE(seen_->done[0].is_error);
  EXPECT_EQ(seen_->done[0].structured["state"], "idle");
}

TEST_F(TransportActorTest, UnknownDomainIsAnError) {
  Start();
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{1},
                 ToolCall{"zz", "candidate_status", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  EXPECT_TRUE(seen_->done[0].is_error);
}

TEST_F(TransportActorTest, ProgressReachesTheCallAndCancelNamesItsBuild) {
  Start();
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{7},
                 ToolCall{"a", "build_candidate", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->progress.size() == 1; }));
  caf::anon_send(transport_, cancel_atom::value, uint64_t{7});
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  std::lock_guard<std::mutex> l(seen_->mu);
  ASSERT_EQ(seen_->cancelled_builds.size(), 1u);
  EXPECT_EQ(seen_->cancelled_builds[0], "b-42");
  EXPECT_EQ(seen_->done[0].structured["status"], "cancelled");
}

TEST_F(TransportActorTest, CancelBeforeTheBuildIdIsKnownCancelsOnceItIs) {
  Start();
  // The cancel is queued right behind the call: it reaches the transport actor before the
  // domain's started message.
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{8},
                 ToolCall{"a", "build_candidate", {{"candidate", "x"}}}, Callbacks(seen_));
  caf::anon_send(transport_, cancel_atom::value, uint64_t{8});
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  std::lock_guard<std::mutex> l(seen_->mu);
  ASSERT_EQ(seen_->cancelled_builds.size(), 1u);
  EXPECT_EQ(seen_->cancelled_builds[0], "b-42");
}

TEST_F(TransportActorTest, ACallPastItsDeadlineIsAnsweredWithATimeout) {
  CallTimeouts t;
  t.quick = std::chrono::seconds(1);
  Start(t);
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{3},
                 ToolCall{"a", "hang", nlohmann::json::object()}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  EXPECT_TRUE(seen_->done[0].is_error);
  EXPECT_EQ(seen_->done[0].structured["error_kind"], "timeout");
}

TEST_F(TransportActorTest, CallsInFlightWhenKilnStopsAreAnswered) {
  Start();
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{4},
                 ToolCall{"a", "hang", nlohmann::json::object()}, Callbacks(seen_));
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{5},
                 ToolCall{"a", "build_candidate", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->progress.size() == 1; }));
  caf::anon_send_exit(transport_, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 2; }));
  std::lock_guard<std::mutex> l(seen_->mu);
  for (const auto& r : seen_->done) {
    EXPECT_TRUE(r.is_error);
    EXPECT_NE(r.structured["error"].get<std::string>().find("kiln stopped"), std::string::npos);
  }
}

// Issue 17: a request's stream closed mid-build (build.cancel_on_disconnect).
TEST_F(TransportActorTest, AClosedStreamCancelsTheBuildWhenTheDomainSaysSo) {
  CallTimeouts t;
  t.cancel_on_disconnect = true;
  Start(t);
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{9},
                 ToolCall{"a", "build_candidate", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->progress.size() == 1; }));
  caf::anon_send(transport_, disconnect_atom::value, uint64_t{9});
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));  // the slot is freed
  std::lock_guard<std::mutex> l(seen_->mu);
  ASSERT_EQ(seen_->cancelled_builds.size(), 1u);
  EXPECT_EQ(seen_->cancelled_builds[0], "b-42");
}

TEST_F(TransportActorTest, AClosedStreamKeepsTheBuildByDefault) {
  Start();
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{9},
                 ToolCall{"a", "build_candidate", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->progress.size() == 1; }));
  caf::anon_send(transport_, disconnect_atom::value, uint64_t{9});
  // A later call through the transport reaches the domain after anything the disconnect sent.
  caf::anon_send(transport_, mcp_call_atom::value, uint64_t{10},
                 ToolCall{"a", "candidate_status", {{"candidate", "x"}}}, Callbacks(seen_));
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->done.size() == 1; }));
  std::lock_guard<std::mutex> l(seen_->mu);
  EXPECT_EQ(seen_->done[0].structured["state"], "idle");  // the status answer, not the build's
  EXPECT_TRUE(seen_->cancelled_builds.empty());           // the build keeps running
}

// Issue 17: the session revisions' table lives in the actor. Requests go in through the
// McpSessionHost that ServeMcpSessions returns; decisions come back through `decided`.
class TransportSessionsTest : public TransportActorTest {
 protected:
  struct Got {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<McpDecision> decided;
    std::vector<std::pair<ToolResult, bool>> answers;
  };
  void StartSessions(McpOptions o) {
    Start();
    front_ = std::make_unique<McpFront>(o);
    host_ = ServeMcpSessions(sys_, transport_, std::move(o));
    ASSERT_TRUE(host_);
  }
  // Sends one request and waits for its decision.
  McpDecision Send(const std::string& domain, const nlohmann::json& body,
                   std::optional<std::string> session = std::nullopt) {
    McpRequest r;
    r.http_method = "POST";
    r.domain = domain;
    r.accept = "application/json";
    r.content_type = "application/json";
    r.session_id = std::move(session);
    r.body = body.dump();
    McpPreflight pre = front_->Preflight(r);
    EXPECT_FALSE(pre.answer);
    size_t before;
    {
      std::lock_guard<std::mutex> l(got_->mu);
      before = got_->decided.size();
    }
    auto got = got_;
    host_->Handle(r, std::move(pre), [got](const McpDecision& d) {
      std::lock_guard<std::mutex> l(got->mu);
      got->decided.push_back(d);
      std::vector<McpCallSink> sinks(d.calls.size());
      for (auto& s : sinks) {
        s.done = [got](ToolResult res, bool cancelled) {
          std::lock_guard<std::mutex> l2(got->mu);
          got->answers.push_back({std::move(res), cancelled});
          got->cv.notify_all();
        };
      }
      got->cv.notify_all();
      return sinks;
    });
    std::unique_lock<std::mutex> l(got_->mu);
    EXPECT_TRUE(got_->cv.wait_for(l, std::chrono::seconds(20),
                                  [&] { return got_->decided.size() > before; }));
    return got_->decided.size() > before ? got_->decided.back() : McpDecision{};
  }
  static nlohmann::json Init() {
    return {{"jsonrpc", "2.0"},
            {"id", 0},
            {"method", "initialize"},
            {"params",
             {{"protocolVersion", "2025-11-25"}, {"capabilities", nlohmann::json::object()}}}};
  }
  static nlohmann::json CallMsg(int id, const std::string& tool, nlohmann::json args) {
    return {{"jsonrpc", "2.0"},
            {"id", id},
            {"method", "tools/call"},
            {"params", {{"name", tool}, {"arguments", std::move(args)}}}};
  }
  std::unique_ptr<McpFront> front_;
  std::shared_ptr<McpSessionHost> host_;
  std::shared_ptr<Got> got_ = std::make_shared<Got>();
};

TEST_F(TransportSessionsTest, TheActorOwnsSessionsAndRoutesTheirCalls) {
  McpOptions o;
  o.max_sessions_per_domain = 1;
  StartSessions(o);
  McpDecision init = Send("a", Init());
  ASSERT_EQ(init.reply.status, 200) << init.reply.body;
  const std::string s = init.session_id;
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(host_->SessionCount(), 1u);
  // A call on the session goes from the actor's table to the domain and back to its sink.
  McpDecision call = Send("a", CallMsg(1, "candidate_status", {{"candidate", "x"}}), s);
  ASSERT_EQ(call.calls.size(), 1u);
  {
    std::unique_lock<std::mutex> l(got_->mu);
    ASSERT_TRUE(
        got_->cv.wait_for(l, std::chrono::seconds(20), [&] { return got_->answers.size() == 1; }));
    EXPECT_EQ(got_->answers[0].first.structured["state"], "idle");
    EXPECT_FALSE(got_->answers[0].second);
  }
  // Another domain does not see the session.
  EXPECT_EQ(Send("b", CallMsg(2, "candidate_status", {{"candidate", "x"}}), s).reply.status, 404);
  // The domain's cap (1): a second initialize evicts its idle session, never another domain's.
  McpDecision again = Send("a", Init());
  ASSERT_EQ(again.reply.status, 200);
  EXPECT_EQ(again.evicted_sessions, 1u);
  EXPECT_EQ(Send("a", CallMsg(3, "candidate_status", {{"candidate", "x"}}), s).reply.status, 404);
  EXPECT_EQ(host_->SessionCount(), 1u);
}

TEST_F(TransportSessionsTest, ACancelledSessionCallCancelsItsBuildAndIsAnsweredCancelled) {
  StartSessions(McpOptions{});
  const std::string s = Send("a", Init()).session_id;
  ASSERT_EQ(Send("a", CallMsg(9, "build_candidate", {{"candidate", "x"}}), s).calls.size(), 1u);
  // notifications/cancelled arrives on another POST; the actor cancels the build (b-42) once
  // the domain reported it.
  McpDecision n = Send(
      "a",
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 9}}}},
      s);
  EXPECT_EQ(n.reply.status, 202);
  ASSERT_TRUE(seen_->WaitFor([&] { return seen_->cancelled_builds.size() == 1; }));
  EXPECT_EQ(seen_->cancelled_builds[0], "b-42");
  std::unique_lock<std::mutex> l(got_->mu);
  ASSERT_TRUE(
      got_->cv.wait_for(l, std::chrono::seconds(20), [&] { return got_->answers.size() == 1; }));
  EXPECT_TRUE(got_->answers[0].second);  // cancelled by the client
  EXPECT_EQ(host_->InflightCalls(), 0u);
}

}  // namespace
}  // namespace kiln
