// Integration tests of kiln's core against REAL buildah and a REAL docker-registry (htpasswd
// auth, plain HTTP on 127.0.0.1): the same scenarios as actors/actors_test.cc, which uses a
// FakeBuilder. Needs root (buildah --isolation chroot), buildah, skopeo, docker-registry,
// htpasswd and git; see docs/testing.md.
//
// One registry and one kiln state directory serve the whole suite (IntegrationEnv), so each
// candidate's buildah storage is filled once and reused by later tests; every test makes its
// own Runtime with the config it needs. Environment knobs:
//   KILN_IT_PORT=5101   registry port       KILN_IT_KEEP=1   keep the temp directory
//   KILN_IT_PARENT=DIR  where the temp directory goes (default /dev/shm when it has 8 GB free)
//   KILN_TEST_DEBUG=1   kiln debug logs
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "actors/runtime.h"
#include "app/composition.h"
#include "tests/integration/command.h"
#include "tests/integration/test_registry.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must be defined by the build"
#endif

namespace kiln::integration {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kAlpha = "alpha";
constexpr const char* kBeta = "beta";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// Polls `pred` every 50 ms until it holds or `limit` passes; returns its last value.
template <typename Pred>
bool WaitFor(Pred pred, milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (true) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

// The build user's uid ("" when it does not exist): names its base store (builder/base_store.h).
std::string BuildUid() {
  struct passwd* pw = ::getpwnam("kiln-build");
  return pw ? std::to_string(pw->pw_uid) : "";
}

// A TCP port on 127.0.0.1 that nothing listens on (bound, then released).
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// ---------------------------------------------------------------------------------------------
// Suite-wide environment: temp dir, registry, base images.

class IntegrationEnv : public ::testing::Environment {
 public:
  static IntegrationEnv* Get() { return instance_; }

  void SetUp() override {
    instance_ = this;
    auto t0 = Clock::now();
    if (getenv("KILN_TEST_DEBUG"))
      spdlog::set_level(spdlog::level::debug);
    else
      spdlog::set_level(spdlog::level::warn);
    ASSERT_EQ(::geteuid(), 0u) << "the integration tests run buildah as root (--isolation chroot)";
    fs::path parent = ParentDir();
    RemoveStaleDirs(parent);
    std::string tmpl = (parent / ("kiln-it-" + std::to_string(::getpid()) + "-XXXXXX")).string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
    int port = getenv("KILN_IT_PORT") ? atoi(getenv("KILN_IT_PORT")) : 5101;
    registry_ = std::make_unique<TestRegistry>(KILN_SOURCE_DIR, (dir_ / "registry").string(), port);
    Status st = registry_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = registry_->PushBaseImages();
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::string d;
    ASSERT_TRUE(registry_->ManifestDigest("kiln/busybox:1", &d).ok());
    ASSERT_TRUE(registry_->ManifestDigest("kiln/go-builder:1.19", &d).ok());
    fprintf(
        stderr, "[integration] registry %s and base images ready in %lld ms (dir %s)\n",
        registry_->host().c_str(),
        static_cast<long long>(std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count()),
        dir_.c_str());
  }

  void TearDown() override {
    if (registry_) registry_->Stop();
    if (getenv("KILN_IT_KEEP")) {
      fprintf(stderr, "[integration] kept %s\n", dir_.c_str());
      return;
    }
    // Candidate storages hold no working containers after a clean run; make sure anyway, so
    // nothing is mounted below the directory we delete.
    std::error_code ec;
    fs::path domains = dir_ / "state" / "domains";
    if (fs::exists(domains)) {
      for (const auto& d : fs::directory_iterator(domains, ec)) {
        fs::path cands = d.path() / "candidates";
        if (!fs::exists(cands)) continue;
        for (const auto& c : fs::directory_iterator(cands, ec)) {
          fs::path storage = c.path() / "storage";
          if (!fs::exists(storage / "root")) continue;
          RunCommand({"buildah", "--root", (storage / "root").string(), "--runroot",
                      (storage / "run").string(), "--storage-driver", "overlay", "rm", "--all"},
                     "", seconds(60));
        }
      }
    }
    fs::remove_all(dir_, ec);
    if (ec)
      fprintf(stderr, "[integration] could not remove %s: %s\n", dir_.c_str(),
              ec.message().c_str());
  }

  const fs::path& dir() const { return dir_; }

  // /dev/shm when it has room: deleting the candidates' buildah storages (tens of thousands of
  // files) from a disk mounted with `discard` takes minutes; from tmpfs it is instant.
  static fs::path ParentDir() {
    if (const char* p = getenv("KILN_IT_PARENT")) return p;
    std::error_code ec;
    auto sp = fs::space("/dev/shm", ec);
    if (!ec && sp.available > (8ull << 30)) return "/dev/shm";
    return fs::temp_directory_path();
  }

  // Directories of earlier runs whose process is gone (killed before its tear-down).
  static void RemoveStaleDirs(const fs::path& parent) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      std::string n = e.path().filename().string();
      if (n.rfind("kiln-it-", 0) != 0) continue;
      int pid = atoi(n.c_str() + 8);
      if (pid <= 0 || pid == ::getpid() || fs::exists("/proc/" + std::to_string(pid))) continue;
      RunCommand({"bash", std::string(KILN_SOURCE_DIR) + "/scripts/registry.sh", "stop", "--dir",
                  (e.path() / "registry").string()},
                 "", seconds(30));
      fs::remove_all(e.path(), ec);
    }
  }
  fs::path state_dir() const { return dir_ / "state"; }
  TestRegistry& registry() { return *registry_; }

