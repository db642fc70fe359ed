// LayeredBuilder::Build against FakeProcessRunner: the sandbox argv (bubblewrap, no network,
// the workspace and named caches as the only writable mounts, the build user, limits), the
// environment (only what the domain declares, no credential), and how each way the compile
// command can end maps to a BuildResult. No bwrap and no registry: the base image's registry
// is a closed port, so a build that gets past its command ends with the base image's error.
// Runs as root (the sandbox runs as the build user, here `nobody`).
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "builder/fake_build_job.h"
#include "builder/fake_process_runner.h"
#include "builder/layered_builder.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using testing_build::Contains;
using testing_build::FakeBuildJob;
using testing_build::FreshTestRoot;

constexpr char kSecret[] = "s3cr3t-layered-password";

// The index of the first `a` in argv, or -1.
long IndexOf(const std::vector<std::string>& argv, const std::string& a) {
  auto it = std::find(argv.begin(), argv.end(), a);
  return it == argv.end() ? -1 : it - argv.begin();
}

class LayeredFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "the layered sandbox runs as the build user: run as root";
    root_ = FreshTestRoot("kiln-layered-fake");
    std::ofstream(root_ / "src" / "go.mod") << "module example.com/app\n";
    // Nothing listens on port 1: the base image cannot resolve.
    job_ = FakeBuildJob(root_, "http://127.0.0.1:1", kSecret);
    job_.storage_dir = (root_ / "storage").string();
    job_.cache_dir = (root_ / "cache").string();
    job_.build.mode = "layered";
    job_.build.timeout_s = 33;
    job_.build.max_file_mb = 5;
    job_.build.limits.max_processes = 64;
    job_.build.limits.max_memory_mb = 256;
    LayeredBuild lb;
    lb.base_image = "127.0.0.1:1/base/static@sha256:" + std::string(64, 'b');
    lb.command = {"go", "build", "-o", "out/app", "."};
    lb.env = {{"CGO_ENABLED", "0"}};
    lb.caches = {{"GOCACHE", "go-build"}};
    lb.outputs = {{"out/app", "/app"}};
    lb.entrypoint = {"/app"};
    job_.build.layered = lb;
  }
  void TearDown() override { fs::remove_all(root_); }

  BuildResult Build(const CancelToken* cancel = nullptr) {
    LayeredBuilderOptions o;
    o.outputs_cache_bytes = 0;
    o.compress_threads = 1;
    LayeredBuilder b(&runner_, o);
    output_.clear();
    return b.Build(
        job_, [this](std::string_view c) { output_ += std::string(c); }, cancel);
  }

  fs::path root_;
  BuildJob job_;
  FakeProcessRunner runner_;
  std::string output_;
};

TEST_F(LayeredFakeTest, CommandRunsInBubblewrapAsTheBuildUserWithLimitsAndNoNetwork) {
  runner_.Script(FakeRun{});  // exits 0 but writes nothing: output_missing (checked below)
  BuildResult r = Build();
  ASSERT_EQ(runner_.runs(), 1u);
  const ProcessSpec s = runner_.specs()[0];
  EXPECT_EQ(s.timeout, std::chrono::seconds(33));
  ASSERT_TRUE(s.env);
  EXPECT_EQ(*s.env, (std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}}));
  const auto& a = s.argv;
  ASSERT_FALSE(a.empty());
  // As root: kiln's child enters a private mount namespace that stages the binds, sets the
  // limits and becomes the build user, then execs bwrap (issue 18: no process chain before it).
  const long bw = IndexOf(a, "bwrap");
  EXPECT_EQ(bw, 0);
  EXPECT_EQ(IndexOf(a, "unshare"), -1);
  EXPECT_EQ(IndexOf(a, "setpriv"), -1);
  ASSERT_TRUE(s.confine.has_value());
  const ChildConfinement& c = *s.confine;
  EXPECT_TRUE(c.new_mount_namespace);
  auto bound = [&](const std::string& src) {
    for (const auto& m : c.mounts)
      if (m.source == src && m.flags == MS_BIND) return true;
    return false;
  };
  EXPECT_TRUE(bound(job_.source_dir));
  EXPECT_TRUE(bound(job_.cache_dir + "/layered/go-build"));
  struct passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(c.rlimits, (std::vector<std::pair<int, uint64_t>>{{RLIMIT_NPROC, 64},
                                                              {RLIMIT_AS, uint64_t{256} << 20},
                                                              {RLIMIT_FSIZE, uint64_t{5} << 20}}));
  ASSERT_TRUE(c.user.has_value());
  EXPECT_EQ(c.user->first, pw->pw_uid);
  EXPECT_TRUE(c.no_new_privs);
  // bubblewrap: everything unshared, network included; cleared env; no capabilities.
  for (const char* f : {"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                        "--clearenv", "--cap-drop"})
    EXPECT_GT(IndexOf(a, f), bw) << f;
  EXPECT_EQ(IndexOf(a, "--share-net"), -1);
  // The workspace and the named cache are bound (from the stage); the command is last.
  const long ws = IndexOf(a, "/workspace");
  ASSERT_GT(ws, bw);
  EXPECT_EQ(a[ws - 2], "--bind");
  EXPECT_GE(IndexOf(a, "/cache/GOCACHE"), 0);
  const long dash =
      static_cast<long>(a.rend() - std::find(a.rbegin(), a.rend(), std::string("--"))) - 1;
  ASSERT_GT(dash, bw);
  EXPECT_EQ(std::vector<std::string>(a.begin() + dash + 1, a.end()), job_.build.layered->command);
  // The command's environment: the domain's env, the cache variable, kiln's defaults.
  auto setenv_of = [&](const std::string& k) -> std::string {
    for (size_t i = 0; i + 2 < a.size(); ++i)
      if (a[i] == "--setenv" && a[i + 1] == k) return a[i + 2];
    return "<unset>";
  };
  EXPECT_EQ(setenv_of("CGO_ENABLED"), "0");
  EXPECT_EQ(setenv_of("GOCACHE"), "/cache/GOCACHE");
  EXPECT_EQ(setenv_of("HOME"), "/tmp");
  EXPECT_EQ(setenv_of("REGISTRY_AUTH_FILE"), "<unset>");
  for (const auto& x : a) {
    EXPECT_FALSE(Contains(x, kSecret)) << x;
    EXPECT_FALSE(Contains(x, *job_.registry.auth_file)) << x;  // not even the path
  }
  // The domain's caches exist (bound from the host).
  EXPECT_TRUE(fs::is_directory(job_.cache_dir + "/layered/go-build"));
  // An output the command did not write is named.
  EXPECT_EQ(r.failure_kind, "output_missing");
  EXPECT_TRUE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "'out/app'")) << r.status.message();
}

