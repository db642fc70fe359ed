#include "config/config_parser.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/host_checks.h"

namespace kiln {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kHashA(64, 'a');
const std::string kHashB(64, 'b');
const std::string kHashC(64, 'c');
const std::string kDigest = "sha256:" + std::string(64, 'd');

std::string Describe(const std::vector<ConfigProblem>& problems) {
  std::string s;
  for (const auto& p : problems) s += "  " + FormatConfigProblem(p) + "\n";
  return s.empty() ? "  (no problems)\n" : s;
}

bool HasPath(const std::vector<ConfigProblem>& problems, const std::string& path) {
  for (const auto& p : problems)
    if (p.path == path) return true;
  return false;
}

// A host on which every build-isolation check passes (the real host is not consulted).
HostFacts SafeHost() {
  HostFacts f;
  f.lookup_user = [](const std::string& name, uid_t* uid, gid_t* gid) {
    if (name != "kiln-build") return false;
    *uid = 999;
    *gid = 995;
    return true;
  };
  f.subuid = "kiln-build:100000:65536\n";
  f.subgid = "kiln-build:100000:65536\n";
  f.max_user_namespaces = 1000;
  f.newuidmap_setuid = f.newgidmap_setuid = true;
  f.kiln_uid = 0;
  f.stat_path = [](const std::string&, uid_t* owner, mode_t* mode) {
    *owner = 0;
    *mode = S_IFREG | 0600;
    return true;
  };
  return f;
}

class ConfigParserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln_config_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auth_file_ = dir_ + "/auth.json";
    WriteFile(auth_file_, R"({"auths":{}})");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void WriteFile(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
  }

  // A valid config with two domains: "epp" (layered, kubernetes) and "ranker" (containerfile).
  json Valid() const {
    return json{
        {"server", {{"listen", "127.0.0.1:8700"}, {"state_dir", "/var/lib/kiln"}}},
        {"registries", {{"local", {{"url", "http://127.0.0.1:5000"}, {"auth_file", auth_file_}}}}},
        {"operator_token_sha256", {kHashC}},
        {"domains",
         {{"epp",
           {{"token_sha256", {kHashA}},
            {"build",
             {{"mode", "layered"},
              {"layered",
               {{"base_image", "127.0.0.1:5000/base/static@" + kDigest},
                {"command", {"go", "build", "-o", "out/app", "./cmd/app"}},
                {"outputs", {{{"from", "out/app"}, {"to", "/app"}}}}}}}},
            {"image", {{"registry", "local"}, {"repository", "loop/epp"}}},
            {"deploy",
             {{"type", "kubernetes"},
              {"kubernetes",
               {{"namespace", "inference"}, {"deployment", "epp"}, {"container", "epp"}}}}}}},
          {"ranker",
           {{"token_sha256", {kHashB}},
            {"build", {{"mode", "containerfile"}}},
            {"image", {{"registry", "local"}, {"repository", "loop/ranker"}}}}}}}};
  }

  std::vector<ConfigProblem> Parse(const json& j, Config* out = nullptr) {
    Config local;
    return ParseConfig(j.dump(), out ? out : &local);
  }

  // Asserts that `j` yields exactly one problem, at `path`.
  void ExpectOnly(const json& j, const std::string& path) {
    auto problems = Parse(j);
    EXPECT_EQ(problems.size(), 1u) << "expected only " << path << ", got:\n" << Describe(problems);
    EXPECT_TRUE(HasPath(problems, path)) << "expected " << path << ", got:\n" << Describe(problems);
  }

  std::string dir_;
  std::string auth_file_;
};

TEST_F(ConfigParserTest, ValidConfigParsesIntoStructs) {
  json j = Valid();
  j["log_level"] = "debug";
  j["server"]["allowed_origins"] = {"https://ui.example.com", "http://localhost:3000"};
  j["server"]["max_request_bytes"] = 2048;
  j["server"]["max_sessions"] = 10;
  j["server"]["max_inflight_per_session"] = 4;
  j["scheduler"] = {{"max_parallel_builds", 8}, {"build_log_max_bytes", 65536}};
  j["registries"]["local"]["ca_file"] = auth_file_;
  json& epp = j["domains"]["epp"];
  epp["weight"] = 7;
  epp["tool_aliases"] = {{"build_epp", "build_candidate"}};
  epp["build"]["timeout_s"] = 123;
  epp["build"]["layered"]["env"] = {{"CGO_ENABLED", "0"}};
  epp["build"]["layered"]["caches"] = {{"GOCACHE", "go-build"}};
  epp["build"]["layered"]["entrypoint"] = {"/app", "--flag"};
  epp["deploy"]["kubernetes"]["kubeconfig"] = auth_file_;
  epp["deploy"]["kubernetes"]["rollout_timeout_s"] = 45;
  epp["deploy"]["kubernetes"]["unready_timeout_s"] = 20;  // Issue 16
  json& ranker = j["domains"]["ranker"];
  ranker["build"]["containerfile"] = {{"file", "build/Containerfile"},
                                      {"context", "src"},
                                      {"target", "runtime"},
                                      {"build_args", {{"VERSION", "1"}}},
                                      {"network", true}};
  ranker["deploy"] = {{"type", "local"}, {"local", {{"port", 9100}, {"health_path", "/ready"}}}};

  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);

  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.server.listen, "127.0.0.1:8700");
  EXPECT_EQ(c.server.state_dir, "/var/lib/kiln");
  EXPECT_EQ(c.server.allowed_origins,
            (std::vector<std::string>{"https://ui.example.com", "http://localhost:3000"}));
  EXPECT_EQ(c.server.max_request_bytes, 2048);
  EXPECT_EQ(c.server.max_sessions, 10);
  EXPECT_EQ(c.server.max_inflight_per_session, 4);
  EXPECT_EQ(c.scheduler.max_parallel_builds, 8);
  EXPECT_EQ(c.scheduler.build_log_max_bytes, 65536);
  ASSERT_EQ(c.registries.size(), 1u);
  const RegistryConfig& r = c.registries.at("local");
  EXPECT_EQ(r.name, "local");
  EXPECT_EQ(r.url, "http://127.0.0.1:5000");
  EXPECT_EQ(r.auth_file, auth_file_);
  EXPECT_EQ(r.ca_file, auth_file_);
  EXPECT_EQ(c.operator_token_sha256, std::vector<std::string>{kHashC});

  ASSERT_EQ(c.domains.size(), 2u);
  const DomainConfig& e = c.domains.at("epp");
  EXPECT_EQ(e.name, "epp");
  EXPECT_EQ(e.token_sha256, std::vector<std::string>{kHashA});
  EXPECT_EQ(e.weight, 7);
  EXPECT_EQ(e.tool_aliases.at("build_epp"), "build_candidate");
  EXPECT_EQ(e.build.mode, "layered");
  EXPECT_EQ(e.build.timeout_s, 123);
  ASSERT_TRUE(e.build.layered.has_value());
  EXPECT_EQ(e.build.layered->base_image, "127.0.0.1:5000/base/static@" + kDigest);
  EXPECT_EQ(e.build.layered->command.size(), 5u);
  EXPECT_EQ(e.build.layered->command[0], "go");
  EXPECT_EQ(e.build.layered->env.at("CGO_ENABLED"), "0");
  EXPECT_EQ(e.build.layered->caches.at("GOCACHE"), "go-build");
  ASSERT_EQ(e.build.layered->outputs.size(), 1u);
  EXPECT_EQ(e.build.layered->outputs[0].from, "out/app");
  EXPECT_EQ(e.build.layered->outputs[0].to, "/app");
  EXPECT_EQ(e.build.layered->entrypoint, (std::vector<std::string>{"/app", "--flag"}));
  EXPECT_EQ(e.image.registry, "local");
  EXPECT_EQ(e.image.repository, "loop/epp");
  EXPECT_EQ(e.deploy.type, "kubernetes");
  ASSERT_TRUE(e.deploy.kubernetes.has_value());
  EXPECT_EQ(e.deploy.kubernetes->namespace_, "inference");
  EXPECT_EQ(e.deploy.kubernetes->deployment, "epp");
  EXPECT_EQ(e.deploy.kubernetes->container, "epp");
  EXPECT_EQ(e.deploy.kubernetes->kubeconfig, auth_file_);
  EXPECT_EQ(e.deploy.kubernetes->rollout_timeout_s, 45);
  EXPECT_EQ(e.deploy.kubernetes->unready_timeout_s, 20);  // Issue 16

  const DomainConfig& k = c.domains.at("ranker");
  EXPECT_EQ(k.build.mode, "containerfile");
  EXPECT_EQ(k.build.containerfile.file, "build/Containerfile");
  EXPECT_EQ(k.build.containerfile.context, "src");
  EXPECT_EQ(k.build.containerfile.target, "runtime");
  EXPECT_EQ(k.build.containerfile.build_args.at("VERSION"), "1");
  EXPECT_TRUE(k.build.containerfile.network);
  EXPECT_EQ(k.build.network, "host");  // the older spelling sets build.network
  EXPECT_FALSE(k.build.layered.has_value());
  EXPECT_EQ(k.deploy.type, "local");
  ASSERT_TRUE(k.deploy.local.has_value());
  EXPECT_EQ(k.deploy.local->port, 9100);
  EXPECT_EQ(k.deploy.local->health_path, "/ready");
}