 private:
  static inline IntegrationEnv* instance_ = nullptr;
  fs::path dir_;
  std::unique_ptr<TestRegistry> registry_;
};

// ---------------------------------------------------------------------------------------------
// Per-test fixture: config, runtime, sources.

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = IntegrationEnv::Get();
    ASSERT_NE(env_, nullptr);
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    src_root_ = env_->dir() / "src" / name_;
    fs::remove_all(src_root_);
    fs::create_directories(src_root_);
  }
  void TearDown() override {
    if (rt_) rt_->Shutdown(milliseconds(0));
    rt_.reset();
  }

  TestRegistry& registry() { return env_->registry(); }

  // A config with domains alpha and beta pushing to the suite's registry.
  std::shared_ptr<Config> BaseConfig(int max_parallel) {
    auto cfg = std::make_shared<Config>();
    cfg->server.state_dir = env_->state_dir().string();
    cfg->scheduler.max_parallel_builds = max_parallel;
    cfg->registries["local"] =
        RegistryConfig{"local", registry().url(), registry().auth_file(), std::nullopt};
    for (const char* d : {kAlpha, kBeta}) {
      DomainConfig dc;
      dc.name = d;
      dc.build.timeout_s = 600;
      dc.image = {"local", std::string("it/") + d};
      cfg->domains[d] = dc;
    }
    return cfg;
  }

  void Start(std::shared_ptr<Config> cfg, bool open_repositories = false) {
    RuntimeOptions opts;
    opts.open_repositories = open_repositories;
    ComposeRuntime(cfg, &opts);
    Status st = Runtime::Create(cfg, opts, &rt_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // A copy of examples/epp whose default port string is `variant` (changes the binary).
  std::string EppSource(const std::string& name, const std::string& variant) {
    fs::path dst = src_root_ / name;
    fs::remove_all(dst);
    fs::copy(fs::path(KILN_SOURCE_DIR) / "examples" / "epp", dst, fs::copy_options::recursive);
    fs::path main_go = dst / "cmd" / "epp" / "main.go";
    std::string text = ReadFile(main_go);
    const std::string from = "port = \"9000\"";
    auto pos = text.find(from);
    EXPECT_NE(pos, std::string::npos) << "examples/epp/cmd/epp/main.go changed";
    if (pos != std::string::npos) text.replace(pos, from.size(), "port = \"" + variant + "\"");
    WriteFile(main_go, text);
    return dst.string();
  }

  // A busybox-only image: COPY of a note (content makes the tree unique) and one RUN step.
  std::string BusyboxSource(const std::string& name, const std::string& note,
                            const std::string& run = "echo built") {
    fs::path dst = src_root_ / name;
    fs::remove_all(dst);
    WriteFile(dst / "Containerfile",
              "ARG KILN_REGISTRY\n"
              "FROM ${KILN_REGISTRY}/kiln/busybox:1\n"
              "COPY note.txt /note.txt\n"
              "RUN " +
                  run + "\n");
    WriteFile(dst / "note.txt", note + "\n");
    return dst.string();
  }

  ToolResult Build(const std::string& domain, const std::string& cand, const std::string& src) {
    BuildRequest req;
    req.candidate = cand;
    req.source_dir = src;
    return rt_->BuildAndWait(domain, req);
  }

  std::future<ToolResult> BuildAsync(const std::string& domain, const std::string& cand,
                                     const std::string& src) {
    return std::async(std::launch::async, [=] { return Build(domain, cand, src); });
  }

  // One tool call through the ToolBackend interface; `handle` receives its handle.
  std::future<ToolResult> CallAsync(const std::string& domain, const std::string& tool, json args,
                                    uint64_t* handle) {
    auto p = std::make_shared<std::promise<ToolResult>>();
    auto f = p->get_future();
    *handle = rt_->Call({domain, tool, std::move(args)}, nullptr,
                        [p](ToolResult r) { p->set_value(std::move(r)); });
    return f;
  }

  // One tool call through the ToolBackend interface, waited for.
  ToolResult Call(const std::string& domain, const std::string& tool, json args) {
    auto p = std::make_shared<std::promise<ToolResult>>();
    auto f = p->get_future();
    rt_->Call({domain, tool, std::move(args)}, nullptr,
              [p](ToolResult r) { p->set_value(std::move(r)); });
    if (f.wait_for(seconds(900)) != std::future_status::ready)
      return {{{"error", "test: no answer to " + tool}}, true};
    return f.get();
  }

  std::string State(const std::string& domain, const std::string& cand) {
    ToolResult st = Call(domain, "candidate_status", {{"candidate", cand}});
    return st.structured.value("state", "");
  }

  std::string LatestBuildId(const std::string& domain, const std::string& cand) {
    ToolResult st = Call(domain, "candidate_status", {{"candidate", cand}});
    if (!st.structured["latest_build"].is_object()) return "";
    return st.structured["latest_build"].value("build_id", "");
  }

  // The whole log of a build (pages through build_log).
  std::string FullLog(const std::string& domain, const std::string& id) {
    std::string text;
    uint64_t offset = 0;
    for (int i = 0; i < 1000; ++i) {
      ToolResult r = Call(domain, "build_log", {{"build_id", id}, {"offset", offset}});
      if (r.is_error) break;
      text += r.structured.value("text", "");
      uint64_t next = r.structured.value("next_offset", offset);
      if (next == offset) break;
      offset = next;
    }
    return text;
  }

  fs::path StorageDir(const std::string& domain, const std::string& cand) {
    return env_->state_dir() / "domains" / domain / "candidates" / cand / "storage";
  }

  // Working containers left in a candidate's buildah storage (ids, one per line; "" if none).
  // Working containers left in the candidate's rootless store (buildah runs as the build user
  // with overlay storage under <storage>/rootless/root): their ids, "" when none.
  std::string WorkingContainers(const std::string& domain, const std::string& cand) {
    fs::path f =
        StorageDir(domain, cand) / "rootless" / "root" / "overlay-containers" / "containers.json";
    EXPECT_TRUE(fs::exists(StorageDir(domain, cand) / "rootless" / "root")) << "no rootless store";
    std::ifstream in(f);
    if (!in) return "";
    json j = json::parse(in, nullptr, false);
    EXPECT_TRUE(j.is_array()) << f;
    std::string ids;
    if (j.is_array())
      for (const auto& c : j) ids += c.value("id", "?") + "\n";
    return ids;
  }

  // Asserts that `r` is a successful build whose image the registry really serves, under the
  // digest reported and (when `tag_current`) under the candidate's tag. Returns the digest.
  std::string ExpectPushed(const ToolResult& r, const std::string& domain, const std::string& cand,
                           bool tag_current = true) {
    const json& s = r.structured;
    EXPECT_FALSE(r.is_error) << s.dump(2);
    EXPECT_EQ(s.value("status", ""), "succeeded") << s.dump(2);
    if (!s.contains("image") || !s["image"].is_object()) {
      ADD_FAILURE() << "no image in " << s.dump(2);
      return "";
    }
    std::string digest = s["image"].value("digest", "");
    std::string ref = s["image"].value("ref", "");
    EXPECT_EQ(digest.rfind("sha256:", 0), 0u) << digest;
    EXPECT_EQ(digest.size(), 71u) << digest;
    EXPECT_EQ(ref, registry().host() + "/it/" + domain + "@" + digest);
    std::string served;
    Status st = registry().ManifestDigest("it/" + domain + "@" + digest, &served);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(served, digest);
    if (tag_current) {
      std::string tagged;
      st = registry().ManifestDigest("it/" + domain + ":" + cand, &tagged);
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(tagged, digest) << "tag it/" << domain << ":" << cand
                                << " does not point at the build";
    }
    return digest;
  }

  IntegrationEnv* env_ = nullptr;
  std::string name_;
  fs::path src_root_;
  std::unique_ptr<Runtime> rt_;
};

// Restarts the suite's registry when a test that stopped it ends (also on failure).
class RegistryRestarter {
 public:
  explicit RegistryRestarter(TestRegistry* r) : r_(r) {}
  ~RegistryRestarter() {
    Status st = r_->Start();
    EXPECT_TRUE(st.ok()) << "could not restart the registry: " << st.ToString();
  }

 private:
  TestRegistry* r_;
};

// ---------------------------------------------------------------------------------------------

// 1. Four candidates in two domains build at the same time; each gets its own image in the
// registry.
TEST_F(IntegrationTest, FourCandidatesInTwoDomainsBuildConcurrently) {
  Start(BaseConfig(4));
  std::vector<std::pair<std::string, std::string>> cands = {
      {kAlpha, "c1"}, {kAlpha, "c2"}, {kBeta, "c1"}, {kBeta, "c2"}};
  std::vector<std::future<ToolResult>> futures;
  int variant = 9101;
  for (const auto& [d, c] : cands)
    futures.push_back(BuildAsync(d, c, EppSource(d + "-" + c, std::to_string(variant++))));
  std::set<std::string> digests;
  int64_t min_build_end = INT64_MAX, max_build_start = 0;
  for (size_t i = 0; i < futures.size(); ++i) {
    ToolResult r = futures[i].get();
    digests.insert(ExpectPushed(r, cands[i].first, cands[i].second));
    const json& t = r.structured["timings"];
    EXPECT_GT(t.value("build_ms", 0), 0) << r.structured.dump(2);
    EXPECT_GT(t.value("push_ms", 0), 0);
    EXPECT_FALSE(r.structured.value("cache_hit", true));
    int64_t start = t.value("queued_ms", 0);
    max_build_start = std::max(max_build_start, start);
    min_build_end = std::min(min_build_end, start + t.value("build_ms", 0));
  }
  EXPECT_EQ(digests.size(), 4u);
  // With 4 slots nobody waited for a slot: every build started before the first one finished.
  EXPECT_LT(max_build_start, min_build_end) << "the builds did not overlap";
}

// 2. A compile error is a failed build with diagnostics pointing into the source tree.
TEST_F(IntegrationTest, CompileErrorReturnsDiagnostics) {
  Start(BaseConfig(2));
  std::string src = EppSource("broken", "9201");
  fs::path scorer = fs::path(src) / "internal" / "scorer" / "scorer.go";
  std::string text = ReadFile(scorer);
  auto pos = text.find("s += w.Adapter\n");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, std::string("s += w.Adapter").size(), "s += w.AdapterPenalty");
  WriteFile(scorer, text);

  ToolResult r = Build(kAlpha, "c1", src);
  const json& s = r.structured;
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(s.value("status", ""), "failed") << s.dump(2);
  EXPECT_TRUE(s["image"].is_null());
  ASSERT_TRUE(s["diagnostics"].is_array()) << s.dump(2);
  ASSERT_GE(s["diagnostics"].size(), 1u) << s.dump(2);
  const json& d = s["diagnostics"][0];
  EXPECT_EQ(d.value("file", ""), "internal/scorer/scorer.go") << d.dump();
  EXPECT_EQ(d.value("line", 0), 20) << d.dump();
  EXPECT_EQ(d.value("column", 0), 10) << d.dump();
  EXPECT_EQ(d.value("severity", ""), "error") << d.dump();
  EXPECT_TRUE(Contains(d.value("message", ""), "AdapterPenalty")) << d.dump();
  EXPECT_TRUE(Contains(s.value("log_tail", ""), "w.AdapterPenalty undefined")) << s.dump(2);
  EXPECT_EQ(s["timings"].value("push_ms", -1), 0);
  // A failed RUN step leaves no working container behind in the candidate's storage.
  EXPECT_EQ(WorkingContainers(kAlpha, "c1"), "");
}

