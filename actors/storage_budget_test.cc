// Issue 19 at the actor level: the storage budget (leases, over-budget refusals) and a stalled
// registry, through the real runtime with a FakeBuilder in place of buildah.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "actors/runtime.h"
#include "builder/fake_builder.h"
#include "registry/registry_client.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Listens on 127.0.0.1, accepts every connection and never answers.
class StalledRegistry {
 public:
  StalledRegistry() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        std::lock_guard<std::mutex> l(mu_);
        held_.push_back(c);
      }
    });
  }
  ~StalledRegistry() {
    stop_ = true;
    int wake = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    ::connect(wake, reinterpret_cast<sockaddr*>(&a), sizeof a);
    thread_.join();
    ::close(wake);
    ::close(fd_);
    for (int c : held_) ::close(c);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> held_;
};

// A FakeBuilder whose push talks to a real registry endpoint (with the default client
// options: 3 attempts of 30 s), as the real builders do; and whose builds write a file into the
// candidate's storage.
class RegistryPushBuilder : public FakeBuilder {
 public:
  std::string registry_url;
  std::atomic<bool> use_registry{false};
  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override {
    fs::create_directories(job.storage_dir);
    std::ofstream(job.storage_dir + "/layer") << std::string(64 << 10, 'x');
    return FakeBuilder::Build(job, out, cancel);
  }
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override {
    if (!use_registry) return FakeBuilder::Push(job, built, out, cancel);
    RegistryClient client({registry_url, std::nullopt, std::nullopt});
    PushResult r;
    Status st = client.PutBlob(job.repository, "sha256:" + Sha256Hex("x"), "x");
    r.status = st.ok() ? Status::Internal("the stalled registry answered")
                       : Status::Unavailable("registry is unreachable: " + st.message());
    return r;
  }
};

class StorageBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-storage-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    builder_ = std::make_shared<RegistryPushBuilder>();
  }
  void TearDown() override {
    if (rt_) rt_->Shutdown(std::chrono::milliseconds(0));
    rt_.reset();
    fs::remove_all(dir_);
  }
  void Start(std::function<void(Config*)> tweak = nullptr) {
    auto cfg = std::make_shared<Config>();
    cfg->server.state_dir = (dir_ / "state").string();
    cfg->scheduler.max_parallel_builds = 2;
    cfg->storage.gc_interval_s = 86400;  // the tests collect with CollectStorageNow
    cfg->registries["local"] = RegistryConfig{"local", "http://127.0.0.1:5000", {}, {}};
    for (const char* d : {"a", "b"}) {
      DomainConfig dc;
      dc.name = d;
      dc.image = {"local", std::string("loop/") + d};
      cfg->domains[d] = dc;
    }
    if (tweak) tweak(cfg.get());
    RuntimeOptions opts;
    opts.builder = builder_;
    opts.open_repositories = false;
    opts.readiness_checks = false;
    ASSERT_TRUE(Runtime::Create(cfg, opts, &rt_).ok());
  }
  std::string Source(const std::string& name, const std::string& content) {
    fs::path p = dir_ / "src" / name;
    fs::create_directories(p);
    std::ofstream(p / "main.go") << content;
    return p.string();
  }
  std::future<ToolResult> BuildAsync(const std::string& domain, const std::string& cand,
                                     const std::string& src) {
    return std::async(std::launch::async, [=] {
      BuildRequest req;
      req.candidate = cand;
      req.source_dir = src;
      return rt_->BuildAndWait(domain, req);
    });
  }
  ToolResult Build(const std::string& domain, const std::string& cand, const std::string& src) {
    return BuildAsync(domain, cand, src).get();
  }
  fs::path Storage(const std::string& d, const std::string& c) {
    return dir_ / "state" / "domains" / d / "candidates" / c / "storage";
  }

  fs::path dir_;
  std::shared_ptr<RegistryPushBuilder> builder_;
  std::unique_ptr<Runtime> rt_;
};

