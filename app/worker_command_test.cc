// `kiln worker`'s config: a valid file loads with paths resolved against its directory; every
// problem of the worker block is reported as `path: reason`, together with the rest of the
// file's problems from kiln's parser; a worker config with domains is refused.
#include "app/worker_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class WorkerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-worker-cfg-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (const char* f : {"w.crt", "w.key", "ca.crt", "token"}) std::ofstream(dir_ / f) << "x\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  json Valid() const {
    return {{"server", {{"state_dir", (dir_ / "state").string()}}},
            {"registries", {{"local", {{"url", "http://127.0.0.1:5000"}}}}},
            {"worker",
             {{"listen", "0.0.0.0:8710"},
              {"slots", 3},
              {"git_token_file", "token"},
              {"tls", {{"certificate", "w.crt"}, {"key", "w.key"}, {"scheduler_ca", "ca.crt"}}}}}};
  }
  std::vector<ConfigProblem> Load(const json& j, WorkerSettings* w) {
    std::ofstream(dir_ / "worker.json") << j.dump();
    Config site;
    json raw;
    return LoadWorkerConfig((dir_ / "worker.json").string(), w, &site, &raw);
  }
  static std::string Paths(const std::vector<ConfigProblem>& ps) {
    std::string s;
    for (const auto& p : ps) s += p.path + ";";
    return s;
  }
  fs::path dir_;
};

TEST_F(WorkerConfigTest, ValidConfigLoads) {
  WorkerSettings w;
  auto ps = Load(Valid(), &w);
  ASSERT_TRUE(ps.empty()) << FormatConfigProblem(ps.front());
  EXPECT_EQ(w.listen_host, "0.0.0.0");
  EXPECT_EQ(w.listen_port, 8710);
  EXPECT_EQ(w.slots, 3);
  EXPECT_EQ(w.name, "0.0.0.0:8710");
  EXPECT_EQ(w.tls.certificate_file, (dir_ / "w.crt").string());
  EXPECT_EQ(w.tls.peer_ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(w.git_token_file, (dir_ / "token").string());
  json j = Valid();
  j["worker"]["listen"] = "127.0.0.1:0";  // any free port
  ASSERT_TRUE(Load(j, &w).empty());
  EXPECT_EQ(w.listen_port, 0);
}

TEST_F(WorkerConfigTest, RetentionLimitsHaveDefaultsAndAreChecked) {
  WorkerSettings w;
  ASSERT_TRUE(Load(Valid(), &w).empty());
  EXPECT_EQ(w.retention.max_candidates, 128u);
  EXPECT_EQ(w.retention.max_candidates_per_domain, 64u);
  json j = Valid();
  j["worker"]["max_candidates"] = 5;
  j["worker"]["max_candidates_per_domain"] = 2;
  WorkerSettings w2;
  ASSERT_TRUE(Load(j, &w2).empty());
  EXPECT_EQ(w2.retention.max_candidates, 5u);
  EXPECT_EQ(w2.retention.max_candidates_per_domain, 2u);
  j["worker"]["max_candidates"] = 0;
  j["worker"]["max_candidates_per_domain"] = "many";
  WorkerSettings w3;
  auto ps = Load(j, &w3);
  EXPECT_EQ(Paths(ps), "worker.max_candidates;worker.max_candidates_per_domain;");
  ASSERT_FALSE(ps.empty());
  EXPECT_NE(ps[0].reason.find("1..100000"), std::string::npos) << ps[0].reason;
}

TEST_F(WorkerConfigTest, EveryProblemIsNamed) {
  json j = Valid();
  j["worker"]["listen"] = "nohost";
  j["worker"]["slots"] = 0;
  j["worker"]["tls"].erase("key");
  j["worker"]["tls"]["certificate"] = "missing.crt";
  j["worker"]["extra"] = true;
  j["registries"]["local"]["url"] = "ftp://x";
  WorkerSettings w;
  std::string paths = Paths(Load(j, &w));
  for (const char* p : {"worker.listen;", "worker.slots;", "worker.tls.key;",
                        "worker.tls.certificate;", "worker.extra;", "registries.local.url;"})
    EXPECT_NE(paths.find(p), std::string::npos) << p << " not in " << paths;
  j = Valid();
  j.erase("worker");
  EXPECT_EQ(Paths(Load(j, &w)), "worker;");
  j = Valid();
  j["domains"] = json::object();
  EXPECT_EQ(Paths(Load(j, &w)), "domains;");
}

}  // namespace
}  // namespace kiln