// 3. cancel_build stops a running RUN step at once and leaves neither processes nor working
// containers behind.
TEST_F(IntegrationTest, CancelBuildKillsEverythingAndCleansStorage) {
  Start(BaseConfig(1));  // one slot: the build after the cancel proves the slot was released
  std::string marker = "kiln-it-cancel-" + std::to_string(::getpid());
  // The marker is in the source path (so in buildah's argv) and in the RUN shell's argv.
  std::string src = BusyboxSource(marker, marker, "sh -c 'sleep 317; true' " + marker);
  auto f = BuildAsync(kAlpha, "slow", src);
  ASSERT_TRUE(WaitFor([] { return !Pgrep("^sleep 317").empty(); }, seconds(180)))
      << "the RUN step never started";
  EXPECT_FALSE(Pgrep(marker).empty());
  EXPECT_EQ(State(kAlpha, "slow"), "building");
  std::string id = LatestBuildId(kAlpha, "slow");
  ASSERT_FALSE(id.empty());

  auto t0 = Clock::now();
  ToolResult c = Call(kAlpha, "cancel_build", {{"build_id", id}});
  EXPECT_FALSE(c.is_error) << c.structured.dump();
  EXPECT_EQ(c.structured.value("status", ""), "cancelled");
  ASSERT_EQ(f.wait_for(seconds(2)), std::future_status::ready) << "cancel took more than 2 s";
  ToolResult r = f.get();
  EXPECT_LT(Clock::now() - t0, seconds(2));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured.value("status", ""), "cancelled") << r.structured.dump(2);

  // The process group is SIGTERMed, then SIGKILLed 500 ms later.
  EXPECT_TRUE(
      WaitFor([&] { return Pgrep(marker).empty() && Pgrep("^sleep 317").empty(); }, seconds(3)))
      << "processes of the cancelled build remain: " << Pgrep(marker).size() << " with the marker, "
      << Pgrep("^sleep 317").size() << " sleeps";
  // The builder removes the working container after the kill.
  std::string left;
  EXPECT_TRUE(
      WaitFor([&] { return (left = WorkingContainers(kAlpha, "slow")).empty(); }, seconds(30)))
      << "working containers left: " << left;
  // The log is closed and says why.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Call(kAlpha, "build_log", {{"build_id", id}}).structured.value("complete", false);
      },
      seconds(5)));
  // The candidate builds again afterwards.
  ToolResult again = Build(kAlpha, "slow", BusyboxSource(marker + "-2", "after cancel"));
  ExpectPushed(again, kAlpha, "slow");
}