// HTTP transport caps (issue 15).
TEST_F(ConfigParserTest, TransportCapsHaveDefaultsAndAreValidated) {
  Config c;
  auto problems = Parse(Valid(), &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.server.max_connections, 1024);
  EXPECT_EQ(c.server.idle_timeout_s, 60);
  EXPECT_EQ(c.server.header_timeout_s, 10);
  EXPECT_EQ(c.server.write_timeout_s, 30);
  EXPECT_EQ(c.server.max_sessions_per_domain, 64);
  EXPECT_EQ(c.server.git_slots, 32);
  EXPECT_EQ(c.server.git_slots_per_domain, 4);
  EXPECT_EQ(c.server.metrics_listen, "127.0.0.1:8701");

  json j = Valid();
  j["server"]["max_connections"] = 10;
  j["server"]["idle_timeout_s"] = 5;
  j["server"]["header_timeout_s"] = 2;
  j["server"]["write_timeout_s"] = 7;
  j["server"]["max_sessions_per_domain"] = 0;
  j["server"]["git_slots"] = 8;
  j["server"]["git_slots_per_domain"] = 2;
  j["server"]["metrics_listen"] = "127.0.0.1:9999";
  Config d;
  problems = Parse(j, &d);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(d.server.max_connections, 10);
  EXPECT_EQ(d.server.idle_timeout_s, 5);
  EXPECT_EQ(d.server.header_timeout_s, 2);
  EXPECT_EQ(d.server.write_timeout_s, 7);
  EXPECT_EQ(d.server.max_sessions_per_domain, 0);
  EXPECT_EQ(d.server.git_slots, 8);
  EXPECT_EQ(d.server.git_slots_per_domain, 2);
  EXPECT_EQ(d.server.metrics_listen, "127.0.0.1:9999");

  for (const char* off : {"", "off"}) {
    j["server"]["metrics_listen"] = off;
    Config e;
    problems = Parse(j, &e);
    ASSERT_TRUE(problems.empty()) << Describe(problems);
    EXPECT_EQ(e.server.metrics_listen, "");
  }

  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"max_connections", 0},
                                                 {"idle_timeout_s", 0},
                                                 {"header_timeout_s", 601},
                                                 {"write_timeout_s", "30"},
                                                 {"max_sessions_per_domain", -1},
                                                 {"git_slots", 0},
                                                 {"git_slots_per_domain", 2000},
                                                 {"metrics_listen", "nope"},
                                                 {"metrics_listen", "127.0.0.1:8700"}}) {
    json bad = Valid();
    bad["server"]["listen"] = "127.0.0.1:8700";
    bad["server"][key] = value;
    Config e;
    problems = Parse(bad, &e);
    EXPECT_TRUE(HasPath(problems, "server." + key)) << key << " " << value << Describe(problems);
  }
}

TEST_F(ConfigParserTest, WarnsWhenTheSessionPoolCannotHoldEveryDomainsShare) {
  Config c;
  json j = Valid();  // two domains
  j["server"]["max_sessions"] = 100;
  j["server"]["max_sessions_per_domain"] = 64;
  ASSERT_TRUE(Parse(j, &c).empty());
  auto warnings = CollectConfigWarnings(c);
  ASSERT_TRUE(HasPath(warnings, "server.max_sessions")) << Describe(warnings);
  EXPECT_NE(Describe(warnings).find("128"), std::string::npos) << Describe(warnings);

  j["server"]["max_sessions"] = 128;
  Config fits;
  ASSERT_TRUE(Parse(j, &fits).empty());
  EXPECT_FALSE(HasPath(CollectConfigWarnings(fits), "server.max_sessions"));

  j["server"]["max_sessions"] = 100;
  j["server"]["max_sessions_per_domain"] = 0;  // no per-domain cap: nothing to reserve
  Config uncapped;
  ASSERT_TRUE(Parse(j, &uncapped).empty());
  EXPECT_FALSE(HasPath(CollectConfigWarnings(uncapped), "server.max_sessions"));
}

// --- Issue 16: server.public_url ---
TEST_F(ConfigParserTest, PublicUrlDefaultsToTheListenAddressAndIsValidated) {
  json j = Valid();
  j["server"]["listen"] = "127.0.0.1:8700";
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.server.public_url, "http://127.0.0.1:8700");
  EXPECT_EQ(GitRemoteUrl(c.server, "epp"), "http://127.0.0.1:8700/git/epp.git");

  for (const char* ok : {"https://kiln.example.com/", "https://kiln.example.com:8443/loops"}) {
    j["server"]["public_url"] = ok;
    Config d;
    problems = Parse(j, &d);
    ASSERT_TRUE(problems.empty()) << ok << Describe(problems);
    EXPECT_EQ(d.server.public_url.back() == '/', false) << d.server.public_url;
  }
  EXPECT_EQ(GitRemoteUrl(Config{}.server, "x"), "http://127.0.0.1:8700/git/x.git");

  for (const char* bad :
       {"kiln.example.com", "ftp://x", "https://user:pw@kiln.example.com",
        "https://kiln.example.com/?a=b", "https://kiln example.com", "https://"}) {
    j["server"]["public_url"] = bad;
    Config e;
    problems = Parse(j, &e);
    EXPECT_TRUE(HasPath(problems, "server.public_url")) << bad << Describe(problems);
  }
}
// --- end issue 16 ---

TEST_F(ConfigParserTest, OnlyTheChosenDeployTypeIsValidated) {  // issue 16
  json j = Valid();
  j["domains"]["epp"]["deploy"]["type"] = "none";
  j["domains"]["epp"]["deploy"]["kubernetes"]["kubeconfig"] = dir_ + "/no-such-kubeconfig";
  j["domains"]["epp"]["deploy"]["kubernetes"]["rollout_timeout_s"] = "bad";
  j["domains"]["epp"]["deploy"]["local"] = {{"port", 0}};
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  const DeployConfig& d = c.domains.at("epp").deploy;
  EXPECT_EQ(d.type, "none");
  EXPECT_FALSE(d.kubernetes.has_value());
  EXPECT_FALSE(d.local.has_value());
  EXPECT_EQ(d.ignored_sections, (std::vector<std::string>{"kubernetes", "local"}));
  auto warnings = CollectConfigWarnings(c);
  bool warned = false;
  for (const auto& w : warnings)
    warned = warned || (w.path == "domains.epp.deploy.kubernetes" &&
                        w.reason.find("remove it") != std::string::npos);
  EXPECT_TRUE(warned);

  // The chosen type's section is still checked, and says what to change.
  j["domains"]["epp"]["deploy"]["type"] = "kubernetes";
  j["domains"]["epp"]["deploy"].erase("local");
  j["domains"]["epp"]["deploy"]["kubernetes"]["rollout_timeout_s"] = 45;
  problems = Parse(j);
  EXPECT_TRUE(HasPath(problems, "domains.epp.deploy.kubernetes.kubeconfig")) << Describe(problems);
}

TEST_F(ConfigParserTest, OmittedOptionalSectionsGetDefaults) {
  json j = Valid();
  j["server"].erase("listen");
  j["domains"]["ranker"]["deploy"] = {{"type", "local"}};
  j["domains"]["epp"]["deploy"]["kubernetes"].erase("kubeconfig");
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.server.listen, "127.0.0.1:8700");
  EXPECT_EQ(c.server.max_request_bytes, 1 << 20);
  EXPECT_EQ(c.server.max_sessions, 256);
  EXPECT_EQ(c.server.max_inflight_per_session, 32);
  EXPECT_EQ(c.scheduler.max_parallel_builds, 2);
  EXPECT_EQ(c.scheduler.build_log_max_bytes, 4 << 20);
  const DomainConfig& k = c.domains.at("ranker");
  EXPECT_EQ(k.weight, 1);
  EXPECT_EQ(k.build.timeout_s, 600);
  EXPECT_EQ(k.build.containerfile.file, "Containerfile");
  EXPECT_EQ(k.build.containerfile.context, ".");
  EXPECT_FALSE(k.build.containerfile.target.has_value());
  EXPECT_FALSE(k.build.containerfile.network);
  EXPECT_EQ(k.build.network, "none");
  EXPECT_EQ(k.build.user, "kiln-build");
  EXPECT_EQ(k.build.max_file_mb, 8192);
  ASSERT_TRUE(k.deploy.local.has_value());
  EXPECT_EQ(k.deploy.local->port, 9000);
  EXPECT_EQ(k.deploy.local->health_path, "/healthz");
  EXPECT_FALSE(c.domains.at("epp").deploy.kubernetes->kubeconfig.has_value());
  EXPECT_EQ(c.domains.at("epp").deploy.kubernetes->rollout_timeout_s, 300);
  EXPECT_EQ(c.domains.at("epp").deploy.kubernetes->unready_timeout_s, 60);  // Issue 16

  j["domains"]["ranker"].erase("deploy");
  Config c2;
  ASSERT_TRUE(Parse(j, &c2).empty());
  EXPECT_EQ(c2.domains.at("ranker").deploy.type, "none");
}

