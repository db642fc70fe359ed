// BuildahBuilder against FakeProcessRunner: what it asks buildah (and unshare, setpriv) to do,
// with which environment and mounts, and how each way a build can end maps to a BuildResult.
// No buildah, no registry: the Containerfiles are `FROM scratch` (nothing to resolve). Runs as
// root (the builder prepares directories owned by the build user, here `nobody`).
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

#include "builder/buildah_builder.h"
#include "builder/fake_build_job.h"
#include "builder/fake_process_runner.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using testing_build::Contains;
using testing_build::FakeBuildJob;
using testing_build::FreshTestRoot;

constexpr char kSecret[] = "s3cr3t-registry-password";
const std::string kImageId(64, 'c');

// The build user's script: `/bin/sh -c <script>` (issue 18: started directly by kiln's child in
// the sandbox's namespaces, no unshare/setpriv chain around it).
std::string Script(const ProcessSpec& s) { return s.argv.empty() ? "" : s.argv.back(); }

// The mount of `target` from `source` with exactly `flags` in the sandbox's confinement.
bool Mounts(const ProcessSpec& s, const std::string& source, const std::string& target,
            unsigned long flags, ChildMount::When when = ChildMount::When::kAlways) {
  if (!s.confine) return false;
  for (const ChildMount& m : s.confine->mounts)
    if (m.source == source && m.target == target && m.flags == flags && m.when == when) return true;
  return false;
}

class BuildahFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u)
        << "BuildahBuilder prepares the build user's directories: run as root";
    root_ = FreshTestRoot("kiln-buildah-fake");
    fs::create_directories(root_ / "home");
    std::ofstream(root_ / "src" / "Containerfile")
        << "FROM scratch\nWORKDIR /src\nCOPY . /src\nRUN go build ./...\n";
    job_ = FakeBuildJob(root_, "http://127.0.0.1:5999", kSecret);
    job_.storage_dir =
        (root_ / "state" / "domains" / "d" / "candidates" / "c1" / "storage").string();
    job_.cache_dir = (root_ / "state" / "domains" / "d" / "cache").string();
    job_.home_dir = (root_ / "home").string();
    job_.build.timeout_s = 77;
    job_.build.max_file_mb = 3;
    job_.key = std::string(64, 'k');
    job_.commit = std::string(40, 'a');
  }
  void TearDown() override { fs::remove_all(root_); }

  // A scripted successful `buildah build`: prints, writes the iid.
  FakeRun Succeeds() {
    FakeRun run;
    run.chunks = {"STEP 1/3: FROM scratch\n"};
    const std::string iid = job_.storage_dir + "/rootless/iid";
    run.effect = [iid](const ProcessSpec&) {
      std::ofstream(iid) << "sha256:" << std::string(64, 'c') << "\n";
    };
    return run;
  }

  BuildResult Build(const CancelToken* cancel = nullptr) {
    BuildahBuilder b(&runner_, "/usr/bin/buildah");
    output_.clear();
    return b.Build(
        job_, [this](std::string_view c) { output_ += std::string(c); }, cancel);
  }

  fs::path root_;
  BuildJob job_;
  FakeProcessRunner runner_;
  std::string output_;
};