// 4. A newer request for the same candidate supersedes the running build.
TEST_F(IntegrationTest, NewerRequestSupersedesRunningBuild) {
  Start(BaseConfig(2));
  std::string marker = "kiln-it-supersede-" + std::to_string(::getpid());
  auto f1 =
      BuildAsync(kAlpha, "sup", BusyboxSource("v1", marker, "sh -c 'sleep 318; true' " + marker));
  ASSERT_TRUE(WaitFor([] { return !Pgrep("^sleep 318").empty(); }, seconds(180)))
      << "the first build's RUN step never started";
  ToolResult r2 = Build(kAlpha, "sup", BusyboxSource("v2", "second version"));
  ASSERT_EQ(f1.wait_for(seconds(5)), std::future_status::ready);
  ToolResult r1 = f1.get();
  EXPECT_TRUE(r1.is_error);
  EXPECT_EQ(r1.structured.value("status", ""), "cancelled") << r1.structured.dump(2);
  EXPECT_TRUE(Contains(r1.structured.value("error", ""), "superseded")) << r1.structured.dump(2);
  ExpectPushed(r2, kAlpha, "sup");
  EXPECT_TRUE(Pgrep(marker).empty());
  EXPECT_TRUE(Pgrep("^sleep 318").empty());
  EXPECT_EQ(WorkingContainers(kAlpha, "sup"), "");
}