TEST_F(ConfigParserTest, MalformedJsonReportsByteOffset) {
  Config c;
  auto problems = ParseConfig(R"({"server": })", &c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "");
  EXPECT_NE(problems[0].reason.find("malformed JSON at byte 12"), std::string::npos)
      << problems[0].reason;

  problems = ParseConfig("", &c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].reason.find("malformed JSON at byte"), std::string::npos);
}

TEST_F(ConfigParserTest, TopLevelMustBeObject) {
  Config c;
  auto problems = ParseConfig("[1, 2]", &c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "");
}

TEST_F(ConfigParserTest, DuplicateKeysAreReportedWithTheirPath) {
  std::string text = Valid().dump();
  // Insert a second "weight" into domains.epp and a second "listen" into server.
  text.replace(text.find("\"epp\":{") + 7, 0, R"("weight":1,"weight":2,)");
  text.replace(text.find("\"server\":{") + 10, 0, R"("listen":"127.0.0.1:1",)");
  Config c;
  auto problems = ParseConfig(text, &c);
  EXPECT_TRUE(HasPath(problems, "domains.epp.weight")) << Describe(problems);
  EXPECT_TRUE(HasPath(problems, "server.listen")) << Describe(problems);
  EXPECT_EQ(problems.size(), 2u) << Describe(problems);
}

TEST_F(ConfigParserTest, DuplicateKeyInsideArrayElementHasIndexedPath) {
  json j = Valid();
  std::string text = j.dump();
  text.replace(text.find("\"from\":"), 0, R"("to":"/x",)");
  Config c;
  auto problems = ParseConfig(text, &c);
  EXPECT_TRUE(HasPath(problems, "domains.epp.build.layered.outputs[0].to")) << Describe(problems);
}

TEST_F(ConfigParserTest, UnknownKeysAreRejectedAtEveryLevel) {
  const std::vector<std::pair<json::json_pointer, std::string>> cases = {
      {json::json_pointer(""), "bogus"},
      {json::json_pointer("/server"), "server.bogus"},
      {json::json_pointer("/registries/local"), "registries.local.bogus"},
      {json::json_pointer("/domains/epp"), "domains.epp.bogus"},
      {json::json_pointer("/domains/epp/build"), "domains.epp.build.bogus"},
      {json::json_pointer("/domains/epp/build/layered"), "domains.epp.build.layered.bogus"},
      {json::json_pointer("/domains/epp/build/layered/outputs/0"),
       "domains.epp.build.layered.outputs[0].bogus"},
      {json::json_pointer("/domains/epp/image"), "domains.epp.image.bogus"},
      {json::json_pointer("/domains/epp/deploy"), "domains.epp.deploy.bogus"},
      {json::json_pointer("/domains/epp/deploy/kubernetes"), "domains.epp.deploy.kubernetes.bogus"},
  };
  for (const auto& [ptr, path] : cases) {
    json j = Valid();
    j[ptr]["bogus"] = 1;
    ExpectOnly(j, path);
  }
  json j = Valid();
  j["scheduler"] = {{"max_paralel_builds", 3}};
  ExpectOnly(j, "scheduler.max_paralel_builds");
  j = Valid();
  j["domains"]["ranker"]["build"]["containerfile"] = {{"fiel", "Containerfile"}};
  ExpectOnly(j, "domains.ranker.build.containerfile.fiel");
  j = Valid();
  j["domains"]["ranker"]["deploy"] = {{"type", "local"}, {"local", {{"prot", 1}}}};
  ExpectOnly(j, "domains.ranker.deploy.local.prot");
}

TEST_F(ConfigParserTest, UnknownKeyReasonListsTheAllowedKeys) {
  json j = Valid();
  j["scheduler"] = {{"max_paralel_builds", 3}};
  auto problems = Parse(j);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].reason.find("max_parallel_builds"), std::string::npos);
}

TEST_F(ConfigParserTest, WrongTypesAreReported) {
  const std::vector<std::tuple<json::json_pointer, json, std::string>> cases = {
      {json::json_pointer("/server"), "x", "server"},
      {json::json_pointer("/server/listen"), 8700, "server.listen"},
      {json::json_pointer("/server/allowed_origins"), "x", "server.allowed_origins"},
      {json::json_pointer("/server/allowed_origins"), {1}, "server.allowed_origins[0]"},
      {json::json_pointer("/scheduler"),
       {{"max_parallel_builds", "2"}},
       "scheduler.max_parallel_builds"},
      {json::json_pointer("/scheduler"),
       {{"max_parallel_builds", 2.5}},
       "scheduler.max_parallel_builds"},
      {json::json_pointer("/scheduler"),
       {{"max_parallel_builds", true}},
       "scheduler.max_parallel_builds"},
      {json::json_pointer("/registries/local/auth_file"), 5, "registries.local.auth_file"},
      {json::json_pointer("/domains/epp/token_sha256"), kHashA, "domains.epp.token_sha256"},
      {json::json_pointer("/domains/epp/weight"), "1", "domains.epp.weight"},
      {json::json_pointer("/domains/epp/build"), json::array(), "domains.epp.build"},
      {json::json_pointer("/domains/epp/build/layered/env"),
       {{"A", 1}},
       "domains.epp.build.layered.env.A"},
      {json::json_pointer("/domains/epp/build/layered/outputs"), "out",
       "domains.epp.build.layered.outputs"},
      {json::json_pointer("/domains/epp/build/layered/outputs/0"), "out",
       "domains.epp.build.layered.outputs[0]"},
      {json::json_pointer("/domains/ranker/build/containerfile"),
       {{"network", "yes"}},
       "domains.ranker.build.containerfile.network"},
      {json::json_pointer("/domains/epp/deploy/kubernetes/kubeconfig"), false,
       "domains.epp.deploy.kubernetes.kubeconfig"},
      {json::json_pointer("/log_level"), 3, "log_level"},
  };
  for (const auto& [ptr, value, path] : cases) {
    json j = Valid();
    j[ptr] = value;
    auto problems = Parse(j);
    EXPECT_TRUE(HasPath(problems, path)) << path << " got:\n" << Describe(problems);
    if (path == "server") {
      // server.state_dir is then missing too; nothing else.
      EXPECT_EQ(problems.size(), 1u) << Describe(problems);
    }
  }
}

TEST_F(ConfigParserTest, MissingRequiredFieldsAreReported) {
  const std::vector<std::pair<json::json_pointer, std::string>> cases = {
      {json::json_pointer("/server/state_dir"), "server.state_dir"},
      {json::json_pointer("/server"), "server"},
      {json::json_pointer("/domains"), "domains"},
      {json::json_pointer("/registries"), "registries"},
      {json::json_pointer("/domains/epp/token_sha256"), "domains.epp.token_sha256"},
      {json::json_pointer("/domains/epp/build"), "domains.epp.build"},
      {json::json_pointer("/domains/epp/build/mode"), "domains.epp.build.mode"},
      {json::json_pointer("/domains/epp/image"), "domains.epp.image"},
      {json::json_pointer("/domains/epp/image/registry"), "domains.epp.image.registry"},
      {json::json_pointer("/domains/epp/image/repository"), "domains.epp.image.repository"},
      {json::json_pointer("/domains/epp/build/layered"), "domains.epp.build.layered"},
      {json::json_pointer("/domains/epp/build/layered/base_image"),
       "domains.epp.build.layered.base_image"},
      {json::json_pointer("/domains/epp/build/layered/command"),
       "domains.epp.build.layered.command"},
      {json::json_pointer("/domains/epp/build/layered/outputs"),
       "domains.epp.build.layered.outputs"},
      {json::json_pointer("/domains/epp/deploy/type"), "domains.epp.deploy.type"},
      {json::json_pointer("/domains/epp/deploy/kubernetes"), "domains.epp.deploy.kubernetes"},
      {json::json_pointer("/domains/epp/deploy/kubernetes/namespace"),
       "domains.epp.deploy.kubernetes.namespace"},
      {json::json_pointer("/domains/epp/deploy/kubernetes/deployment"),
       "domains.epp.deploy.kubernetes.deployment"},
      {json::json_pointer("/domains/epp/deploy/kubernetes/container"),
       "domains.epp.deploy.kubernetes.container"},
      {json::json_pointer("/registries/local/url"), "registries.local.url"},
  };
  for (const auto& [ptr, path] : cases) {
    json j = Valid();
    j[ptr.parent_pointer()].erase(ptr.back());
    auto problems = Parse(j);
    EXPECT_TRUE(HasPath(problems, path)) << path << " got:\n" << Describe(problems);
  }
  // Removing the registries also makes every image.registry unknown; removing server only
  // reports server (not server.state_dir).
  json j = Valid();
  j.erase("server");
  ExpectOnly(j, "server");
  j = Valid();
  j["domains"]["epp"]["build"].erase("layered");
  ExpectOnly(j, "domains.epp.build.layered");
}

