// libFuzzer target: McpHandler (transport/mcp_handler.h) with a FakeToolBackend.
//
// Input: up to 4 HTTP requests separated by "\n--\n", sent after a fixed initialize that opens a
// session. Each request's first byte picks the HTTP method, Accept, Content-Type, session id
// and MCP-Protocol-Version; the rest is the body. Tool calls the handler decides to dispatch
// run on a FakeToolBackend (zero build time, one per process) and are assembled by
// McpResponseStream. Invariants: Handle never throws; JSON replies parse; every dispatched call
// finishes; a complete JSON-mode stream yields a parseable body. Single-threaded apart from the
// backend's worker thread; every call has finished before the input ends.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "fuzz/fuzz_target.h"
#include "transport/fake_tool_backend.h"
#include "transport/mcp_handler.h"

namespace {

using kiln::McpDecision;
using kiln::McpHandler;
using kiln::McpRequest;
using nlohmann::json;

void CheckReply(const kiln::HttpReply& r) {
  KILN_FUZZ_CHECK(r.status >= 100 && r.status < 600);
  if (r.content_type == "application/json" && !r.body.empty()) {
    KILN_FUZZ_CHECK(!json::parse(r.body, nullptr, false).is_discarded());
  }
}

// Runs the decision's calls on a fake backend and checks the assembled answer.
void Dispatch(McpHandler& handler, const McpDecision& d) {
  // One backend per process: starting its worker thread per input would dominate the run
  // time. It only hands out handles and canned results, so inputs stay independent.
  static kiln::FakeToolBackend& backend = *[] {
    kiln::FakeToolBackend::Options bo;
    bo.build_duration = std::chrono::milliseconds(0);
    bo.progress_interval = std::chrono::milliseconds(1);
    return new kiln::FakeToolBackend(bo);
  }();
  kiln::McpResponseStream stream(d, "stream");
  stream.Start();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<kiln::ToolResult>> results(d.calls.size());
  size_t done = 0;
  for (size_t i = 0; i < d.calls.size(); ++i) {
    const kiln::PendingCall& call = d.calls[i];
    uint64_t h = backend.Call(
        call.call,
        [&, i](const kiln::ToolProgress& p) {
          std::lock_guard<std::mutex> lock(mu);
          stream.OnProgress(i, p);
        },
        [&, i](kiln::ToolResult r) {
          std::lock_guard<std::mutex> lock(mu);
          results[i] = std::move(r);
          ++done;
          cv.notify_all();
        });
    if (handler.CallStarted(d.session_id, call, h)) backend.Cancel(h);
  }
  for (uint64_t h : d.cancel) backend.Cancel(h);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == d.calls.size(); });
  for (size_t i = 0; i < d.calls.size(); ++i) {
    bool cancelled = handler.CallFinished(d.session_id, d.calls[i]);
    stream.OnDone(i, *results[i], cancelled);
  }
  KILN_FUZZ_CHECK(stream.complete());
  if (!stream.sse())
    KILN_FUZZ_CHECK(!json::parse(stream.JsonBody(), nullptr, false).is_discarded());
}

McpRequest MakeRequest(uint8_t flags, std::string_view body, const std::string& session) {
  static const char* kMethods[] = {"POST", "POST", "DELETE", "GET"};
  static const char* kAccepts[] = {"application/json, text/event-stream", "application/json",
                                   "text/event-stream", nullptr};
  McpRequest r;
  r.http_method = kMethods[flags & 3];
  r.domain = "d";
  if (const char* a = kAccepts[(flags >> 2) & 3]) r.accept = a;
  r.content_type = (flags & 16) ? "text/plain" : "application/json";
  switch ((flags >> 5) & 3) {
    case 0:
    case 3:
      r.session_id = session;
      break;
    case 1:
      break;
    case 2:
      r.session_id = "bogus";
      break;
  }
  if (flags & 128) r.protocol_version = "2025-03-26";
  r.body = std::string(body);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto now = std::chrono::steady_clock::time_point{};
  uint64_t ids = 0;
  McpHandler::Options o;
  o.max_calls_per_session = 4;
  o.max_json_depth = 32;
  o.tool_aliases["d"] = {{"build", "build_candidate"}, {"loop", "loop"}};
  o.clock = [&now] { return now; };
  o.new_session_id = [&ids] { return "s" + std::to_string(++ids); };
  McpHandler handler(o);

  McpRequest init;
  init.http_method = "POST";
  init.domain = "d";
  init.accept = "application/json, text/event-stream";
  init.content_type = "application/json";
  init.body =
      R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}})";
  McpDecision first = handler.Handle(init);
  std::string session = first.session_id;

  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (std::string_view part : kiln::fuzz::Split(in, "\n--\n", 4)) {
    if (part.empty()) continue;
    McpDecision d =
        handler.Handle(MakeRequest(static_cast<uint8_t>(part[0]), part.substr(1), session));
    if (d.calls.empty()) {
      CheckReply(d.reply);
    } else {
      Dispatch(handler, d);
    }
    if (!d.session_id.empty()) session = d.session_id;
    now += std::chrono::minutes(10);
  }
  KILN_FUZZ_CHECK(handler.InflightCalls() == 0);
  now += std::chrono::hours(2);
  handler.EvictIdle();
  KILN_FUZZ_CHECK(handler.SessionCount() == 0);
  return 0;
}