// 5a. The registry goes away between builds: the push fails with a clear error, and the same
// tree builds once it is back (failures are not cached).
TEST_F(IntegrationTest, RegistryDownIsAClearError) {
  Start(BaseConfig(2));
  ExpectPushed(Build(kAlpha, "reg", BusyboxSource("warm", "warm up the storage")), kAlpha, "reg");
  std::string src = BusyboxSource("changed", "registry will be down");
  {
    RegistryRestarter restart(&registry());
    ASSERT_TRUE(registry().Stop().ok());
    ToolResult r = Build(kAlpha, "reg", src);
    EXPECT_TRUE(r.is_error);
    EXPECT_EQ(r.structured.value("status", ""), "failed") << r.structured.dump(2);
    std::string err = r.structured.value("error", "");
    EXPECT_TRUE(Contains(err, "unreachable")) << err;
    EXPECT_TRUE(Contains(err, registry().host())) << err;
    EXPECT_TRUE(r.structured["image"].is_null());
  }
  ToolResult ok = Build(kAlpha, "reg", src);
  ExpectPushed(ok, kAlpha, "reg");
  EXPECT_FALSE(ok.structured.value("cache_hit", true));
}

// 5b. A domain whose registry port is closed: base images cannot be pulled; the error names
// the registry.
TEST_F(IntegrationTest, ClosedRegistryPortIsAClearError) {
  auto cfg = BaseConfig(2);
  int port = ClosedPort();
  std::string host = "127.0.0.1:" + std::to_string(port);
  cfg->registries["dead"] =
      RegistryConfig{"dead", "http://" + host, registry().auth_file(), std::nullopt};
  cfg->domains[kBeta].image.registry = "dead";
  Start(cfg);
  ToolResult r = Build(kBeta, "dead", BusyboxSource("dead", "nobody listens"));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured.value("status", ""), "failed") << r.structured.dump(2);
  std::string err = r.structured.value("error", "");
  EXPECT_TRUE(Contains(err, host)) << err;
  EXPECT_TRUE(Contains(err, "unreachable")) << err;
}

// 5c. A wrong registry password: a clear error that never contains the password.
TEST_F(IntegrationTest, WrongCredentialIsAClearErrorWithoutThePassword) {
  const std::string wrong = "wrong-Pa55word-" + std::to_string(::getpid());
  fs::path authfile = env_->dir() / "wrong-auth.json";
  {
    // base64("kiln:" + wrong), written by hand to keep the password out of any argv.
    std::string raw = "kiln:" + wrong, b64;
    static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i = 0;
    for (; i + 2 < raw.size(); i += 3) {
      uint32_t n = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8) | uint8_t(raw[i + 2]);
      for (int k = 18; k >= 0; k -= 6) b64 += tbl[(n >> k) & 63];
    }
    if (i < raw.size()) {
      uint32_t n = uint8_t(raw[i]) << 16;
      if (i + 1 < raw.size()) n |= uint8_t(raw[i + 1]) << 8;
      b64 += tbl[(n >> 18) & 63];
      b64 += tbl[(n >> 12) & 63];
      b64 += i + 1 < raw.size() ? tbl[(n >> 6) & 63] : '=';
      b64 += '=';
    }
    WriteFile(authfile, json{{"auths", {{registry().host(), {{"auth", b64}}}}}}.dump());
  }
  // A candidate whose storage already has the base image (so the push is what fails)...
  {
    Start(BaseConfig(2));
    ExpectPushed(Build(kAlpha, "cred", BusyboxSource("warm", "warm")), kAlpha, "cred");
    rt_->Shutdown(milliseconds(0));
    rt_.reset();
  }
  auto cfg = BaseConfig(2);
  cfg->registries["local"].auth_file = authfile.string();
  Start(cfg);
  std::vector<std::string> secrets = {wrong, registry().password()};
  ASSERT_FALSE(secrets[1].empty());
  auto check = [&](const ToolResult& r, const std::string& cand) {
    EXPECT_TRUE(r.is_error);
    EXPECT_EQ(r.structured.value("status", ""), "failed") << r.structured.dump(2);
    std::string err = r.structured.value("error", "");
    EXPECT_TRUE(Contains(err, "credential")) << err;
    std::string all = r.structured.dump() + FullLog(kAlpha, r.structured.value("build_id", ""));
    for (const auto& s : secrets)
      EXPECT_FALSE(Contains(all, s)) << "a password leaked for " << cand;
  };
  ToolResult pushed = Build(kAlpha, "cred", BusyboxSource("changed", "push with a wrong password"));
  check(pushed, "cred");
  // ...and a fresh candidate, whose base-image pull is refused.
  ToolResult pulled =
      Build(kAlpha, "cred-fresh", BusyboxSource("fresh", "pull with a wrong password"));
  check(pulled, "cred-fresh");
}

// 6. An identical rebuild is answered from the cache without running buildah.
TEST_F(IntegrationTest, IdenticalRebuildIsACacheHit) {
  Start(BaseConfig(2));
  std::string src = EppSource("same", "9601");
  ToolResult first = Build(kAlpha, "c1", src);
  std::string digest = ExpectPushed(first, kAlpha, "c1");
  EXPECT_FALSE(first.structured.value("cache_hit", true));
  EXPECT_GT(first.structured["timings"].value("build_ms", 0), 0);
  ToolResult second = Build(kAlpha, "c1", src);
  EXPECT_EQ(ExpectPushed(second, kAlpha, "c1"), digest);
  EXPECT_TRUE(second.structured.value("cache_hit", false)) << second.structured.dump(2);
  EXPECT_EQ(second.structured["timings"].value("build_ms", -1), 0);
  EXPECT_EQ(second.structured["timings"].value("push_ms", -1), 0);
  EXPECT_NE(second.structured.value("build_id", ""), first.structured.value("build_id", ""));
  // A copy of the same tree elsewhere is the same content: also a hit.
  ToolResult copy = Build(kAlpha, "c1", EppSource("same-copy", "9601"));
  EXPECT_TRUE(copy.structured.value("cache_hit", false)) << copy.structured.dump(2);
}