TEST_F(StorageBudgetTest, StalledRegistryFailsTheBuildAsInfrastructureAndKilnKeepsServing) {
  StalledRegistry reg;
  builder_->registry_url = reg.url();
  builder_->use_registry = true;
  Start([](Config* c) { c->domains["a"].build.timeout_s = 2; });
  ToolResult r = Build("a", "c1", Source("x", "x"));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["status"], "failed") << r.structured.dump();
  EXPECT_EQ(r.structured["error_kind"], "infrastructure") << r.structured.dump();
  EXPECT_NE(r.structured["error"].get<std::string>().find("build.timeout_s = 2 s"),
            std::string::npos)
      << r.structured.dump();
  // kiln keeps serving: the registry is back, the next build pushes.
  builder_->use_registry = false;
  ToolResult ok = Build("a", "c1", Source("y", "y"));
  EXPECT_EQ(ok.structured["status"], "succeeded") << ok.structured.dump();
}

TEST_F(StorageBudgetTest, RunningBuildsStorageIsNeverCollectedAndAnIdleOneIsThenRebuilt) {
  // 16 KiB: less than the build's storage (64 KiB), more than its build-key entry (kept).
  Start([](Config* c) { c->domains["a"].storage.max_gb = 16.0 / (1 << 20); });
  builder_->build_delay = std::chrono::milliseconds(2000);
  auto running = BuildAsync("a", "c1", Source("x", "x"));
  // Wait (bounded by the build) until the build wrote into its storage.
  while (!fs::exists(Storage("a", "c1") / "layer") &&
         running.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
  }
  ASSERT_TRUE(fs::exists(Storage("a", "c1") / "layer"));
  rt_->CollectStorageNow();
  EXPECT_TRUE(fs::exists(Storage("a", "c1") / "layer")) << "collected during its build";
  ToolResult r = running.get();
  EXPECT_EQ(r.structured["status"], "succeeded") << r.structured.dump();

  // Idle now: its storage goes (a cache), and the candidate builds again from scratch.
  rt_->CollectStorageNow();
  EXPECT_FALSE(fs::exists(Storage("a", "c1")));
  builder_->build_delay = std::chrono::milliseconds(10);
  ToolResult again = Build("a", "c1", Source("y", "y"));
  EXPECT_EQ(again.structured["status"], "succeeded") << again.structured.dump();
  EXPECT_TRUE(fs::exists(Storage("a", "c1") / "layer"));
}

TEST_F(StorageBudgetTest, DomainOverItsBudgetFailsItsBuildsOnlyAndNamesTheBudget) {
  Start([](Config* c) { c->domains["a"].storage.max_gb = 1.0 / 1024; });  // 1 MiB
  // Something of domain a that is never collected (its repository) is over the budget.
  fs::create_directories(dir_ / "state/domains/a/repo.git");
  std::ofstream(dir_ / "state/domains/a/repo.git/pack") << std::string(2 << 20, 'x');
  rt_->CollectStorageNow();
  ToolResult r = Build("a", "c1", Source("x", "x"));
  EXPECT_EQ(r.structured["status"], "failed") << r.structured.dump();
  EXPECT_EQ(r.structured["error_kind"], "infrastructure") << r.structured.dump();
  std::string why = r.structured["error"].get<std::string>();
  EXPECT_NE(why.find("domains.a.storage.max_gb"), std::string::npos) << why;
  EXPECT_EQ(why.find(dir_.string()), std::string::npos) << "no host path: " << why;
  // The other domain is not affected.
  ToolResult b = Build("b", "c1", Source("x", "x"));
  EXPECT_EQ(b.structured["status"], "succeeded") << b.structured.dump();
  // Under budget again: a builds.
  fs::remove(dir_ / "state/domains/a/repo.git/pack");
  rt_->CollectStorageNow();
  ToolResult ok = Build("a", "c1", Source("y", "y"));
  EXPECT_EQ(ok.structured["status"], "succeeded") << ok.structured.dump();
  // The gauges are on /metrics.
  EXPECT_NE(rt_->MetricsText().find("kiln_storage_bytes{domain=\"a\",kind=\"git_repo\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