TEST_F(LayeredFakeTest, NetworkOptInSharesTheNetwork) {
  job_.build.containerfile.network = true;
  runner_.Script(FakeRun{});
  Build();
  ASSERT_EQ(runner_.runs(), 1u);
  EXPECT_GE(IndexOf(runner_.specs()[0].argv, "--share-net"), 0);
}

TEST_F(LayeredFakeTest, FailingCommandIsACompileErrorWithRepositoryRelativeDiagnostics) {
  FakeRun run;
  run.exit_code = 1;
  run.chunks = {"# example.com/app\n", "/workspace/main.go:7:3: undefined: Foo\n"};
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "exit 1"));
  EXPECT_TRUE(Contains(output_, "undefined: Foo"));  // streamed through
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].file, "main.go");
  EXPECT_EQ(r.diagnostics[0].line, 7);
  EXPECT_EQ(r.diagnostics[0].column, 3);
}

TEST_F(LayeredFakeTest, TimeoutIsDeadlineExceededNotTheAgentsCode) {
  FakeRun run;
  run.timed_out = true;
  run.exit_code = 143;
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kDeadlineExceeded);
  EXPECT_TRUE(Contains(r.status.message(), "33 s"));
  EXPECT_FALSE(r.compile_failed);
  EXPECT_TRUE(r.diagnostics.empty());
}

TEST_F(LayeredFakeTest, CancelIsCancelled) {
  FakeRun run;
  run.block_until_cancelled = true;
  runner_.Script(run);
  CancelToken cancel;
  std::thread canceller = runner_.CancelWhenRunning(&cancel);
  BuildResult r = Build(&cancel);
  canceller.join();
  EXPECT_EQ(r.status.code(), Status::Code::kCancelled);
  EXPECT_FALSE(r.compile_failed);
}

TEST_F(LayeredFakeTest, UnstartableSandboxIsInfrastructure) {
  FakeRun run;
  run.start_status = Status::NotFound("bwrap: not found");
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kUnavailable);
  EXPECT_FALSE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "cannot run the sandbox"));
}

TEST_F(LayeredFakeTest, PackedOutputsThenAnUnreachableBaseIsNotTheAgentsFault) {
  FakeRun run;
  const std::string out = job_.source_dir + "/out";
  run.effect = [out](const ProcessSpec&) {
    fs::create_directories(out);
    std::ofstream(out + "/app") << "#!/bin/sh\necho hi\n";
  };
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_FALSE(r.status.ok());
  EXPECT_FALSE(r.compile_failed);  // the command and its outputs were fine
  EXPECT_TRUE(r.failure_kind.empty());
  EXPECT_TRUE(r.diagnostics.empty());
}

TEST_F(LayeredFakeTest, UnsafeCommandSpecRunsNothing) {
  job_.build.layered->env = {{"BAD NAME", "x"}};
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(runner_.runs(), 0u);
}

TEST_F(LayeredFakeTest, NoLayeredSectionIsInvalid) {
  job_.build.layered.reset();
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(runner_.runs(), 0u);
}

}  // namespace
}  // namespace kiln