// 7. With one slot, a domain's single build is not starved by another domain's queue.
TEST_F(IntegrationTest, SingleBuildOfOtherDomainIsNotStarved) {
  Start(BaseConfig(1));
  std::vector<std::future<ToolResult>> a;
  std::vector<Clock::time_point> a_submit;
  for (int i = 1; i <= 4; ++i) {
    std::string c = "fair" + std::to_string(i);
    std::string src = BusyboxSource(c, "fairness " + c, "sleep 2");
    a_submit.push_back(Clock::now());
    a.push_back(BuildAsync(kAlpha, c, src));
  }
  // Wait for a's queue to form: one building, the other three queued behind it.
  ASSERT_TRUE(WaitFor(
      [&] {
        int building = 0, queued = 0;
        for (int i = 1; i <= 4; ++i) {
          std::string s = State(kAlpha, "fair" + std::to_string(i));
          building += s == "building" || s == "pushing";
          queued += s == "queued";
        }
        return building == 1 && queued == 3;
      },
      seconds(120)));
  std::string bsrc = BusyboxSource("solo", "fairness solo", "sleep 2");
  auto b_submit = Clock::now();
  ToolResult rb = Build(kBeta, "solo", bsrc);
  ExpectPushed(rb, kBeta, "solo");
  auto b_start = b_submit + milliseconds(rb.structured["timings"].value("queued_ms", 0));
  std::vector<Clock::time_point> a_start;
  for (int i = 0; i < 4; ++i) {
    ToolResult r = a[i].get();
    ExpectPushed(r, kAlpha, "fair" + std::to_string(i + 1));
    a_start.push_back(a_submit[i] + milliseconds(r.structured["timings"].value("queued_ms", 0)));
  }
  std::sort(a_start.begin(), a_start.end());
  EXPECT_LT(b_start, a_start[2]) << "beta's single build waited behind alpha's queue";
}

// 8. Many concurrent buildah builds (per-candidate storages, one domain's shared compiler cache)
// all succeed: buildah's concurrent-storage races (#5674, #2781, #2521) do not bite.
TEST_F(IntegrationTest, ConcurrentBuildahStress) {
  Start(BaseConfig(3));
  struct Chain {
    std::string domain, cand;
    std::vector<std::string> sources;
  };
  std::vector<Chain> chains = {
      {kAlpha, "c1", {}}, {kAlpha, "c2", {}}, {kAlpha, "c3", {}}, {kBeta, "c1", {}}};
  int variant = 9301;
  for (auto& ch : chains) {
    int rounds = ch.domain == kAlpha ? 2 : 1;
    for (int i = 0; i < rounds; ++i)
      ch.sources.push_back(EppSource(ch.domain + "-" + ch.cand + "-" + std::to_string(i),
                                     std::to_string(variant++)));
  }
  std::vector<std::future<std::vector<ToolResult>>> futures;
  for (const auto& ch : chains)
    futures.push_back(std::async(std::launch::async, [this, ch] {
      std::vector<ToolResult> out;
      for (const auto& s : ch.sources) out.push_back(Build(ch.domain, ch.cand, s));
      return out;
    }));
  std::set<std::string> digests;
  size_t builds = 0;
  for (size_t i = 0; i < chains.size(); ++i) {
    std::vector<ToolResult> rs = futures[i].get();
    for (size_t k = 0; k < rs.size(); ++k) {
      SCOPED_TRACE(chains[i].domain + "/" + chains[i].cand + " round " + std::to_string(k));
      // Only the last build of a chain still owns the candidate's tag.
      digests.insert(ExpectPushed(rs[k], chains[i].domain, chains[i].cand, k + 1 == rs.size()));
      EXPECT_FALSE(rs[k].structured.value("cache_hit", true));
      ++builds;
    }
  }
  EXPECT_EQ(builds, 7u);
  EXPECT_EQ(digests.size(), 7u);
  for (const auto& ch : chains) EXPECT_EQ(WorkingContainers(ch.domain, ch.cand), "") << ch.cand;
}