TEST_F(ConfigParserTest, EmptyListsWhereOneIsRequired) {
  json j = Valid();
  j["domains"]["epp"]["token_sha256"] = json::array();
  ExpectOnly(j, "domains.epp.token_sha256");
  j = Valid();
  j["domains"] = json::object();
  ExpectOnly(j, "domains");
  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["command"] = json::array();
  ExpectOnly(j, "domains.epp.build.layered.command");
  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["outputs"] = json::array();
  ExpectOnly(j, "domains.epp.build.layered.outputs");
  j = Valid();
  j["domains"]["epp"]["image"]["repository"] = "";
  ExpectOnly(j, "domains.epp.image.repository");
}

TEST_F(ConfigParserTest, UnknownRegistryNameAndUnmatchedBaseImageHost) {
  json j = Valid();
  j["domains"]["epp"]["image"]["registry"] = "remote";
  ExpectOnly(j, "domains.epp.image.registry");

  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["base_image"] = "127.0.0.1:5001/base/static@" + kDigest;
  ExpectOnly(j, "domains.epp.build.layered.base_image");

  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["base_image"] = "docker.io/library/alpine@" + kDigest;
  ExpectOnly(j, "domains.epp.build.layered.base_image");

  // A second registry makes the same base image valid.
  j["registries"]["hub"] = {{"url", "https://docker.io"}};
  auto problems = Parse(j);
  EXPECT_TRUE(problems.empty()) << Describe(problems);
}

TEST_F(ConfigParserTest, MalformedDigestsAreRejected) {
  const std::string repo = "127.0.0.1:5000/base/static";
  for (const std::string& bad :
       {repo,                                              // not pinned
        repo + ":latest",                                  // tag, not digest
        repo + "@sha256:" + std::string(63, 'd'),          // short
        repo + "@sha256:" + std::string(65, 'd'),          // long
        repo + "@sha256:" + std::string(64, 'D'),          // uppercase
        repo + "@sha512:" + std::string(64, 'd'),          // wrong algorithm
        repo + ":v1@" + kDigest,                           // tag and digest
        std::string("127.0.0.1:5000@") + kDigest,          // no repository
        std::string("127.0.0.1:5000/Base@") + kDigest}) {  // uppercase repository
    json j = Valid();
    j["domains"]["epp"]["build"]["layered"]["base_image"] = bad;
    auto problems = Parse(j);
    EXPECT_EQ(problems.size(), 1u) << bad << ":\n" << Describe(problems);
    EXPECT_TRUE(HasPath(problems, "domains.epp.build.layered.base_image")) << bad;
  }
}

TEST_F(ConfigParserTest, MalformedTokenHashesAreRejected) {
  for (const std::string& bad : {std::string(63, 'a'), std::string(64, 'A'),
                                 std::string(63, 'a') + "g", std::string("secret-token")}) {
    json j = Valid();
    j["domains"]["epp"]["token_sha256"] = {kHashA, bad};
    ExpectOnly(j, "domains.epp.token_sha256[1]");
  }
  json j = Valid();
  j["operator_token_sha256"] = {"nothex"};
  ExpectOnly(j, "operator_token_sha256[0]");
}

TEST_F(ConfigParserTest, TokenHashSharedByTwoDomainsIsAProblem) {
  json j = Valid();
  j["domains"]["ranker"]["token_sha256"] = {kHashB, kHashA};
  auto problems = Parse(j);
  ASSERT_EQ(problems.size(), 1u) << Describe(problems);
  EXPECT_EQ(problems[0].path, "domains.ranker.token_sha256[1]");
  EXPECT_NE(problems[0].reason.find("domains.epp.token_sha256[0]"), std::string::npos);

  j = Valid();
  j["operator_token_sha256"] = {kHashB};
  ExpectOnly(j, "domains.ranker.token_sha256[0]");
}

TEST_F(ConfigParserTest, OutOfRangeLimitsAreRejectedAndBoundsAccepted) {
  struct Case {
    json::json_pointer ptr;
    int64_t lo, hi;
    std::string path;
  };
  const std::vector<Case> cases = {
      {json::json_pointer("/scheduler/max_parallel_builds"), 1, 64,
       "scheduler.max_parallel_builds"},
      {json::json_pointer("/scheduler/build_log_max_bytes"), 4096, int64_t{1} << 30,
       "scheduler.build_log_max_bytes"},
      {json::json_pointer("/server/max_request_bytes"), 1024, int64_t{1} << 30,
       "server.max_request_bytes"},
      {json::json_pointer("/server/max_sessions"), 1, 100000, "server.max_sessions"},
      {json::json_pointer("/server/max_inflight_per_session"), 1, 1024,
       "server.max_inflight_per_session"},
      {json::json_pointer("/domains/epp/weight"), 1, 1000, "domains.epp.weight"},
      {json::json_pointer("/domains/epp/build/timeout_s"), 1, 86400, "domains.epp.build.timeout_s"},
      {json::json_pointer("/domains/epp/deploy/kubernetes/rollout_timeout_s"), 1, 86400,
       "domains.epp.deploy.kubernetes.rollout_timeout_s"},
      // Issue 16: Kubernetes deploy failures say why
      {json::json_pointer("/domains/epp/deploy/kubernetes/unready_timeout_s"), 1, 86400,
       "domains.epp.deploy.kubernetes.unready_timeout_s"},
      {json::json_pointer("/domains/ranker/deploy/local/port"), 1, 65535,
       "domains.ranker.deploy.local.port"},
  };
  for (const Case& c : cases) {
    for (int64_t v : {c.lo - 1, c.hi + 1, int64_t{-1}}) {
      json j = Valid();
      j["domains"]["ranker"]["deploy"] = {{"type", "local"}};
      j[c.ptr] = v;
      ExpectOnly(j, c.path);
    }
    for (int64_t v : {c.lo, c.hi}) {
      json j = Valid();
      j["domains"]["ranker"]["deploy"] = {{"type", "local"}};
      j[c.ptr] = v;
      auto problems = Parse(j);
      EXPECT_TRUE(problems.empty()) << c.path << "=" << v << "\n" << Describe(problems);
    }
  }
  json j = Valid();
  j["scheduler"]["max_parallel_builds"] = 18446744073709551615u;
  ExpectOnly(j, "scheduler.max_parallel_builds");
}

TEST_F(ConfigParserTest, ListenMustBeHostPort) {
  for (const char* bad : {"8700", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http",
                          ":8700", "::1:8700", "host name:80"}) {
    json j = Valid();
    j["server"]["listen"] = bad;
    ExpectOnly(j, "server.listen");
  }
  for (const char* good : {"0.0.0.0:1", "localhost:65535", "[::1]:8700"}) {
    json j = Valid();
    j["server"]["listen"] = good;
    auto problems = Parse(j);
    EXPECT_TRUE(problems.empty()) << good << "\n" << Describe(problems);
  }
}

TEST_F(ConfigParserTest, RegistryUrlMustBeHttpOrHttpsBase) {
  for (const char* bad :
       {"127.0.0.1:5000", "ftp://127.0.0.1:5000", "http://", "http://127.0.0.1:99999",
        "http://user:pass@127.0.0.1:5000", "http://127.0.0.1:5000/v2"}) {
    json j = Valid();
    j["registries"]["local"]["url"] = bad;
    auto problems = Parse(j);
    EXPECT_TRUE(HasPath(problems, "registries.local.url")) << bad << "\n" << Describe(problems);
    for (const auto& p : problems) EXPECT_EQ(p.reason.find("pass"), std::string::npos);
  }
  json j = Valid();
  j["registries"]["local"]["url"] = "https://127.0.0.1:5000/";
  j["server"]["allowed_origins"] = {"ftp://x"};
  ExpectOnly(j, "server.allowed_origins[0]");
}