TEST_F(BuildahFakeTest, SuccessRunsOneSandboxedBuildAndReadsTheImageId) {
  runner_.Script(Succeeds());
  BuildResult r = Build();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.image_id, kImageId);
  EXPECT_FALSE(r.compile_failed);
  EXPECT_TRUE(r.timings.count("build_ms"));
  EXPECT_FALSE(r.timings.count("export_ms"));  // issue 18: no export after `buildah build`
  EXPECT_TRUE(Contains(output_, "STEP 1/3"));  // streamed through
  ASSERT_EQ(runner_.runs(), 1u);               // FROM scratch: nothing to fetch or load
  const ProcessSpec s = runner_.specs()[0];

  // Kiln's child: own network (loopback only), PID and mount namespaces, a fresh /proc; the
  // build dies with it. No process chain: the build user's shell is what starts.
  ASSERT_GE(s.argv.size(), 3u);
  EXPECT_EQ(s.argv[0], "/bin/sh");
  EXPECT_EQ(s.argv[1], "-c");
  ASSERT_TRUE(s.confine.has_value());
  const ChildConfinement& c = *s.confine;
  EXPECT_TRUE(c.new_pid_namespace);
  EXPECT_TRUE(c.new_mount_namespace);
  EXPECT_TRUE(c.mount_proc);
  EXPECT_TRUE(c.new_net_namespace);
  EXPECT_EQ(s.cwd, "/");
  EXPECT_EQ(s.timeout, std::chrono::seconds(77));
  EXPECT_FALSE(s.stdin_data);
  // Exactly the build user's environment.
  ASSERT_TRUE(s.env);
  EXPECT_EQ(s.env->at("TMPDIR"), "/run/kiln-build/cache");
  EXPECT_EQ(s.env->at("BUILDAH_ISOLATION"), "chroot");
  EXPECT_EQ(s.env->at("HOME"), "/run/kiln-build/c/home");
  EXPECT_EQ(s.env->size(), 8u);
  // Mounts: the candidate's directory, the domain's cache (TMPDIR: RUN --mount=type=cache), the
  // source read-only; kiln's state, HOME and the registry credential hidden.
  using When = ChildMount::When;
  EXPECT_TRUE(Mounts(s, job_.storage_dir + "/rootless", "/run/kiln-build/c", MS_BIND));
  EXPECT_TRUE(Mounts(s, job_.cache_dir + "/rootless", "/run/kiln-build/cache", MS_BIND));
  EXPECT_TRUE(Mounts(s, job_.source_dir, "/run/kiln-build/c/src", MS_BIND));
  EXPECT_TRUE(Mounts(s, "", "/run/kiln-build/c/src", MS_REMOUNT | MS_BIND | MS_RDONLY));
  EXPECT_TRUE(Mounts(s, "", "/run/kiln-build/bases", MS_REMOUNT | MS_BIND | MS_RDONLY));
  EXPECT_TRUE(Mounts(s, "/dev/null", *job_.registry.auth_file, MS_BIND, When::kIfRegularFile));
  EXPECT_TRUE(Mounts(s, "kiln-hidden", (root_ / "state").string(), MS_RDONLY, When::kIfDirectory));
  EXPECT_TRUE(Mounts(s, "kiln-hidden", job_.home_dir, MS_RDONLY, When::kIfDirectory));
  // Unprivileged: the build user, RLIMIT_FSIZE.
  struct passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  ASSERT_TRUE(c.user.has_value());
  EXPECT_EQ(c.user->first, pw->pw_uid);
  EXPECT_EQ(c.user->second, pw->pw_gid);
  EXPECT_EQ(c.rlimits, (std::vector<std::pair<int, uint64_t>>{{RLIMIT_FSIZE, 3145728}}));
  const std::string sh = Script(s);
  // buildah build: chroot isolation, no pull (kiln provides base images), the build key and
  // commit as annotations, the registry as a build arg. Issue 18: the only RUN comes after
  // `COPY . /src`, so no step can be reused by a new commit: no step cache, and the log says so.
  EXPECT_TRUE(
      Contains(sh, "'build' '--isolation' 'chroot' '--layers=false' '--force-rm' '--pull=never'"));
  EXPECT_TRUE(Contains(output_, "kiln: step cache off: ")) << output_;
  EXPECT_TRUE(Contains(sh, "'--annotation' 'io.kiln.build-key=" + job_.key + "'"));
  EXPECT_TRUE(
      Contains(sh, "'--annotation' 'org.opencontainers.image.revision=" + job_.commit + "'"));
  EXPECT_TRUE(Contains(sh, "'--build-arg' 'KILN_REGISTRY=127.0.0.1:5999'"));
  EXPECT_TRUE(Contains(sh, "'-t' '127.0.0.1:5999/d/app:c1'"));
  EXPECT_TRUE(Contains(sh, "'overlay.imagestore=/run/kiln-build/bases'"));
  EXPECT_FALSE(Contains(sh, "'oci:"));  // Push reads the image from the store itself
  EXPECT_FALSE(Contains(sh, "b push"));
}

