#include "actors/tool_views.h"

#include <gtest/gtest.h>

#include "common/json_text.h"

namespace kiln {
namespace {

using json = nlohmann::json;

TEST(ToolViews, ParseBuildArgs) {
  BuildRequest r;
  ASSERT_TRUE(ParseBuildArgs({{"candidate", "c1"}}, &r).ok());
  EXPECT_EQ(r.candidate, "c1");
  EXPECT_TRUE(r.wait);
  ASSERT_TRUE(
      ParseBuildArgs({{"candidate", "c1"}, {"ref", "feature/x"}, {"wait", false}}, &r).ok());
  EXPECT_EQ(*r.ref, "feature/x");
  EXPECT_FALSE(r.wait);
  ASSERT_TRUE(ParseBuildArgs({{"candidate", "c1"}, {"commit", "abcdef1"}}, &r).ok());
  EXPECT_EQ(*r.commit, "abcdef1");
}

TEST(ToolViews, ParseDeployArgs) {
  DeployArgs a;
  ASSERT_TRUE(ParseDeployArgs({{"candidate", "c1"}}, &a).ok());
  EXPECT_EQ(a.candidate, "c1");
  EXPECT_FALSE(a.build_id.has_value());
  EXPECT_TRUE(a.wait);
  ASSERT_TRUE(ParseDeployArgs(
                  {{"candidate", "c1"}, {"build_id", "b-0123456789abcdef"}, {"wait", false}}, &a)
                  .ok());
  EXPECT_EQ(*a.build_id, "b-0123456789abcdef");
  EXPECT_FALSE(a.wait);
  EXPECT_NE(
      ParseDeployArgs({{"candidate", "c1"}, {"build_id", "../x"}}, &a).message().find("build_id"),
      std::string::npos);
  EXPECT_NE(ParseDeployArgs({{"candidate", "../c"}}, &a).message().find("candidate"),
            std::string::npos);
  EXPECT_NE(ParseDeployArgs({{"candidate", "c"}, {"image", "evil"}}, &a).message().find("image"),
            std::string::npos);
  EXPECT_FALSE(ParseDeployArgs({{"candidate", "c"}, {"wait", "yes"}}, &a).ok());
  EXPECT_FALSE(ParseDeployArgs(json::array(), &a).ok());
  std::optional<std::string> c;
  ASSERT_TRUE(ParseApplyArgs(json::object(), &c).ok());
  EXPECT_FALSE(c.has_value());
  ASSERT_TRUE(ParseApplyArgs({{"candidate", "c2"}}, &c).ok());
  EXPECT_EQ(*c, "c2");
  EXPECT_FALSE(ParseApplyArgs({{"candidate", 3}}, &c).ok());
}

TEST(ToolViews, RejectsBadBuildArgsWithClearMessages) {
  BuildRequest r;
  auto msg = [&](const json& j) { return ParseBuildArgs(j, &r).message(); };
  EXPECT_NE(msg(json::object()).find("candidate"), std::string::npos);
  EXPECT_NE(msg({{"candidate", 5}}).find("must be a string"), std::string::npos);
  EXPECT_NE(msg({{"candidate", "../x"}}).find("candidate name"), std::string::npos);
  EXPECT_NE(msg({{"candidate", "c"}, {"ref", "--upload-pack=x"}}).find("ref"), std::string::npos);
  EXPECT_NE(msg({{"candidate", "c"}, {"commit", "xyz"}}).find("commit"), std::string::npos);
  EXPECT_NE(msg({{"candidate", "c"}, {"wait", "yes"}}).find("wait"), std::string::npos);
  EXPECT_NE(msg({{"candidate", "c"}, {"source_dir", "/etc"}}).find("unknown argument"),
            std::string::npos);
  EXPECT_FALSE(ParseBuildArgs(json::array(), &r).ok());
  EXPECT_FALSE(ParseBuildArgs({{"candidate", std::string(100, 'a')}}, &r).ok());
}

TEST(ToolViews, SourceDirCannotBeSmuggledIn) {
  BuildRequest r;
  r.source_dir = "/etc";
  ASSERT_TRUE(ParseBuildArgs({{"candidate", "c1"}}, &r).ok());
  EXPECT_FALSE(r.source_dir.has_value());
}

TEST(ToolViews, LogArgs) {
  std::string id;
  size_t off, lim;
  ASSERT_TRUE(ParseLogArgs({{"build_id", "b-0123456789abcdef"}}, &id, &off, &lim).ok());
  EXPECT_EQ(off, 0u);
  EXPECT_EQ(lim, 65536u);
  EXPECT_FALSE(
      ParseLogArgs({{"build_id", "b-0123456789abcdef"}, {"offset", -1}}, &id, &off, &lim).ok());
  EXPECT_FALSE(
      ParseLogArgs({{"build_id", "b-0123456789abcdef"}, {"limit", 0}}, &id, &off, &lim).ok());
  EXPECT_FALSE(
      ParseLogArgs({{"build_id", "b-0123456789abcdef"}, {"limit", 1.5}}, &id, &off, &lim).ok());
  EXPECT_FALSE(ParseLogArgs({{"build_id", "../../etc/passwd"}}, &id, &off, &lim).ok());
  EXPECT_FALSE(IsValidBuildId("b-0123456789ABCDEF"));
}

TEST(ToolViews, LogTailArg) {  // issue 16
  std::string id;
  size_t off, lim, tail;
  const std::string b = "b-0123456789abcdef";
  ASSERT_TRUE(ParseLogArgs({{"build_id", b}}, &id, &off, &lim, &tail).ok());
  EXPECT_EQ(tail, 0u);
  ASSERT_TRUE(ParseLogArgs({{"build_id", b}, {"tail", 2000}}, &id, &off, &lim, &tail).ok());
  EXPECT_EQ(tail, 2000u);
  EXPECT_FALSE(ParseLogArgs({{"build_id", b}, {"tail", 0}}, &id, &off, &lim, &tail).ok());
  EXPECT_FALSE(
      ParseLogArgs({{"build_id", b}, {"tail", (1 << 20) + 1}}, &id, &off, &lim, &tail).ok());
  EXPECT_FALSE(ParseLogArgs({{"build_id", b}, {"tail", "10"}}, &id, &off, &lim, &tail).ok());
  Status st = ParseLogArgs({{"build_id", b}, {"tail", 10}, {"offset", 5}}, &id, &off, &lim, &tail);
  EXPECT_NE(st.message().find("cannot be combined with 'offset'"), std::string::npos)
      << st.message();
}

TEST(ToolViews, BuildJsonShapes) {
  BuildSnapshot s;
  s.id = "b-0123456789abcdef";
  s.candidate = "c1";
  s.status = BuildStatus::kFailed;
  auto o = std::make_shared<BuildOutcome>();
  o->status = BuildStatus::kFailed;
  o->diagnostics.push_back({"main.go", 3, 2, "error", "undefined: foo"});
  o->error = "build failed with 1 diagnostic(s)";
  s.outcome = o;
  json j = BuildJson(s);
  EXPECT_EQ(j["status"], "failed");
  EXPECT_TRUE(j["image"].is_null());
  EXPECT_EQ(j["diagnostics"][0]["file"], "main.go");
  EXPECT_EQ(j["diagnostics"][0]["line"], 3);
  EXPECT_EQ(j["error"], "build failed with 1 diagnostic(s)");
  EXPECT_TRUE(j["commit"].is_null());
  s.status = BuildStatus::kSucceeded;
  o->status = BuildStatus::kSucceeded;
  o->digest = "sha256:" + std::string(64, 'a');
  o->image_ref = "127.0.0.1:5000/loop/app@" + o->digest;
  o->error.clear();
  j = BuildJson(s);
  EXPECT_EQ(j["image"]["digest"], o->digest);
  EXPECT_EQ(j["status"], "succeeded");
  for (const char* k : {"build_id", "candidate", "commit", "status", "image", "diagnostics",
                        "log_tail", "cache_hit", "timings"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"queued_ms", "build_ms", "push_ms", "total_ms"})
    EXPECT_TRUE(j["timings"].contains(k)) << k;
}

// --- issue 18: build on push ---
TEST(ToolViews, BuildJsonReportsOnPushJoinAndWaitedMs) {
  BuildSnapshot s;
  s.id = "b-0123456789abcdef";
  s.candidate = "c1";
  s.status = BuildStatus::kRunning;
  json j = BuildJson(s);
  EXPECT_EQ(j["started_on_push"], false);
  EXPECT_EQ(j["joined"], false);
  EXPECT_TRUE(j["timings"]["waited_ms"].is_null()) << "nobody asked for it yet";
  s.started_on_push = true;
  s.joined = true;
  s.waited_ms = 17;
  j = BuildJson(s);
  EXPECT_EQ(j["started_on_push"], true);
  EXPECT_EQ(j["joined"], true);
  EXPECT_EQ(j["timings"]["waited_ms"], 17);
}
// --- end issue 18 ---

// --- every byte that reaches a result is safe (issue 15) ---
TEST(ToolViews, BuildJsonWithIllFormedBytesSerialisesAsValidUtf8) {
  const std::string hostile =
      "RUN printf '\xFF\xFE bad bytes\\n'\n\xFF\xFE bad\xC0\xAF\xED\xA0\x80\xE2\x82";
  auto o = std::make_shared<BuildOutcome>();
  o->status = BuildStatus::kFailed;
  o->error = "build failed: " + hostile;
  o->diagnostics.push_back({"main\xFF.go", 3, 1, "error", "undefined: \xFE" + hostile});
  BuildSnapshot b;
  b.id = "b-0123456789abcdef";
  b.candidate = "c1";
  b.status = BuildStatus::kFailed;
  b.outcome = o;
  b.log_tail = hostile;
  json j = BuildJson(b);
  std::string text;
  ASSERT_NO_THROW(text = j.dump()) << "the strict dump (as the bridge used to) must not throw";
  EXPECT_TRUE(IsValidUtf8(text));
  json back = json::parse(text);
  EXPECT_EQ(back["log_tail"], ToValidUtf8(hostile));
  EXPECT_EQ(back["error"], ToValidUtf8("build failed: " + hostile));
  EXPECT_EQ(back["diagnostics"][0]["file"], ToValidUtf8("main\xFF.go"));
  EXPECT_NE(back["log_tail"].get<std::string>().find(" bad bytes"), std::string::npos);
  // Snapshot error (no outcome) too.
  BuildSnapshot early = b;
  early.outcome = nullptr;
  early.error = hostile;
  EXPECT_NO_THROW(BuildJson(early).dump());
}

TEST(ToolViews, ValidMultiByteTextIsKeptAsIs) {
  BuildSnapshot b;
  b.id = "b-0123456789abcdef";
  b.candidate = "c1";
  b.log_tail = "compil\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5\n";
  EXPECT_EQ(BuildJson(b)["log_tail"], b.log_tail);
}

TEST(ToolViews, ErrorJsonIsValidUtf8) {
  json j = ErrorJson("deploy failed: \xFF\xFEoutput");
  EXPECT_NO_THROW(j.dump());
  EXPECT_EQ(j["error"], "deploy failed: \xEF\xBF\xBD\xEF\xBF\xBDoutput");
}
// --- end every byte safe ---

TEST(ToolViews, SummaryNamesTheLatestAndTheLatestSuccessWithItsOrder) {
  json idle = CandidateSummaryJson("c1", nullptr, nullptr, 0);
  EXPECT_EQ(idle["state"], "idle");
  EXPECT_TRUE(idle["latest_build"].is_null());
  EXPECT_TRUE(idle["latest_successful_build"].is_null());
  BuildSnapshot latest;
  latest.id = "b-0000000000000002";
  latest.status = BuildStatus::kRunning;
  BuildSnapshot ok;
  ok.id = "b-0000000000000001";
  auto o = std::make_shared<BuildOutcome>();
  o->digest = "sha256:ab";
  o->image_ref = "reg/c1@sha256:ab";
  ok.outcome = o;
  json j = CandidateSummaryJson("c1", &latest, &ok, 77);
  EXPECT_EQ(j["state"], "building");  // PhaseName of kRunning
  EXPECT_EQ(j["latest_build"]["build_id"], latest.id);
  EXPECT_EQ(j["latest_successful_build"]["order"], 77);
  EXPECT_EQ(j["latest_successful_build"]["digest"], "sha256:ab");
}

TEST(ToolViews, ToolErrorKindsDefaultByWhoseSideItIs) {
  EXPECT_EQ(ToolError("bad argument").structured["error_kind"], "invalid_argument");
  EXPECT_EQ(ToolError("internal error: x").structured["error_kind"], "infrastructure");
  EXPECT_EQ(ToolError("x", "not_pushed", "c1").structured["error_kind"], "not_pushed");
  EXPECT_TRUE(ToolError("x").is_error);
}

TEST(ToolViews, LogChunkAndStatusViews) {
  LogBuffer::Chunk c;
  c.text = "hello";
  c.offset = 3;
  c.next_offset = 8;
  c.dropped = 3;
  json j = LogChunkJson("b-0000000000000001", c);
  EXPECT_EQ(j["next_offset"], 8);
  EXPECT_EQ(j["dropped_bytes"], 3);
  EXPECT_EQ(j["complete"], false);
  json st = CandidateStatusJson("c1", nullptr, nullptr, nullptr, -1);
  EXPECT_TRUE(st["queue_position"].is_null());
  EXPECT_TRUE(st["deployed_build"].is_null());
  EXPECT_EQ(CandidateStatusJson("c1", nullptr, nullptr, nullptr, 4)["queue_position"], 4);
}

}  // namespace
}  // namespace kiln