TEST_F(ConfigParserTest, UnreadableFilesAreProblems) {
  json j = Valid();
  j["registries"]["local"]["auth_file"] = dir_ + "/missing.json";
  ExpectOnly(j, "registries.local.auth_file");

  fs::create_directory(dir_ + "/a_dir");
  j = Valid();
  j["registries"]["local"]["auth_file"] = dir_ + "/a_dir";
  ExpectOnly(j, "registries.local.auth_file");

  j = Valid();
  j["registries"]["local"]["ca_file"] = dir_ + "/missing.pem";
  ExpectOnly(j, "registries.local.ca_file");

  j = Valid();
  j["domains"]["epp"]["deploy"]["kubernetes"]["kubeconfig"] = dir_ + "/a_dir";
  ExpectOnly(j, "domains.epp.deploy.kubernetes.kubeconfig");

  // null auth_file / ca_file means none.
  j = Valid();
  j["registries"]["local"]["auth_file"] = nullptr;
  j["registries"]["local"]["ca_file"] = nullptr;
  Config c;
  auto problems = Parse(j, &c);
  EXPECT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_FALSE(c.registries.at("local").auth_file.has_value());
}

TEST_F(ConfigParserTest, FileWithModeZeroIsReportedWhenNotRoot) {
  std::string f = dir_ + "/locked.json";
  WriteFile(f, "{}");
  ASSERT_EQ(chmod(f.c_str(), 0), 0);
  json j = Valid();
  j["registries"]["local"]["auth_file"] = f;
  auto problems = Parse(j);
  // root reads mode-000 files, so this only bites for other users; it must never crash.
  EXPECT_EQ(HasPath(problems, "registries.local.auth_file"), geteuid() != 0) << Describe(problems);
}

TEST_F(ConfigParserTest, InvalidNamesAreRejected) {
  json j = Valid();
  j["domains"]["bad/name"] = j["domains"]["ranker"];
  j["domains"]["bad/name"]["token_sha256"] = {std::string(64, 'e')};
  ExpectOnly(j, "domains.bad/name");

  j = Valid();
  j["domains"]["-x"] = j["domains"]["ranker"];
  j["domains"]["-x"]["token_sha256"] = {std::string(64, 'e')};
  ExpectOnly(j, "domains.-x");

  j = Valid();
  j["registries"]["bad name"] = {{"url", "http://127.0.0.1:5001"}};
  ExpectOnly(j, "registries.bad name");

  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["caches"] = {{"GOCACHE", "../escape"}};
  ExpectOnly(j, "domains.epp.build.layered.caches.GOCACHE");

  j = Valid();
  j["domains"]["epp"]["image"]["repository"] = "Loop/App";
  ExpectOnly(j, "domains.epp.image.repository");

  j = Valid();
  j["domains"]["epp"]["deploy"]["kubernetes"]["namespace"] = "Inference";
  ExpectOnly(j, "domains.epp.deploy.kubernetes.namespace");
}

TEST_F(ConfigParserTest, ToolAliasesAreValidated) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"Build", "build_candidate"}}, "domains.epp.tool_aliases.Build"},
      {{{"1build", "build_candidate"}}, "domains.epp.tool_aliases.1build"},
      {{{"build-epp", "build_candidate"}}, "domains.epp.tool_aliases.build-epp"},
      {{{std::string(65, 'a'), "build_candidate"}},
       "domains.epp.tool_aliases." + std::string(65, 'a')},
      {{{"build_log", "build_candidate"}}, "domains.epp.tool_aliases.build_log"},
      {{{"build_epp", "build"}}, "domains.epp.tool_aliases.build_epp"},
      {{{"build_epp", 1}}, "domains.epp.tool_aliases.build_epp"},
  };
  for (const auto& [aliases, path] : cases) {
    json j = Valid();
    j["domains"]["epp"]["tool_aliases"] = aliases;
    ExpectOnly(j, path);
  }
  json j = Valid();
  j["domains"]["epp"]["tool_aliases"] = {{std::string("a") + std::string(63, '0'), "build_log"},
                                         {"status_epp", "candidate_status"}};
  auto problems = Parse(j);
  EXPECT_TRUE(problems.empty()) << Describe(problems);
}

TEST_F(ConfigParserTest, EnumsAreValidated) {
  json j = Valid();
  j["domains"]["epp"]["build"]["mode"] = "docker";
  ExpectOnly(j, "domains.epp.build.mode");
  j = Valid();
  j["domains"]["epp"]["deploy"]["type"] = "helm";
  ExpectOnly(j, "domains.epp.deploy.type");
  j = Valid();
  j["log_level"] = "verbose";
  ExpectOnly(j, "log_level");
}

TEST_F(ConfigParserTest, PathsInBuildSectionsAreValidated) {
  const std::vector<std::pair<json::json_pointer, std::string>> relative = {
      {json::json_pointer("/domains/ranker/build/containerfile/file"),
       "domains.ranker.build.containerfile.file"},
      {json::json_pointer("/domains/ranker/build/containerfile/context"),
       "domains.ranker.build.containerfile.context"},
      {json::json_pointer("/domains/epp/build/layered/outputs/0/from"),
       "domains.epp.build.layered.outputs[0].from"},
  };
  for (const auto& [ptr, path] : relative) {
    for (const char* bad : {"/etc/passwd", "..", "../x", "a/../../x", "a/.."}) {
      json j = Valid();
      j[ptr] = bad;
      ExpectOnly(j, path);
    }
    for (const char* good : {"a/b", ".", "a..b/c", "./x"}) {
      json j = Valid();
      j[ptr] = good;
      auto problems = Parse(j);
      EXPECT_TRUE(problems.empty()) << path << "=" << good << "\n" << Describe(problems);
    }
  }
  for (const char* bad : {"app", "out/app", "/a/../b"}) {
    json j = Valid();
    j["domains"]["epp"]["build"]["layered"]["outputs"][0]["to"] = bad;
    ExpectOnly(j, "domains.epp.build.layered.outputs[0].to");
  }
}

TEST_F(ConfigParserTest, EnvAndBuildArgNamesAreValidated) {
  json j = Valid();
  j["domains"]["epp"]["build"]["layered"]["env"] = {{"GOOD_1", "x"}, {"1BAD", "x"}};
  ExpectOnly(j, "domains.epp.build.layered.env.1BAD");
  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["env"] = {{"A=B", "x"}};
  ExpectOnly(j, "domains.epp.build.layered.env.A=B");
  j = Valid();
  j["domains"]["epp"]["build"]["layered"]["caches"] = {{"GO CACHE", "go-build"}};
  ExpectOnly(j, "domains.epp.build.layered.caches.GO CACHE");
  j = Valid();
  j["domains"]["ranker"]["build"]["containerfile"] = {{"build_args", {{"X-Y", "1"}}}};
  ExpectOnly(j, "domains.ranker.build.containerfile.build_args.X-Y");
}

TEST_F(ConfigParserTest, EveryProblemIsReportedAtOnce) {
  json j = Valid();
  j["bogus"] = true;
  j["server"].erase("state_dir");
  j["scheduler"] = {{"max_parallel_builds", 0}};
  j["registries"]["local"]["auth_file"] = dir_ + "/missing.json";
  j["domains"]["epp"]["build"]["timeout_s"] = 0;
  j["domains"]["epp"]["image"]["registry"] = "nope";
  j["domains"]["ranker"]["token_sha256"] = {"XYZ"};
  j["domains"]["ranker"]["deploy"] = {{"type", "local"}, {"local", {{"port", 70000}}}};
  auto problems = Parse(j);
  for (const char* path :
       {"bogus", "server.state_dir", "scheduler.max_parallel_builds", "registries.local.auth_file",
        "domains.epp.build.timeout_s", "domains.epp.image.registry",
        "domains.ranker.token_sha256[0]", "domains.ranker.deploy.local.port"}) {
    EXPECT_TRUE(HasPath(problems, path)) << path << "\n" << Describe(problems);
  }
  EXPECT_EQ(problems.size(), 8u) << Describe(problems);
}

TEST_F(ConfigParserTest, LoadConfigFileResolvesRelativePathsAgainstItsDirectory) {
  fs::create_directory(dir_ + "/conf");
  WriteFile(dir_ + "/conf/registry-auth.json", "{}");
  json j = Valid();
  j["server"]["state_dir"] = "state";
  j["registries"]["local"]["auth_file"] = "registry-auth.json";
  j["domains"]["epp"]["deploy"]["kubernetes"]["kubeconfig"] = "../conf/registry-auth.json";
  WriteFile(dir_ + "/conf/kiln.json", j.dump(2));

  Config c;
  auto problems = LoadConfigFile(dir_ + "/conf/kiln.json", &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.server.state_dir, dir_ + "/conf/state");
  EXPECT_EQ(c.registries.at("local").auth_file, dir_ + "/conf/registry-auth.json");
  EXPECT_EQ(c.domains.at("epp").deploy.kubernetes->kubeconfig, dir_ + "/conf/registry-auth.json");

  // The same text parsed from another directory does not find the auth file.
  Config c2;
  problems = ParseConfigRelativeTo(j.dump(), dir_, &c2);
  EXPECT_TRUE(HasPath(problems, "registries.local.auth_file")) << Describe(problems);
  EXPECT_EQ(c2.registries.at("local").auth_file, dir_ + "/registry-auth.json");
}