TEST_F(BuildahFakeTest, NoCredentialReachesAnyProcess) {
  runner_.Script(Succeeds());
  ASSERT_TRUE(Build().status.ok());
  for (const ProcessSpec& s : runner_.specs()) {
    for (const auto& a : s.argv) EXPECT_FALSE(Contains(a, kSecret)) << a;
    if (s.env)
      for (const auto& [k, v] : *s.env) {
        EXPECT_FALSE(Contains(v, kSecret)) << k;
        EXPECT_NE(k, "REGISTRY_AUTH_FILE");
        EXPECT_NE(k, "DOCKER_CONFIG");
      }
    // The auth file is only ever named to be hidden (bind /dev/null over it when it exists).
    const std::string& f = *job_.registry.auth_file;
    EXPECT_FALSE(Contains(Script(s), f));
    ASSERT_TRUE(s.confine.has_value());
    size_t named = 0;
    for (const ChildMount& m : s.confine->mounts) {
      if (m.source == f) ADD_FAILURE() << "the auth file is mounted from";
      if (m.target == f) {
        ++named;
        EXPECT_EQ(m.source, "/dev/null");
        EXPECT_EQ(m.when, ChildMount::When::kIfRegularFile);
      }
    }
    EXPECT_EQ(named, 1u);
  }
}

TEST_F(BuildahFakeTest, HostNetworkSharesTheNetworkNamespace) {
  job_.build.network = "host";
  runner_.Script(Succeeds());
  ASSERT_TRUE(Build().status.ok());
  const ProcessSpec s = runner_.specs()[0];
  ASSERT_TRUE(s.confine.has_value());
  EXPECT_FALSE(s.confine->new_net_namespace);
  EXPECT_TRUE(s.confine->new_pid_namespace);
}

TEST_F(BuildahFakeTest, TargetAndBuildArgsReachBuildah) {
  job_.build.containerfile.target = "final";
  job_.build.containerfile.build_args = {{"GOFLAGS", "-mod=vendor"}};
  runner_.Script(Succeeds());
  ASSERT_TRUE(Build().status.ok());
  const std::string sh = Script(runner_.specs()[0]);
  EXPECT_TRUE(Contains(sh, "'--target' 'final'"));
  EXPECT_TRUE(Contains(sh, "'--build-arg' 'GOFLAGS=-mod=vendor'"));
}

TEST_F(BuildahFakeTest, FailingRunStepIsACompileErrorWithDiagnostics) {
  FakeRun run;
  run.exit_code = 1;
  run.chunks = {"STEP 3/4: RUN go build ./...\n", "/src/main.go:5:2: undefined: fmt.Printn\n",
                "error building at STEP \"RUN go build ./...\": exit status 1\n"};
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(r.compile_failed);
  EXPECT_EQ(r.failure_kind, "");  // a RUN step: the candidate classifies compile vs test
  EXPECT_TRUE(Contains(r.status.message(), "RUN go build ./...")) << r.status.message();
  EXPECT_TRUE(Contains(r.status.message(), "exit code 1")) << r.status.message();
  ASSERT_FALSE(r.diagnostics.empty());
  EXPECT_EQ(r.diagnostics[0].file, "main.go");  // the WORKDIR is stripped
  EXPECT_EQ(r.diagnostics[0].line, 5);
  EXPECT_EQ(r.diagnostics[0].column, 2);
  EXPECT_EQ(r.diagnostics[0].severity, "error");
  EXPECT_TRUE(Contains(r.diagnostics[0].message, "undefined: fmt.Printn"));
}

TEST_F(BuildahFakeTest, TransientRuntimeStartFailureIsRetriedOnce) {
  FakeRun busy;
  busy.exit_code = 1;
  busy.chunks = {"STEP 3/4: RUN go build ./...\n",
                 "Close_Fd sealing memfd copy: Device or resource busy\n",
                 "error building at STEP \"RUN go build ./...\": exit status 1\n"};
  runner_.Script(busy);
  runner_.Script(Succeeds());
  BuildResult r = Build();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.image_id, kImageId);
  EXPECT_EQ(runner_.runs(), 3u);  // build, working containers removed, build again
  EXPECT_TRUE(Contains(output_, "retrying once"));

  // Twice in a row: the second answer stands (one retry, no loop), and it is the host's.
  runner_.Script(busy);
  runner_.Script(busy);
  r = Build();
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(runner_.runs(), 6u);

  // A compile error is never retried.
  FakeRun compile;
  compile.exit_code = 1;
  compile.chunks = {"STEP 3/4: RUN go build ./...\n", "/src/main.go:5:2: undefined: x\n"};
  runner_.Script(compile);
  r = Build();
  EXPECT_TRUE(r.compile_failed);
  EXPECT_EQ(runner_.runs(), 7u);
}

