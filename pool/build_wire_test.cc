// The build messages between scheduler and worker: a domain's build config survives the trip
// through the config file's shape and kiln's parser (what the worker validates with); requests
// and answers round-trip; a malformed request is refused naming the field.
#include "pool/build_wire.h"

#include <gtest/gtest.h>

#include "config/config_parser.h"

namespace kiln {
namespace {

using nlohmann::json;

const char* kRegistries = R"({"main": {"url": "http://127.0.0.1:5000"}})";

// Parses `build` as domain d's build block next to kRegistries.
std::vector<ConfigProblem> Reparse(const json& build, BuildConfig* out) {
  json doc = {{"server", {{"state_dir", "/tmp"}}},
              {"registries", json::parse(kRegistries)},
              {"domains",
               {{"d",
                 {{"token_sha256", {std::string(64, 'a')}},
                  {"build", build},
                  {"image", {{"registry", "main"}, {"repository", "loop/app"}}}}}}}};
  Config c;
  auto problems = ParseConfig(doc.dump(), &c);
  if (problems.empty()) *out = c.domains.at("d").build;
  return problems;
}

TEST(BuildWire, LayeredBuildConfigSurvivesTheParser) {
  BuildConfig b;
  b.mode = "layered";
  b.timeout_s = 77;
  b.compression = "none";
  b.network = "host";
  b.user = "builder2";
  b.max_file_mb = 12;
  b.base_images = std::vector<std::string>{"base/*"};
  b.limits.max_processes = 99;
  b.limits.max_memory_mb = 512;
  b.on_push = false;
  b.cancel_on_disconnect = true;
  b.layered.emplace();
  b.layered->base_image = "127.0.0.1:5000/base/go@sha256:" + std::string(64, 'b');
  b.layered->command = {"go", "build", "-o", "out/app", "."};
  b.layered->env = {{"CGO_ENABLED", "0"}};
  b.layered->caches = {{"GOCACHE", "go-build"}};
  b.layered->outputs = {{"out/app", "/app"}};
  b.layered->entrypoint = {"/app"};
  BuildConfig back;
  auto problems = Reparse(BuildConfigToJson(b), &back);
  ASSERT_TRUE(problems.empty()) << FormatConfigProblem(problems.front());
  EXPECT_EQ(back.mode, "layered");
  EXPECT_EQ(back.timeout_s, 77);
  EXPECT_EQ(back.compression, "none");
  EXPECT_EQ(back.network, "host");
  EXPECT_TRUE(back.containerfile.network);
  EXPECT_EQ(back.user, "builder2");
  EXPECT_EQ(back.max_file_mb, 12);
  ASSERT_TRUE(back.base_images);
  EXPECT_EQ(*back.base_images, std::vector<std::string>{"base/*"});
  EXPECT_EQ(back.limits.max_processes, 99);
  EXPECT_EQ(back.limits.max_memory_mb, 512);
  EXPECT_FALSE(back.on_push);
  EXPECT_TRUE(back.cancel_on_disconnect);
  ASSERT_TRUE(back.layered);
  EXPECT_EQ(back.layered->base_image, b.layered->base_image);
  EXPECT_EQ(back.layered->command, b.layered->command);
  EXPECT_EQ(back.layered->env, b.layered->env);
  EXPECT_EQ(back.layered->caches, b.layered->caches);
  ASSERT_EQ(back.layered->outputs.size(), 1u);
  EXPECT_EQ(back.layered->outputs[0].to, "/app");
  EXPECT_EQ(back.layered->entrypoint, b.layered->entrypoint);
}

TEST(BuildWire, ContainerfileBuildConfigSurvivesTheParser) {
  BuildConfig b;
  b.containerfile.file = "build/Containerfile";
  b.containerfile.context = "src";
  b.containerfile.target = "runtime";
  b.containerfile.build_args = {{"VERSION", "3"}};
  b.containerfile.step_cache = "never";
  BuildConfig back;
  auto problems = Reparse(BuildConfigToJson(b), &back);
  ASSERT_TRUE(problems.empty()) << FormatConfigProblem(problems.front());
  EXPECT_EQ(back.mode, "containerfile");
  EXPECT_EQ(back.containerfile.file, "build/Containerfile");
  EXPECT_EQ(back.containerfile.context, "src");
  ASSERT_TRUE(back.containerfile.target);
  EXPECT_EQ(*back.containerfile.target, "runtime");
  EXPECT_EQ(back.containerfile.build_args, b.containerfile.build_args);
  EXPECT_FALSE(back.containerfile.network);
  EXPECT_EQ(back.containerfile.step_cache, "never");
  EXPECT_FALSE(back.layered);
}

TEST(BuildWire, RootBuildUserInARequestIsRefusedByTheParser) {
  BuildConfig b;
  json j = BuildConfigToJson(b);
  j["user"] = "root";
  BuildConfig back;
  auto problems = Reparse(j, &back);
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems.front().path, "domains.d.build.user");
}

TEST(BuildWire, RequestRoundTrips) {
  RemoteBuildRequest r;
  r.op = "push";
  r.build_id = "b-12";
  r.domain = "d";
  r.candidate = "c1";
  r.commit = std::string(40, 'f');
  r.key = "k";
  r.git_url = "http://127.0.0.1:8700/git/d.git";
  r.image_registry = "main";
  r.image_repository = "loop/app";
  r.build = BuildConfigToJson(BuildConfig{});
  r.image_id = "sha256:x";
  r.sent_unix_ms = 1234;
  RemoteBuildRequest back;
  ASSERT_TRUE(RemoteBuildRequestFromText(RemoteBuildRequestToText(r), &back).ok());
  EXPECT_EQ(back.op, "push");
  EXPECT_EQ(back.build_id, "b-12");
  EXPECT_EQ(back.candidate, "c1");
  EXPECT_EQ(back.commit, r.commit);
  EXPECT_EQ(back.git_url, r.git_url);
  EXPECT_EQ(back.image_registry, "main");
  EXPECT_EQ(back.image_repository, "loop/app");
  EXPECT_EQ(back.build, r.build);
  EXPECT_EQ(back.image_id, "sha256:x");
  EXPECT_EQ(back.sent_unix_ms, 1234);
}

TEST(BuildWire, MalformedRequestNamesTheField) {
  RemoteBuildRequest out;
  Status st = RemoteBuildRequestFromText(R"({"op":"build","build_id":7})", &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'build_id'"), std::string::npos) << st.message();
  EXPECT_FALSE(RemoteBuildRequestFromText("not json", &out).ok());
}

TEST(BuildWire, AnswersRoundTripWithStatusCodes) {
  RemoteBuildAnswer a;
  a.op = "build";
  a.build_id = "b-1";
  a.worker = "w1";
  a.build.status = Status::DeadlineExceeded("too slow");
  a.build.compile_failed = true;
  a.build.failure_kind = "test";
  a.build.timings = {{"dispatch_ms", 3}};
  a.log = "line\n";
  RemoteBuildAnswer back;
  ASSERT_TRUE(RemoteBuildAnswerFromText(RemoteBuildAnswerToText(a), &back).ok());
  EXPECT_EQ(back.build.status.code(), Status::Code::kDeadlineExceeded);
  EXPECT_EQ(back.build.status.message(), "too slow");
  EXPECT_TRUE(back.build.compile_failed);
  EXPECT_EQ(back.build.failure_kind, "test");
  EXPECT_EQ(back.build.timings.at("dispatch_ms"), 3);
  EXPECT_EQ(back.log, "line\n");
  EXPECT_EQ(back.worker, "w1");

  RemoteBuildAnswer p;
  p.op = "push";
  p.build_id = "b-1";
  p.push.digest = "sha256:abc";
  p.push.ref = "r@sha256:abc";
  ASSERT_TRUE(RemoteBuildAnswerFromText(RemoteBuildAnswerToText(p), &back).ok());
  EXPECT_TRUE(back.push.status.ok());
  EXPECT_EQ(back.push.digest, "sha256:abc");
  EXPECT_EQ(StatusFromWire(99, "x").code(), Status::Code::kInternal);
}

// A build's answer carries what the worker holds warm after it (evicted candidates gone), so
// the scheduler's placement stops counting them warm.
TEST(BuildWire, BuildAnswerCarriesTheWarmCandidates) {
  RemoteBuildAnswer a;
  a.op = "build";
  a.build_id = "b-1";
  a.info = {{"slots", 1}, {"warm", {"d/p2", "d/p3"}}};
  RemoteBuildAnswer back;
  ASSERT_TRUE(RemoteBuildAnswerFromText(RemoteBuildAnswerToText(a), &back).ok());
  EXPECT_EQ(back.info["warm"], nlohmann::json({"d/p2", "d/p3"}));
  a.info = nlohmann::json::object();  // an older worker's answer: no info, nothing to sync
  ASSERT_TRUE(RemoteBuildAnswerFromText(RemoteBuildAnswerToText(a), &back).ok());
  EXPECT_FALSE(back.info.contains("warm"));
}

}  // namespace
}  // namespace kiln