TEST_F(ConfigParserTest, LoadConfigFileReportsUnreadableFileWithEmptyPath) {
  Config c;
  auto problems = LoadConfigFile(dir_ + "/nope.json", &c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "");
  EXPECT_NE(problems[0].reason.find("No such file"), std::string::npos) << problems[0].reason;

  problems = LoadConfigFile(dir_, &c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "");
}

void CopyFile(const std::string& from, const std::string& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

TEST_F(ConfigParserTest, ExampleConfigValidatesWhenItsAuthFileExists) {
  CopyFile(std::string(KILN_CONFIG_EXAMPLES_DIR) + "/kiln.example.json", dir_ + "/kiln.json");
  Config c;
  auto problems = LoadConfigFile(dir_ + "/kiln.json", &c);
  ASSERT_EQ(problems.size(), 1u) << Describe(problems);
  EXPECT_EQ(problems[0].path, "registries.local.auth_file");

  WriteFile(dir_ + "/registry-auth.json", R"({"auths":{}})");
  Config c2;
  problems = LoadConfigFile(dir_ + "/kiln.json", &c2);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c2.domains.size(), 2u);
  EXPECT_EQ(c2.domains.at("epp").build.mode, "containerfile");
  EXPECT_EQ(c2.domains.at("ranker").build.mode, "containerfile");
  EXPECT_EQ(c2.registries.at("local").url, "http://127.0.0.1:5000");
  EXPECT_EQ(c2.server.state_dir, dir_ + "/.kiln-state");
  EXPECT_EQ(c2.domains.at("epp").deploy.type, "none");
}

// Issue 18.
TEST_F(ConfigParserTest, BuildCompressionIsAutoGzipOrNone) {
  Config c;
  ASSERT_TRUE(Parse(Valid(), &c).empty());
  EXPECT_EQ(c.domains.at("epp").build.compression, "auto");
  for (const char* v : {"gzip", "none", "auto"}) {
    json j = Valid();
    j["domains"]["epp"]["build"]["compression"] = v;
    ASSERT_TRUE(Parse(j, &c).empty()) << v;
    EXPECT_EQ(c.domains.at("epp").build.compression, v);
  }
  json j = Valid();
  j["domains"]["epp"]["build"]["compression"] = "zstd";
  ExpectOnly(j, "domains.epp.build.compression");
}

TEST_F(ConfigParserTest, KubernetesLayeredExampleValidates) {
  CopyFile(std::string(KILN_CONFIG_EXAMPLES_DIR) + "/kiln.k8s-layered.example.json",
           dir_ + "/kiln.json");
  WriteFile(dir_ + "/registry-auth.json", "{}");
  WriteFile(dir_ + "/registry-ca.pem", "");
  Config c;
  auto problems = LoadConfigFile(dir_ + "/kiln.json", &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.domains.at("epp").build.mode, "layered");
  EXPECT_EQ(c.domains.at("epp").deploy.type, "kubernetes");
}

TEST_F(ConfigParserTest, CheckConfigCommandOutputForValidConfig) {
  json j = Valid();
  WriteFile(dir_ + "/kiln.json", j.dump());
  std::ostringstream out, err;
  EXPECT_EQ(CheckConfigCommandWithFacts(dir_ + "/kiln.json", SafeHost(), out, err), 0);
  EXPECT_EQ(out.str(), "config OK: 2 domains, 1 registries\n");
  EXPECT_EQ(err.str(), "");
}

TEST_F(ConfigParserTest, CheckConfigCommandPrintsNetworkWarning) {
  json j = Valid();
  j["domains"]["ranker"]["build"]["containerfile"] = {{"network", true}};
  WriteFile(dir_ + "/kiln.json", j.dump());
  std::ostringstream out, err;
  EXPECT_EQ(CheckConfigCommandWithFacts(dir_ + "/kiln.json", SafeHost(), out, err), 0);
  EXPECT_EQ(
      out.str().rfind("WARNING: domains.ranker.build.network: !!! build.network is \"host\"", 0),
      0u)
      << out.str();
  EXPECT_NE(out.str().find("Kubernetes API"), std::string::npos);
  EXPECT_NE(out.str().find("\nconfig OK: 2 domains, 1 registries\n"), std::string::npos);
  EXPECT_EQ(err.str(), "");
}

TEST_F(ConfigParserTest, CheckConfigCommandPrintsEveryProblem) {
  json j = Valid();
  j["domains"]["epp"]["weight"] = 0;
  j["domains"]["ranker"]["image"]["registry"] = "nope";
  WriteFile(dir_ + "/kiln.json", j.dump());
  std::ostringstream out, err;
  EXPECT_EQ(CheckConfigCommand(dir_ + "/kiln.json", out, err), 1);
  EXPECT_EQ(err.str(),
            "domains.epp.weight: must be between 1 and 1000, got 0\n"
            "domains.ranker.image.registry: unknown registry 'nope' (not a key of registries)\n");
  EXPECT_EQ(out.str(), "");
}

TEST_F(ConfigParserTest, CheckConfigCommandNamesTheFileForDocumentProblems) {
  std::string path = dir_ + "/kiln.json";
  WriteFile(path, "{\"server\": ");
  std::ostringstream out, err;
  EXPECT_EQ(CheckConfigCommand(path, out, err), 1);
  EXPECT_EQ(err.str().rfind(path + ": malformed JSON at byte ", 0), 0u) << err.str();
  EXPECT_EQ(out.str(), "");

  std::ostringstream out2, err2;
  EXPECT_EQ(CheckConfigCommand(dir_ + "/nope.json", out2, err2), 1);
  EXPECT_EQ(err2.str(),
            dir_ + "/nope.json: cannot open '" + dir_ + "/nope.json': No such file or directory\n");
}

TEST_F(ConfigParserTest, BuildIsolationFields) {
  json j = Valid();
  j["domains"]["ranker"]["build"]["network"] = "host";
  j["domains"]["ranker"]["build"]["user"] = "builder-2";
  j["domains"]["ranker"]["build"]["max_file_mb"] = 64;
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  const BuildConfig& b = c.domains.at("ranker").build;
  EXPECT_EQ(b.network, "host");
  EXPECT_TRUE(b.containerfile.network);  // layered mode reads this one
  EXPECT_EQ(b.user, "builder-2");
  EXPECT_EQ(b.max_file_mb, 64);
  EXPECT_EQ(c.domains.at("epp").build.network, "none");
  EXPECT_FALSE(c.domains.at("epp").build.containerfile.network);
}

TEST_F(ConfigParserTest, BuildIsolationFieldsAreValidated) {
  auto one = [&](const char* key, json value, const std::string& path) {
    json j = Valid();
    j["domains"]["ranker"]["build"][key] = value;
    auto problems = Parse(j);
    ASSERT_EQ(problems.size(), 1u) << key << ": " << Describe(problems);
    EXPECT_EQ(problems[0].path, path);
  };
  one("network", "bridge", "domains.ranker.build.network");
  one("network", true, "domains.ranker.build.network");
  one("user", "root", "domains.ranker.build.user");
  one("user", "a b", "domains.ranker.build.user");
  one("max_file_mb", 0, "domains.ranker.build.max_file_mb");
  json j = Valid();
  j["domains"]["ranker"]["build"]["network"] = "none";
  j["domains"]["ranker"]["build"]["containerfile"] = {{"network", true}};
  auto problems = Parse(j);
  ASSERT_EQ(problems.size(), 1u) << Describe(problems);
  EXPECT_EQ(problems[0].path, "domains.ranker.build.containerfile.network");
}

// --- issue 18: build.on_push ---
TEST_F(ConfigParserTest, BuildOnPushDefaultsOnAndIsValidated) {
  json j = Valid();
  j["domains"]["ranker"]["build"]["on_push"] = false;
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_FALSE(c.domains.at("ranker").build.on_push);
  EXPECT_TRUE(c.domains.at("epp").build.on_push);                // default
  EXPECT_FALSE(c.domains.at("epp").build.cancel_on_disconnect);  // issue 17: default
  j["domains"]["ranker"]["build"]["on_push"] = "yes";
  problems = Parse(j);
  ASSERT_EQ(problems.size(), 1u) << Describe(problems);
  EXPECT_EQ(problems[0].path, "domains.ranker.build.on_push");
}
// --- end issue 18 ---