// 9. Building from the domain's git repository by branch, by ref and by commit; a commit with
// an unchanged tree is a cache hit.
TEST_F(IntegrationTest, BuildFromGitByRefAndCommit) {
  Start(BaseConfig(2), /*open_repositories=*/true);
  fs::path repo = env_->state_dir() / "domains" / kAlpha / "repo.git";
  ASSERT_TRUE(fs::exists(repo / "HEAD")) << repo;
  fs::path work = src_root_ / "clone";
  fs::create_directories(work);
  std::map<std::string, std::string> gitenv = {
      {"GIT_AUTHOR_NAME", "it"},    {"GIT_AUTHOR_EMAIL", "it@example.invalid"},
      {"GIT_COMMITTER_NAME", "it"}, {"GIT_COMMITTER_EMAIL", "it@example.invalid"},
      {"GIT_CONFIG_NOSYSTEM", "1"}, {"HOME", work.string()}};
  auto git = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "git");
    CommandResult r = RunCommand(args, work.string(), seconds(60), gitenv);
    EXPECT_TRUE(r.ok()) << args[1] << ": " << r.output;
    return r.output;
  };
  auto head = [&] {
    std::string s = git({"rev-parse", "HEAD"});
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  };
  git({"init", "-q", "-b", "main"});
  std::string tree = BusyboxSource("gitsrc", "from git");
  for (const auto& e : fs::directory_iterator(tree)) fs::copy(e.path(), work / e.path().filename());
  git({"add", "-A"});
  git({"commit", "-q", "-m", "first"});
  std::string c1 = head();
  git({"push", "-q", repo.string(), "HEAD:refs/heads/g1"});

  // Default ref: the branch named after the candidate.
  ToolResult r1 = Call(kAlpha, "build_candidate", {{"candidate", "g1"}});
  std::string digest = ExpectPushed(r1, kAlpha, "g1");
  EXPECT_EQ(r1.structured.value("commit", ""), c1) << r1.structured.dump(2);
  EXPECT_FALSE(r1.structured.value("cache_hit", true));

  // Same tree, new commit: a cache hit that reports the new commit.
  git({"commit", "-q", "--allow-empty", "-m", "no-op"});
  std::string c2 = head();
  ASSERT_NE(c2, c1);
  git({"push", "-q", repo.string(), "HEAD:refs/heads/g1"});
  ToolResult r2 = Call(kAlpha, "build_candidate", {{"candidate", "g1"}, {"commit", c2}});
  EXPECT_FALSE(r2.is_error) << r2.structured.dump(2);
  EXPECT_EQ(r2.structured.value("status", ""), "succeeded");
  EXPECT_TRUE(r2.structured.value("cache_hit", false)) << r2.structured.dump(2);
  EXPECT_EQ(r2.structured.value("commit", ""), c2);
  EXPECT_EQ(r2.structured["image"].value("digest", ""), digest);
  EXPECT_EQ(r2.structured["timings"].value("build_ms", -1), 0);

  // A real change on another branch, built for g1 by ref.
  WriteFile(work / "note.txt", "changed on a feature branch\n");
  git({"commit", "-q", "-am", "change"});
  std::string c3 = head();
  git({"push", "-q", repo.string(), "HEAD:refs/heads/feature"});
  ToolResult r3 = Call(kAlpha, "build_candidate", {{"candidate", "g1"}, {"ref", "feature"}});
  EXPECT_NE(ExpectPushed(r3, kAlpha, "g1"), digest);
  EXPECT_EQ(r3.structured.value("commit", ""), c3);
  EXPECT_FALSE(r3.structured.value("cache_hit", true));

  // The transport's cancellation (MCP notifications/cancelled) of a waiting build_candidate
  // call cancels the build itself.
  std::string marker = "kiln-it-git-cancel-" + std::to_string(::getpid());
  WriteFile(work / "Containerfile",
            "ARG KILN_REGISTRY\n"
            "FROM ${KILN_REGISTRY}/kiln/busybox:1\n"
            "RUN sh -c 'sleep 319; true' " +
                marker + "\n");
  git({"commit", "-q", "-am", "slow"});
  git({"push", "-q", repo.string(), "HEAD:refs/heads/g2"});
  uint64_t handle = 0;
  auto pending = CallAsync(kAlpha, "build_candidate", {{"candidate", "g2"}}, &handle);
  ASSERT_TRUE(WaitFor([] { return !Pgrep("^sleep 319").empty(); }, seconds(120)));
  rt_->Cancel(handle);
  ASSERT_EQ(pending.wait_for(seconds(2)), std::future_status::ready);
  ToolResult cancelled = pending.get();
  EXPECT_TRUE(cancelled.is_error);
  EXPECT_EQ(cancelled.structured.value("status", ""), "cancelled") << cancelled.structured.dump(2);
  EXPECT_TRUE(
      WaitFor([&] { return Pgrep(marker).empty() && Pgrep("^sleep 319").empty(); }, seconds(3)));

  // An unknown branch is a tool error, not a crash.
  ToolResult missing = Call(kAlpha, "build_candidate", {{"candidate", "nobranch"}});
  EXPECT_TRUE(missing.is_error);
  EXPECT_EQ(missing.structured.value("status", ""), "failed") << missing.structured.dump(2);
}

