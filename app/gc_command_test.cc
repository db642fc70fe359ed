// Issue 19: `kiln gc --dry-run` reports what would go and deletes nothing; the journal's
// latest successful image keeps its build-key entry.
#include "app/gc_command.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "state/state_store.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

class GcCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "kiln-gc-cmd-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir_ = t;
    json cfg = {{"server", {{"state_dir", (dir_ / "state").string()}}},
                {"registries", {{"local", {{"url", "http://127.0.0.1:5000"}}}}},
                {"storage", {{"max_gb", 1}}},
                {"domains",
                 {{"a",
                   {{"token_sha256", {std::string(64, 'a')}},
                    {"build", {{"mode", "containerfile"}}},
                    {"image", {{"registry", "local"}, {"repository", "loop/a"}}},
                    {"storage", {{"max_gb", 1.0 / 1024}}}}}}}};
    std::ofstream(dir_ / "kiln.json") << cfg.dump();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void File(const fs::path& rel, size_t bytes) {
    fs::create_directories((dir_ / "state" / rel).parent_path());
    std::ofstream(dir_ / "state" / rel) << std::string(bytes, 'x');
  }
  int Run(bool dry_run, json* out_json, std::string* err_text = nullptr) {
    std::ostringstream out, err;
    int rc = GcCommand({{"config", (dir_ / "kiln.json").string()}}, dry_run, out, err);
    if (out_json) *out_json = json::parse(out.str(), nullptr, false);
    if (err_text) *err_text = err.str();
    return rc;
  }
  fs::path dir_;
};

TEST_F(GcCommandTest, DryRunListsWhatWouldGoAndDeletesNothing) {
  File("domains/a/candidates/c1/storage/layer", 3 << 20);
  // A succeeded build of c2 in the journal: its key entry names the latest successful image.
  {
    StateStore store(StateStoreOptions{});
    LoadSummary sum;
    ASSERT_TRUE(store.Load((dir_ / "state" / "state").string(), &sum).ok());
    BuildRecord b;
    b.domain = "a";
    b.candidate = "c2";
    ASSERT_TRUE(store.RecordBuildStarted(&b).ok());
    BuildFinish f;
    f.id = b.id;
    f.status = BuildStatus::kSucceeded;
    f.digest = "sha256:" + std::string(64, 'd');
    f.image_ref = "127.0.0.1:5000/loop/a@" + f.digest;
    ASSERT_TRUE(store.RecordBuildFinished(f).ok());
  }
  std::string key(64, 'e');
  fs::create_directories(dir_ / "state/keys");
  std::ofstream(dir_ / "state/keys" / (key + ".json")) << json{
      {"key", key},
      {"image_ref", "127.0.0.1:5000/loop/a@sha256:" + std::string(64, 'd')},
      {"digest", "sha256:" + std::string(64, 'd')}}.dump();
  json j;
  ASSERT_EQ(Run(true, &j), 0);
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["dry_run"].get<bool>());
  ASSERT_EQ(j["delete"].size(), 1u) << j.dump();
  EXPECT_EQ(j["delete"][0]["path"], "domains/a/candidates/c1/storage");
  EXPECT_EQ(j["delete"][0]["kind"], "candidate_storage");
  EXPECT_GE(j["domains"]["a"]["bytes"].get<int64_t>(), 3 << 20);
  EXPECT_EQ(j["domains"]["a"]["budget_bytes"].get<int64_t>(), 1 << 20);
  EXPECT_FALSE(j["domains"]["a"]["over_budget"].get<bool>());
  EXPECT_GT(j["bytes_by_kind"]["journal"].get<int64_t>(), 0);
  EXPECT_TRUE(fs::exists(dir_ / "state/domains/a/candidates/c1/storage/layer"));
  EXPECT_TRUE(fs::exists(dir_ / "state/keys" / (key + ".json")));
}

TEST_F(GcCommandTest, WithoutDryRunIsAUsageError) {
  std::string err;
  EXPECT_EQ(Run(false, nullptr, &err), 2);
  EXPECT_NE(err.find("only --dry-run"), std::string::npos);
}

TEST_F(GcCommandTest, BadConfigIsExitOne) {
  std::ofstream(dir_ / "kiln.json") << "{";
  std::string err;
  EXPECT_EQ(Run(true, nullptr, &err), 1);
  EXPECT_FALSE(err.empty());
}

}  // namespace
}  // namespace kiln