// --- issue 15: build.base_images ---
TEST_F(ConfigParserTest, BaseImagesParsedAndValidated) {
  json j = Valid();
  Config c;
  ASSERT_TRUE(Parse(j, &c).empty());
  EXPECT_FALSE(c.domains.at("ranker").build.base_images.has_value());  // absent: the default
  j["domains"]["ranker"]["build"]["base_images"] = {"kiln/*", "base/go-builder:1.*"};
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  ASSERT_TRUE(c.domains.at("ranker").build.base_images.has_value());
  EXPECT_EQ(*c.domains.at("ranker").build.base_images,
            (std::vector<std::string>{"kiln/*", "base/go-builder:1.*"}));
  j["domains"]["ranker"]["build"]["base_images"] = json::array();
  ASSERT_TRUE(Parse(j, &c).empty());
  EXPECT_TRUE(c.domains.at("ranker").build.base_images->empty());  // own repository only
  j["domains"]["ranker"]["build"]["base_images"] = {"kiln/*", "127.0.0.1:5000/kiln/x"};
  ExpectOnly(j, "domains.ranker.build.base_images[1]");
  j["domains"]["ranker"]["build"]["base_images"] = {"Kiln/X"};
  ExpectOnly(j, "domains.ranker.build.base_images[0]");
  j["domains"]["ranker"]["build"]["base_images"] = "kiln/*";
  ExpectOnly(j, "domains.ranker.build.base_images");
  j["domains"]["ranker"]["build"]["base_images"] = {7};
  ExpectOnly(j, "domains.ranker.build.base_images[0]");
}

TEST_F(ConfigParserTest, CheckConfigReportsOverlappingRepositories) {
  json j = Valid();
  j["domains"]["ranker"]["image"]["repository"] = "loop/epp/ranker";
  const std::string path = dir_ + "/kiln.json";
  WriteFile(path, j.dump());
  std::ostringstream out, err;
  EXPECT_EQ(CheckConfigCommandWithFacts(path, SafeHost(), out, err), 1);
  EXPECT_NE(err.str().find("domains.ranker.image.repository: 'loop/epp/ranker' lies under domain "
                           "epp's image repository"),
            std::string::npos)
      << err.str();
  j = Valid();
  j["domains"]["ranker"]["build"]["base_images"] = {"loop/*"};
  WriteFile(path, j.dump());
  std::ostringstream out2, err2;
  EXPECT_EQ(CheckConfigCommandWithFacts(path, SafeHost(), out2, err2), 1);
  EXPECT_NE(err2.str().find("domains.ranker.build.base_images[0]: 'loop/*' matches domain epp's"),
            std::string::npos)
      << err2.str();
}
// --- end issue 15 ---
// --- Issue 15: push limits ---------------------------------------------------------------
TEST_F(ConfigParserTest, PushLimitsHaveDefaultsAGlobalValueAndPerDomainOverrides) {
  json j = Valid();
  Config c;
  ASSERT_TRUE(Parse(j, &c).empty());
  EXPECT_EQ(c.push.max_tree_bytes, int64_t{512} << 20);
  EXPECT_EQ(c.push.max_files, 100000);
  EXPECT_EQ(c.push.max_file_bytes, int64_t{64} << 20);
  EXPECT_EQ(c.push.max_refs_per_push, 64);
  EXPECT_EQ(c.domains.at("epp").push.max_files, 100000);

  j["push"] = {{"max_tree_bytes", 1 << 30}, {"max_refs_per_push", 8}};
  j["domains"]["epp"]["push"] = {{"max_files", 500}, {"max_file_bytes", 4096}};
  Config c2;
  auto problems = Parse(j, &c2);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  const PushLimitsConfig& epp = c2.domains.at("epp").push;
  EXPECT_EQ(epp.max_tree_bytes, 1 << 30);  // global
  EXPECT_EQ(epp.max_refs_per_push, 8);     // global
  EXPECT_EQ(epp.max_files, 500);           // own
  EXPECT_EQ(epp.max_file_bytes, 4096);     // own
  const PushLimitsConfig& ranker = c2.domains.at("ranker").push;
  EXPECT_EQ(ranker.max_tree_bytes, 1 << 30);
  EXPECT_EQ(ranker.max_files, 100000);
}

TEST_F(ConfigParserTest, PushLimitsAreValidated) {
  json j = Valid();
  j["push"] = {{"max_files", 0}};
  ExpectOnly(j, "push.max_files");
  j = Valid();
  j["push"] = {{"max_tree_bytes", "big"}};
  ExpectOnly(j, "push.max_tree_bytes");
  j = Valid();
  j["domains"]["epp"]["push"] = {{"max_refs_per_push", 100000}};
  ExpectOnly(j, "domains.epp.push.max_refs_per_push");
  j = Valid();
  j["domains"]["epp"]["push"] = {{"max_file_bytes", 10}};
  ExpectOnly(j, "domains.epp.push.max_file_bytes");
  j = Valid();
  j["domains"]["epp"]["push"] = {{"max_bytes", 10}};
  EXPECT_FALSE(Parse(j).empty());
}
// --- end issue 15 ------------------------------------------------------------------------
// --- per-domain build slots (issue 15) ---
TEST_F(ConfigParserTest, DomainMaxParallelBuildsParsesAndDefaults) {
  json j = Valid();
  j["scheduler"] = {{"max_parallel_builds", 5}};
  j["domains"]["epp"]["max_parallel_builds"] = 2;
  Config c;
  auto problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.domains["epp"].max_parallel_builds, 2);
  EXPECT_FALSE(c.domains["ranker"].max_parallel_builds.has_value());
  EXPECT_EQ(DomainBuildSlots(c, c.domains["epp"]), 2);
  EXPECT_EQ(DomainBuildSlots(c, c.domains["ranker"]), 3);  // several domains: half, rounded up
  // One domain alone keeps every slot by default.
  json one = Valid();
  one["scheduler"] = {{"max_parallel_builds", 5}};
  one["domains"].erase("ranker");
  Config c1;
  problems = Parse(one, &c1);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(DomainBuildSlots(c1, c1.domains["epp"]), 5);
  // A configured cap equal to the global one is allowed.
  j["domains"]["epp"]["max_parallel_builds"] = 5;
  Config c2;
  ASSERT_TRUE(Parse(j, &c2).empty());
  EXPECT_EQ(DomainBuildSlots(c2, c2.domains["epp"]), 5);
}

TEST_F(ConfigParserTest, DomainMaxParallelBuildsRejectsBadValues) {
  for (const json& bad : {json(0), json(65), json(-1), json("2"), json(1.5), json(true)}) {
    json j = Valid();
    j["scheduler"] = {{"max_parallel_builds", 64}};
    j["domains"]["epp"]["max_parallel_builds"] = bad;
    ExpectOnly(j, "domains.epp.max_parallel_builds");
  }
  json j = Valid();
  j["scheduler"] = {{"max_parallel_builds", 2}};
  j["domains"]["ranker"]["max_parallel_builds"] = 3;
  auto problems = Parse(j);
  ASSERT_EQ(problems.size(), 1u) << Describe(problems);
  EXPECT_EQ(problems[0].path, "domains.ranker.max_parallel_builds");
  EXPECT_NE(problems[0].reason.find("must not exceed scheduler.max_parallel_builds (2)"),
            std::string::npos)
      << problems[0].reason;
}
// --- end per-domain build slots ---
// ---- Issue 15: sandbox limits ----