// Issue 15: domain beta may not build from domain alpha's image (kiln would fetch it with its
// own credential and beta's RUN step could print it): refused before anything is fetched, and
// alpha's content never reaches beta's build log. FROM and COPY --from alike.
TEST_F(IntegrationTest, CrossDomainBaseImageIsRefusedBeforeAnyFetch) {
  Start(BaseConfig(2));
  const std::string secret = "ALPHA-PRIVATE-" + std::to_string(::getpid());
  ExpectPushed(Build(kAlpha, "priv", BusyboxSource("alpha-priv", secret)), kAlpha, "priv");
  const std::string host = registry().host();
  const std::string alpha_image = host + "/it/alpha:priv";
  const std::vector<std::string> containerfiles = {
      "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/it/alpha:priv\nRUN cat /note.txt\n",
      "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\n"
      "COPY --from=${KILN_REGISTRY}/it/alpha:priv /note.txt /stolen.txt\nRUN cat /stolen.txt\n"};
  for (size_t i = 0; i < containerfiles.size(); ++i) {
    const std::string cand = "steal" + std::to_string(i);
    fs::path dst = src_root_ / cand;
    WriteFile(dst / "Containerfile", containerfiles[i]);
    ToolResult r = Build(kBeta, cand, dst.string());
    const json& s = r.structured;
    EXPECT_TRUE(r.is_error) << s.dump(2);
    EXPECT_EQ(s.value("status", ""), "failed") << s.dump(2);
    EXPECT_TRUE(s["image"].is_null());
    std::string err = s.value("error", "");
    EXPECT_TRUE(Contains(err, "base image '" + alpha_image +
                                  "' is not allowed for domain beta: it is domain alpha's image "
                                  "repository"))
        << err;
    std::string log = FullLog(kBeta, LatestBuildId(kBeta, cand));
    EXPECT_FALSE(Contains(log, secret)) << log;
    EXPECT_FALSE(Contains(s.dump(), secret)) << s.dump(2);
    // Nothing was fetched: no skopeo run (it logs "fetching base image"), no layout, no marker.
    EXPECT_FALSE(Contains(log, "fetching base image")) << log;
    fs::path storage = StorageDir(kBeta, cand);
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(storage / "rootless" / "bases", ec) || ec) << storage;
    EXPECT_FALSE(fs::exists(storage / "kiln-bases.json")) << storage;
    EXPECT_FALSE(Contains(ReadFile(env_->state_dir() / "domains" / kBeta / "cache" / "bases" /
                                   ("u" + BuildUid() + ".json")),
                          alpha_image))
        << "alpha's image reached beta's base store";
  }
  // beta's own builds from the shared base images still work.
  ExpectPushed(Build(kBeta, "own", BusyboxSource("beta-own", "beta's note")), kBeta, "own");
}

// Issue 18: one read-only store of base images per domain. A new candidate's first build fetches
// no base image (the domain's store already has it), builds never change the store, and it
// survives a candidate's storage being removed. Results report per-part timings.
TEST_F(IntegrationTest, SharedBaseStoreServesNewCandidatesAndStaysUnchanged) {
  Start(BaseConfig(2));
  struct passwd* pw = ::getpwnam("kiln-build");
  ASSERT_NE(pw, nullptr) << "scripts/setup.sh creates the build user kiln-build";
  const fs::path bases = env_->state_dir() / "domains" / kAlpha / "cache" / "bases";
  const fs::path store = bases / ("u" + std::to_string(pw->pw_uid));
  const std::string busybox = registry().host() + "/kiln/busybox:1";
  const std::string tag = "bs-" + std::to_string(::getpid());

  ToolResult first = Build(kAlpha, tag + "-a", BusyboxSource("bs-a", "a"));
  ExpectPushed(first, kAlpha, tag + "-a");
  const json& parts = first.structured["timings"]["parts"];
  for (const char* p : {"resolve_ms", "base_prep_ms", "build_ms", "read_ms", "push_ms"})
    EXPECT_TRUE(parts.contains(p) && parts[p].is_number_integer())
        << p << " in " << first.structured.dump(2);
  // Issue 18: pushed straight from buildah's store; no `buildah push oci:` fallback ran.
  EXPECT_FALSE(parts.contains("export_ms")) << first.structured.dump(2);
  // The domain's store holds the base, recorded at its registry digest; no candidate store does.
  std::string digest;
  ASSERT_TRUE(registry().ManifestDigest("kiln/busybox:1", &digest).ok());
  json marker =
      json::parse(ReadFile(bases / ("u" + std::to_string(pw->pw_uid) + ".json")), nullptr, false);
  ASSERT_TRUE(marker.is_object()) << bases;
  EXPECT_EQ(marker.value(busybox, ""), digest) << marker.dump();
  EXPECT_TRUE(Contains(ReadFile(store / "overlay-images" / "images.json"), "\"" + busybox + "\""));
  EXPECT_FALSE(Contains(ReadFile(StorageDir(kAlpha, tag + "-a") / "rootless" / "root" /
                                 "overlay-images" / "images.json"),
                        "\"" + busybox + "\""))
      << "the base image was copied into the candidate's own store";

  // Every file of the store (name, size, mtime) before the next builds.
  auto snapshot = [&] {
    std::map<std::string, std::pair<uintmax_t, long long>> files;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(store, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      struct stat st;
      if (::lstat(it->path().c_str(), &st) != 0) continue;
      files[it->path().string()] = {
          static_cast<uintmax_t>(st.st_size),
          static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
    }
    return files;
  };
  const auto before = snapshot();
  ASSERT_FALSE(before.empty());

  // A new candidate's first build: no fetch, and a build that tries to remove the base from
  // inside its RUN step (it cannot even see the store) changes nothing.
  ToolResult second =
      Build(kAlpha, tag + "-b", BusyboxSource("bs-b", "b", "rm -rf /bin/ls; echo done"));
  ExpectPushed(second, kAlpha, tag + "-b");
  std::string log = FullLog(kAlpha, second.structured.value("build_id", ""));
  EXPECT_FALSE(Contains(log, "fetching base image")) << log;

  // The first candidate's storage removed: its next build still finds the base, fetches nothing.
  fs::remove_all(StorageDir(kAlpha, tag + "-a"));
  ToolResult third = Build(kAlpha, tag + "-a", BusyboxSource("bs-a2", "a again"));
  ExpectPushed(third, kAlpha, tag + "-a");
  log = FullLog(kAlpha, third.structured.value("build_id", ""));
  EXPECT_FALSE(Contains(log, "fetching base image")) << log;
  EXPECT_EQ(snapshot(), before) << "a build changed the shared base store";
}

}  // namespace
}  // namespace kiln::integration

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new kiln::integration::IntegrationEnv);
  return RUN_ALL_TESTS();
}
