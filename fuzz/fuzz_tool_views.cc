// libFuzzer target: the tool-result views (actors/tool_views.h) and the build log
// (builder/log_buffer.h) on hostile bytes, as a build or a deployed program may print them.
// Input: first byte picks the build status and the log chunk size; the rest is split at
// "\n--\n" into log bytes, error message, diagnostic file, diagnostic message, candidate name.
// Invariants: BuildJson/ErrorJson never throw and serialise (with the strict dump) to valid
// UTF-8 that parses back; LogBuffer text is valid UTF-8, chunked reads make progress, lose no
// byte and reassemble exactly the text of one read; ToValidUtf8 is idempotent and keeps valid
// input unchanged. Stateless; single-threaded.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "actors/tool_views.h"
#include "builder/log_buffer.h"
#include "common/json_text.h"
#include "fuzz/fuzz_target.h"

namespace {

void CheckSerialises(const nlohmann::json& j) {
  std::string text = j.dump();  // strict: throws on ill-formed UTF-8
  KILN_FUZZ_CHECK(kiln::fuzz::IsValidUtf8(text));
  KILN_FUZZ_CHECK(kiln::IsValidUtf8(text));
  KILN_FUZZ_CHECK(nlohmann::json::parse(text) == j);
  KILN_FUZZ_CHECK(kiln::DumpJson(j) == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parts = fuzz::Split(in, "\n--\n", 5);
  parts.resize(5);
  const std::string log(parts[0]), error(parts[1]), file(parts[2]), message(parts[3]),
      candidate(parts[4]);

  // UTF-8 repair itself.
  std::string fixed = ToValidUtf8(log);
  KILN_FUZZ_CHECK(fuzz::IsValidUtf8(fixed));
  KILN_FUZZ_CHECK(ToValidUtf8(fixed) == fixed);
  KILN_FUZZ_CHECK(IsValidUtf8(log) == fuzz::IsValidUtf8(log));
  if (IsValidUtf8(log)) KILN_FUZZ_CHECK(fixed == log);

  // The build view with hostile bytes everywhere a build's output can reach.
  static const BuildStatus kStatuses[] = {BuildStatus::kQueued, BuildStatus::kRunning,
                                          BuildStatus::kSucceeded, BuildStatus::kFailed,
                                          BuildStatus::kCancelled};
  auto o = std::make_shared<BuildOutcome>();
  o->status = kStatuses[flags % 5];
  o->error = error;
  o->diagnostics.push_back({file, 1, 2, "error", message});
  o->log_tail = log;
  o->image_ref = candidate;
  o->digest = (flags & 8) ? message : "";
  BuildSnapshot b;
  b.id = "b-0123456789abcdef";
  b.candidate = candidate;
  b.commit = (flags & 16) ? error : "";
  b.status = o->status;
  b.outcome = (flags & 32) ? nullptr : o;
  b.error = (flags & 32) ? error : "";
  b.log_tail = log;
  CheckSerialises(BuildJson(b));
  CheckSerialises(ErrorJson(error));
  CheckSerialises(ErrorJson("build '" + candidate + "' not found"));

  // Arbitrary JSON made valid, then dumped safely.
  nlohmann::json any = {{log, error}, {"k", {file, message}}};
  KILN_FUZZ_CHECK(IsValidUtf8(DumpJson(any)));
  MakeValidUtf8(&any);
  CheckSerialises(any);

  // The build log, written in two pieces (a character may be split between them) and read in
  // chunks of 1..8 bytes.
  LogBuffer buf(1 << 20);
  size_t half = log.size() / 2;
  buf.Append(std::string_view(log).substr(0, half));
  auto early = buf.Read(0, 1 << 20);
  KILN_FUZZ_CHECK(fuzz::IsValidUtf8(early.text));
  KILN_FUZZ_CHECK(early.next_offset <= half);
  buf.Append(std::string_view(log).substr(half));
  buf.Close();
  auto whole = buf.Read(0, 1 << 20);
  KILN_FUZZ_CHECK(whole.text == fixed);
  KILN_FUZZ_CHECK(whole.complete && whole.next_offset == log.size());
  size_t limit = 1 + (flags >> 5);
  std::string joined;
  size_t off = 0;
  while (true) {
    auto c = buf.Read(off, limit);
    KILN_FUZZ_CHECK(fuzz::IsValidUtf8(c.text));
    KILN_FUZZ_CHECK(c.offset == off);
    if (off < log.size()) KILN_FUZZ_CHECK(c.next_offset > off);
    KILN_FUZZ_CHECK(c.next_offset - off <= limit + 3);
    joined += c.text;
    off = c.next_offset;
    if (c.complete) break;
  }
  KILN_FUZZ_CHECK(joined == fixed);
  KILN_FUZZ_CHECK(fuzz::IsValidUtf8(buf.Tail(1 + flags)));
  return 0;
}