TEST_F(BuildahFakeTest, FailureOutsideARunStepIsTheContainerfiles) {
  FakeRun run;
  run.exit_code = 125;
  run.chunks = {
      "STEP 3/4: COPY missing.txt /x\n",
      "error building at STEP \"COPY missing.txt /x\": checking on sources: no such file\n"};
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(r.compile_failed);
  EXPECT_EQ(r.failure_kind, "containerfile");
}

TEST_F(BuildahFakeTest, BuildContainerTroubleIsInfrastructure) {
  FakeRun run;
  run.exit_code = 125;
  run.chunks = {"Error: error creating build container: writing blob: no space left\n"};
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kUnavailable);
  EXPECT_FALSE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "could not prepare the build"));
}

// Issue 18: a store the reader does not understand (here: no config under the big-data name
// containers/storage uses) is exported by buildah as before; its failure is infrastructure.
TEST_F(BuildahFakeTest, PushFallsBackToTheBuildahExportAndItsFailureIsInfrastructure) {
  const fs::path images = fs::path(job_.storage_dir) / "rootless/root/overlay-images";
  fs::create_directories(images);
  std::ofstream(images / "images.json") << "[{\"id\":\"" << kImageId << "\",\"layer\":\"\"}]";
  FakeRun run;
  run.exit_code = 125;
  run.chunks = {"Error: writing layout: input/output error\n"};
  runner_.Script(run);
  BuildahBuilder b(&runner_, "/usr/bin/buildah");
  BuildResult built;
  built.image_id = kImageId;
  std::string out;
  PushResult r = b.Push(
      job_, built, [&](std::string_view c) { out += std::string(c); }, nullptr);
  EXPECT_EQ(r.status.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(Contains(r.status.message(), "could not export the image")) << r.status.message();
  EXPECT_FALSE(Contains(r.status.message(), "registry"));  // nothing reached the registry
  EXPECT_TRUE(Contains(out, "exporting the image with buildah instead")) << out;
  EXPECT_FALSE(Contains(out, root_.string()));  // no host path in what the agent sees
  EXPECT_TRUE(r.timings.count("export_ms"));
  ASSERT_EQ(runner_.runs(), 1u);
  const std::string sh = Script(runner_.specs()[0]);
  EXPECT_TRUE(Contains(sh, "b push --quiet --compression-level 0 '" + kImageId + "'"));
  EXPECT_TRUE(Contains(sh, "'oci:/run/kiln-build/c/oci:img'"));
  // As the build user, in the sandbox, never with the credential.
  ASSERT_TRUE(runner_.specs()[0].confine.has_value());
  EXPECT_FALSE(Contains(sh, kSecret));
}

TEST_F(BuildahFakeTest, TimeoutRemovesWorkingContainers) {
  FakeRun run;
  run.timed_out = true;
  run.exit_code = 137;
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kDeadlineExceeded);
  EXPECT_TRUE(Contains(r.status.message(), "77 s"));
  EXPECT_FALSE(r.compile_failed);
  ASSERT_EQ(runner_.runs(), 2u);
  const std::string cleanup = Script(runner_.specs()[1]);
  EXPECT_TRUE(Contains(cleanup, "rm --all"));
  ASSERT_TRUE(runner_.specs()[1].confine.has_value());  // as the build user, in the sandbox
  EXPECT_TRUE(runner_.specs()[1].confine->user.has_value());
  EXPECT_TRUE(runner_.specs()[1].confine->new_pid_namespace);
}