TEST_F(ConfigParserTest, SandboxLimitsDefaultsAndValues) {
  Config c;
  auto problems = Parse(Valid(), &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  const BuildConfig& d = c.domains.at("epp").build;
  EXPECT_EQ(d.limits.max_processes, 512);
  EXPECT_EQ(d.limits.max_memory_mb, 4096);
  LocalDeploy ld;
  EXPECT_EQ(ld.user, "kiln-build");
  EXPECT_EQ(ld.max_rootfs_mb, 2048);
  EXPECT_EQ(ld.max_file_mb, 8192);
  EXPECT_EQ(ld.limits.max_processes, 512);

  json j = Valid();
  j["domains"]["ranker"]["build"]["limits"] = {{"max_processes", 64}, {"max_memory_mb", 1024}};
  j["domains"]["ranker"]["deploy"] = {
      {"type", "local"},
      {"local",
       {{"port", 9100},
        {"user", "svc-1"},
        {"max_rootfs_mb", 100},
        {"max_file_mb", 10},
        {"limits", {{"max_processes", 32}, {"max_memory_mb", 256}}}}}};
  problems = Parse(j, &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  const BuildConfig& b = c.domains.at("ranker").build;
  EXPECT_EQ(b.limits.max_processes, 64);
  EXPECT_EQ(b.limits.max_memory_mb, 1024);
  const LocalDeploy& l = *c.domains.at("ranker").deploy.local;
  EXPECT_EQ(l.user, "svc-1");
  EXPECT_EQ(l.max_rootfs_mb, 100);
  EXPECT_EQ(l.max_file_mb, 10);
  EXPECT_EQ(l.limits.max_processes, 32);
  EXPECT_EQ(l.limits.max_memory_mb, 256);
}

TEST_F(ConfigParserTest, SandboxLimitsAreValidated) {
  auto build = [&](json limits, const std::string& path) {
    json j = Valid();
    j["domains"]["ranker"]["build"]["limits"] = limits;
    auto problems = Parse(j);
    ASSERT_EQ(problems.size(), 1u) << Describe(problems);
    EXPECT_EQ(problems[0].path, path);
  };
  build({{"max_processes", 0}}, "domains.ranker.build.limits.max_processes");
  build({{"max_memory_mb", 8}}, "domains.ranker.build.limits.max_memory_mb");
  build({{"max_memory_mb", "4096"}}, "domains.ranker.build.limits.max_memory_mb");
  build({{"max_threads", 4}}, "domains.ranker.build.limits.max_threads");
  auto local = [&](const char* key, json value, const std::string& path) {
    json j = Valid();
    j["domains"]["ranker"]["deploy"] = {{"type", "local"},
                                        {"local", {{"port", 9100}, {key, value}}}};
    auto problems = Parse(j);
    ASSERT_EQ(problems.size(), 1u) << key << ": " << Describe(problems);
    EXPECT_EQ(problems[0].path, path);
  };
  local("user", "root", "domains.ranker.deploy.local.user");
  local("user", "a b", "domains.ranker.deploy.local.user");
  local("max_rootfs_mb", 0, "domains.ranker.deploy.local.max_rootfs_mb");
  local("max_file_mb", -1, "domains.ranker.deploy.local.max_file_mb");
  local("limits", {{"max_processes", 0}}, "domains.ranker.deploy.local.limits.max_processes");
}

// --- Issue 19: storage budget ---------------------------------------------------------------
TEST_F(ConfigParserTest, StorageBudgetHasDefaultsAndIsValidated) {
  Config c;
  auto problems = Parse(Valid(), &c);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(c.storage.max_gb, 0);
  EXPECT_EQ(c.storage.gc_interval_s, 300);
  EXPECT_EQ(c.storage.candidate_idle_s, 6 * 3600);
  EXPECT_EQ(c.storage.workspace_idle_s, 24 * 3600);
  EXPECT_EQ(c.storage.headroom_pct, 20);
  EXPECT_EQ(c.domains.at("epp").storage.max_gb, 0);

  json j = Valid();
  j["storage"] = {{"max_gb", 20},
                  {"gc_interval_s", 60},
                  {"candidate_idle_s", 600},
                  {"workspace_idle_s", 0},
                  {"headroom_pct", 0}};
  j["domains"]["epp"]["storage"] = {{"max_gb", 0.5}};
  Config d;
  problems = Parse(j, &d);
  ASSERT_TRUE(problems.empty()) << Describe(problems);
  EXPECT_EQ(d.storage.max_gb, 20);
  EXPECT_EQ(d.storage.gc_interval_s, 60);
  EXPECT_EQ(d.storage.candidate_idle_s, 600);
  EXPECT_EQ(d.storage.workspace_idle_s, 0);
  EXPECT_EQ(d.storage.headroom_pct, 0);
  EXPECT_DOUBLE_EQ(d.domains.at("epp").storage.max_gb, 0.5);
  EXPECT_EQ(d.domains.at("ranker").storage.max_gb, 0);

  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"max_gb", -1},
                                                 {"max_gb", "10"},
                                                 {"max_gb", 2000000},
                                                 {"gc_interval_s", 5},
                                                 {"gc_interval_s", 1.5},
                                                 {"candidate_idle_s", -1},
                                                 {"workspace_idle_s", 40000000},
                                                 {"headroom_pct", 91},
                                                 {"headroom_pct", -1},
                                                 {"nope", 1}}) {
    json bad = Valid();
    bad["storage"] = {{key, value}};
    ExpectOnly(bad, "storage." + key);
  }
  json bad = Valid();
  bad["domains"]["epp"]["storage"] = {{"max_gb", -0.1}};
  ExpectOnly(bad, "domains.epp.storage.max_gb");
  bad["domains"]["epp"]["storage"] = {{"max_bytes", 1}};
  ExpectOnly(bad, "domains.epp.storage.max_bytes");
  bad["domains"]["epp"]["storage"] = 5;
  ExpectOnly(bad, "domains.epp.storage");
  // A domain budget above the global one is refused.
  bad = Valid();
  bad["storage"] = {{"max_gb", 1}};
  bad["domains"]["epp"]["storage"] = {{"max_gb", 2}};
  ExpectOnly(bad, "domains.epp.storage.max_gb");
}
// --- end issue 19 ---------------------------------------------------------------------------

// --- issue 20: scheduler.workers ---------------------------------------------------------
TEST_F(ConfigParserTest, SchedulerWorkersAreValidated) {
  Config c;
  ASSERT_TRUE(Parse(Valid(), &c).empty());
  EXPECT_TRUE(c.scheduler.workers.empty());  // default: no pool, single node as before
  json j = Valid();
  // The pool's mutual TLS files (any readable file passes the parser).
  const json tls = {{"certificate", auth_file_}, {"key", auth_file_}, {"worker_ca", auth_file_}};
  j["scheduler"] = {{"workers", {"10.0.0.5:8710", "[fd00::1]:8711", "build-2.lan:9000"}},
                    {"worker_tls", tls}};
  ASSERT_TRUE(Parse(j, &c).empty()) << Describe(Parse(j));
  EXPECT_EQ(c.scheduler.workers.size(), 3u);
  EXPECT_EQ(c.scheduler.worker_tls_ca, auth_file_);
  for (const std::string bad : {"10.0.0.5", ":8710", "h:0", "h:70000", "h:8a", "fd00::1:8710"}) {
    j["scheduler"] = {{"workers", {"ok:1", bad}}, {"worker_tls", tls}};
    ExpectOnly(j, "scheduler.workers[1]");
  }
  j["scheduler"] = {{"workers", {"a:1", "a:1"}}, {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.workers[1]");
  j["scheduler"] = {{"workers", "a:1"}};
  ExpectOnly(j, "scheduler.workers");
  // Workers without the pool's TLS identity: refused, naming what is missing.
  j["scheduler"] = {{"workers", {"a:1"}}};
  ExpectOnly(j, "scheduler.worker_tls");
  j["scheduler"] = {{"workers", {"a:1"}},
                    {"worker_tls", {{"certificate", auth_file_}, {"worker_ca", auth_file_}}}};
  ExpectOnly(j, "scheduler.worker_tls.key");
  // The workers' git credential is a token hash like the others, and unique.
  j["scheduler"] = {{"worker_token_sha256", {"nothex"}}};
  ExpectOnly(j, "scheduler.worker_token_sha256[0]");
  j["scheduler"] = {{"worker_token_sha256", {kHashC}}};  // the operator's
  ExpectOnly(j, "scheduler.worker_token_sha256[0]");
}

TEST_F(ConfigParserTest, SchedulerWorkerServiceIsValidated) {
  Config c;
  ASSERT_TRUE(Parse(Valid(), &c).empty());
  EXPECT_TRUE(c.scheduler.worker_service.empty());  // default: no discovery
  EXPECT_EQ(c.scheduler.worker_service_port_name, "kiln-worker");
  const json tls = {{"certificate", auth_file_}, {"key", auth_file_}, {"worker_ca", auth_file_}};
  json j = Valid();
  j["scheduler"] = {{"worker_service", {{"service", "kiln-worker"}}}, {"worker_tls", tls}};
  ASSERT_TRUE(Parse(j, &c).empty()) << Describe(Parse(j));
  EXPECT_EQ(c.scheduler.worker_service, "kiln-worker");
  EXPECT_TRUE(c.scheduler.worker_service_namespace.empty());        // the service account's
  EXPECT_FALSE(c.scheduler.worker_service_kubeconfig.has_value());  // in-cluster
  j["scheduler"] = {{"worker_service",
                     {{"service", "w"},
                      {"namespace", "builds"},
                      {"port_name", "rpc"},
                      {"kubeconfig", auth_file_}}},
                    {"worker_tls", tls}};
  ASSERT_TRUE(Parse(j, &c).empty()) << Describe(Parse(j));
  EXPECT_EQ(c.scheduler.worker_service_namespace, "builds");
  EXPECT_EQ(c.scheduler.worker_service_port_name, "rpc");
  EXPECT_EQ(c.scheduler.worker_service_kubeconfig.value_or(""), auth_file_);
  // Refused, each naming its key.
  j["scheduler"] = {{"worker_service", {{"service", "w"}}}};
  ExpectOnly(j, "scheduler.worker_tls");
  j["scheduler"] = {{"worker_service", json::object()}, {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.worker_service.service");
  j["scheduler"] = {{"worker_service", {{"service", "../x"}}}, {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.worker_service.service");
  j["scheduler"] = {{"worker_service", {{"service", "w"}, {"watch", true}}}, {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.worker_service.watch");
  j["scheduler"] = {{"worker_service", {{"service", "w"}, {"kubeconfig", "/nonexistent/kc"}}},
                    {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.worker_service.kubeconfig");
  j["scheduler"] = {
      {"workers", {"a:1"}}, {"worker_service", {{"service", "w"}}}, {"worker_tls", tls}};
  ExpectOnly(j, "scheduler.worker_service");
}
// --- end issue 20 ---------------------------------------------------------------------------

}  // namespace
}  // namespace kiln