TEST_F(BuildahFakeTest, CancelStopsTheBuildAndRemovesWorkingContainers) {
  FakeRun run;
  run.block_until_cancelled = true;
  run.chunks = {"STEP 1/3: FROM scratch\n"};
  runner_.Script(run);
  CancelToken cancel;
  std::thread canceller = runner_.CancelWhenRunning(&cancel);
  BuildResult r = Build(&cancel);
  canceller.join();
  EXPECT_EQ(r.status.code(), Status::Code::kCancelled);
  EXPECT_FALSE(r.compile_failed);
  ASSERT_EQ(runner_.runs(), 2u);
  EXPECT_TRUE(Contains(Script(runner_.specs()[1]), "rm --all"));
}

TEST_F(BuildahFakeTest, UnstartableBuildahIsInfrastructure) {
  FakeRun run;
  run.start_status = Status::NotFound("unshare: not found");
  runner_.Script(run);
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kUnavailable);
  EXPECT_FALSE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "cannot run buildah"));
}

TEST_F(BuildahFakeTest, SuccessWithoutAnImageIdIsInternal) {
  runner_.Script(FakeRun{});  // exit 0, no iid written
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kInternal);
}

TEST_F(BuildahFakeTest, MissingContainerfileRunsNothing) {
  job_.build.containerfile.file = "Dockerfile.missing";
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(r.compile_failed);
  EXPECT_EQ(runner_.runs(), 0u);
}

// Issue 18: a step a new commit can reuse (here `RUN go mod download` before `COPY . .`) keeps
// buildah's step cache; build.containerfile.step_cache "always"/"never" override the choice.
TEST_F(BuildahFakeTest, AReusableStepKeepsTheStepCacheAndTheConfigOverridesIt) {
  std::ofstream(root_ / "src" / "Containerfile")
      << "FROM scratch\nCOPY go.mod /src/\nRUN go mod download\nCOPY . /src\nRUN go build\n";
  for (const char* mode : {"auto", "never", "always"}) {
    job_.build.containerfile.step_cache = mode;
    runner_.Script(Succeeds());
    output_.clear();
    BuildResult r = Build();
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    const std::string sh = Script(runner_.specs().back());
    const bool layers = std::string(mode) != "never";
    EXPECT_EQ(Contains(sh, "'chroot' '--layers' "), layers) << mode;
    EXPECT_EQ(Contains(sh, "'chroot' '--layers=false' "), !layers) << mode;
    EXPECT_TRUE(Contains(output_, layers ? "kiln: step cache on: " : "kiln: step cache off: "))
        << output_;
  }
  EXPECT_TRUE(Contains(output_, "step_cache"));  // the override is named
}

TEST_F(BuildahFakeTest, RootBuildUserIsRefusedBeforeAnythingRuns) {
  job_.build.user = "root";
  BuildResult r = Build();
  EXPECT_EQ(r.status.code(), Status::Code::kUnavailable);
  EXPECT_FALSE(r.compile_failed);
  EXPECT_EQ(runner_.runs(), 0u);
}

TEST_F(BuildahFakeTest, BaseImageOutsideTheRegistryIsTheAgentsFaultAndFetchesNothing) {
  std::ofstream(root_ / "src" / "Containerfile")
      << "FROM docker.io/library/golang:1.22\nRUN true\n";
  BuildResult r = Build();
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(r.compile_failed);
  EXPECT_TRUE(Contains(r.status.message(), "docker.io/library/golang:1.22")) << r.status.message();
  EXPECT_EQ(runner_.runs(), 0u);  // no skopeo, no buildah
}

TEST(BuildahCheck, RunsBuildahVersion) {
  FakeProcessRunner runner;
  FakeRun bad;
  bad.exit_code = 3;
  runner.Script(FakeRun{});
  runner.Script(bad);
  BuildahBuilder b(&runner, "/opt/buildah");
  EXPECT_TRUE(b.Check().ok());
  Status st = b.Check();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  ASSERT_EQ(runner.runs(), 2u);
  EXPECT_EQ(runner.specs()[0].argv, (std::vector<std::string>{"/opt/buildah", "version"}));
  ASSERT_TRUE(runner.specs()[0].env);
  EXPECT_EQ(runner.specs()[0].env->size(), 1u);
}

}  // namespace
}  // namespace kiln
