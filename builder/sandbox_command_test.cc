#include "builder/sandbox_command.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "builder/process_runner.h"

namespace kiln {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln-sandbox-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

SandboxSpec GoSpec(const std::string& ws, std::vector<std::string> command) {
  SandboxSpec spec;
  spec.workspace = ws;
  spec.command = std::move(command);
  spec.env = {{"HOME", "/tmp"},         {"GOFLAGS", "-buildvcs=false"},
              {"GOTOOLCHAIN", "local"}, {"GOPROXY", "off"},
              {"CGO_ENABLED", "0"},     {"PATH", "/usr/lib/go-1.19/bin:/usr/bin:/bin"}};
  return spec;
}

// The build user (scripts/setup.sh creates it) when the tests run as root, as kiln does.
std::optional<SandboxUser> TestUser() {
  if (::geteuid() != 0) return std::nullopt;
  SandboxUser u;
  Status st = LookupSandboxUser("kiln-build", &u);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return u;
}

void GiveTo(const SandboxUser& u, const std::string& dir) {
  std::system(("chown -R " + std::to_string(u.uid) + ":" + std::to_string(u.gid) + " '" + dir + "'")
                  .c_str());
}

// Runs the sandboxed command through the real ProcessRunner with a clean environment, as the
// build user (owning the workspace and caches, as LayeredBuilder arranges) when root.
ProcessResult RunSandboxed(SandboxSpec spec, bool expect_start = true) {
  if (!spec.user) spec.user = TestUser();
  if (spec.user) {
    ::mkdir(spec.stage_dir.c_str(), 0755);
    GiveTo(*spec.user, spec.workspace);
    for (const auto& [var, dir] : spec.caches) GiveTo(*spec.user, dir);
  }
  EXPECT_TRUE(ValidateSandboxSpec(spec).ok()) << ValidateSandboxSpec(spec).ToString();
  ProcessSpec p;
  SandboxLaunch launch = SandboxLaunchFor(spec);
  p.argv = launch.argv;
  p.confine = launch.confine;
  // bwrap itself gets a marker variable; --clearenv must keep it from the command.
  p.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"},
                                             {"KILN_SANDBOX_TEST_SECRET", "leak"}};
  p.timeout = std::chrono::seconds(120);
  ProcessResult r = MakePosixProcessRunner()->Run(p, nullptr, nullptr);
  if (expect_start) {
    EXPECT_TRUE(r.start_status.ok()) << r.start_status.ToString();
  }
  return r;
}

ProcessResult Sh(const std::string& ws, const std::string& script, bool network = false) {
  SandboxSpec spec = GoSpec(ws, {"sh", "-c", script});
  spec.network = network;
  return RunSandboxed(spec);
}

// ---- pure argv construction ----

size_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

bool HasTriple(const std::vector<std::string>& v, const std::string& a, const std::string& b,
               const std::string& c) {
  for (size_t i = 0; i + 2 < v.size(); ++i) {
    if (v[i] == a && v[i + 1] == b && v[i + 2] == c) return true;
  }
  return false;
}

TEST(SandboxCommandTest, ArgvShape) {
  SandboxSpec spec = GoSpec("/srv/ws", {"go", "build", "./..."});
  spec.caches = {{"GOCACHE", "/var/cache/kiln/go"}};
  spec.env["GOCACHE"] = "/somewhere/else";
  spec.limits = SandboxLimits{0, 0, 0};
  std::vector<std::string> a = BwrapArgv(spec);
  ASSERT_GE(a.size(), 4u);
  EXPECT_EQ(a[0], "bwrap");
  EXPECT_EQ(a[1], "--unshare-all");
  EXPECT_LT(IndexOf(a, "--disable-userns"), IndexOf(a, "--"));
  EXPECT_LT(IndexOf(a, "--unshare-user"), IndexOf(a, "--"));
  EXPECT_EQ(IndexOf(a, "--share-net"), a.size());
  EXPECT_LT(IndexOf(a, "--die-with-parent"), a.size());
  EXPECT_LT(IndexOf(a, "--clearenv"), a.size());
  EXPECT_TRUE(HasTriple(a, "--ro-bind", "/usr", "/usr"));
  EXPECT_TRUE(HasTriple(a, "--symlink", "usr/lib", "/lib"));
  EXPECT_TRUE(HasTriple(a, "--bind", "/srv/ws", "/workspace"));
  EXPECT_TRUE(HasTriple(a, "--bind", "/var/cache/kiln/go", "/cache/GOCACHE"));
  EXPECT_TRUE(HasTriple(a, "--setenv", "GOCACHE", "/cache/GOCACHE"));
  EXPECT_FALSE(HasTriple(a, "--setenv", "GOCACHE", "/somewhere/else"));
  EXPECT_TRUE(HasTriple(a, "--setenv", "CGO_ENABLED", "0"));
  size_t dashdash = IndexOf(a, "--");
  ASSERT_LT(dashdash, a.size());
  EXPECT_EQ(std::vector<std::string>(a.begin() + dashdash + 1, a.end()),
            (std::vector<std::string>{"go", "build", "./..."}));
  // The command's own "--" or options cannot be read as bwrap options: they come after "--".
  EXPECT_EQ(IndexOf(a, "go"), dashdash + 1);

  spec.network = true;
  a = BwrapArgv(spec);
  EXPECT_LT(IndexOf(a, "--share-net"), IndexOf(a, "--"));
}

// Issue 15: the user switch and the limits wrap bwrap; bwrap binds the staged paths.
// Issue 18: they are the child's confinement (system calls before exec), not a process chain.
TEST(SandboxCommandTest, LaunchRunsAsTheBuildUserWithLimits) {
  SandboxSpec spec = GoSpec("/srv/state/ws", {"go", "build", "./..."});
  spec.caches = {{"GOCACHE", "/srv/state/cache/go"}};
  spec.user = SandboxUser{999, 995};
  spec.limits = SandboxLimits{64, int64_t{256} << 20, int64_t{8} << 20};
  SandboxLaunch l = SandboxLaunchFor(spec);
  const std::vector<std::string>& a = l.argv;
  ASSERT_GE(a.size(), 8u);
  EXPECT_EQ(a[0], "bwrap");  // no process starts before bwrap
  EXPECT_EQ(IndexOf(a, "unshare"), a.size());
  EXPECT_EQ(IndexOf(a, "prlimit"), a.size());
  EXPECT_EQ(IndexOf(a, "setpriv"), a.size());
  EXPECT_LT(IndexOf(a, "--unshare-user"), a.size());
  // bwrap (as the user) binds the staged copies, never the host paths below the state dir.
  EXPECT_TRUE(HasTriple(a, "--bind", "/run/kiln-layered/w", "/workspace"));
  EXPECT_TRUE(HasTriple(a, "--bind", "/run/kiln-layered/c-GOCACHE", "/cache/GOCACHE"));
  EXPECT_FALSE(HasTriple(a, "--bind", "/srv/state/ws", "/workspace"));
  EXPECT_EQ(std::vector<std::string>(a.end() - 3, a.end()),
            (std::vector<std::string>{"go", "build", "./..."}));
  // The root part (the child before exec): a private mount namespace stages them.
  const ChildConfinement& c = l.confine;
  EXPECT_TRUE(c.new_mount_namespace);
  ASSERT_EQ(c.mounts.size(), 3u);
  EXPECT_EQ(c.mounts[0].target, "/run/kiln-layered");
  EXPECT_EQ(c.mounts[0].fstype, "tmpfs");
  EXPECT_EQ(c.mounts[0].flags, static_cast<unsigned long>(MS_NOSUID | MS_NODEV));
  EXPECT_EQ(c.mounts[1].source, "/srv/state/ws");
  EXPECT_EQ(c.mounts[1].target, "/run/kiln-layered/w");
  EXPECT_EQ(c.mounts[1].flags, static_cast<unsigned long>(MS_BIND));
  EXPECT_TRUE(c.mounts[1].make_target);
  EXPECT_EQ(c.mounts[2].source, "/srv/state/cache/go");
  EXPECT_EQ(c.mounts[2].target, "/run/kiln-layered/c-GOCACHE");
  EXPECT_EQ(c.rlimits, (std::vector<std::pair<int, uint64_t>>{
                           {RLIMIT_NPROC, 64}, {RLIMIT_AS, 268435456}, {RLIMIT_FSIZE, 8388608}}));
  ASSERT_TRUE(c.user.has_value());
  EXPECT_EQ(c.user->first, 999u);
  EXPECT_EQ(c.user->second, 995u);
  EXPECT_TRUE(c.no_new_privs);

  // No limits set: none in the confinement; the user switch stays.
  spec.limits = SandboxLimits{0, 0, 0};
  l = SandboxLaunchFor(spec);
  EXPECT_TRUE(l.confine.rlimits.empty());
  EXPECT_TRUE(l.confine.user.has_value());
  EXPECT_TRUE(PrlimitArgv(SandboxLimits{0, 0, 0}).empty());

  // Without a user (kiln not root): the host paths, the limits only, no namespace.
  spec.user.reset();
  spec.limits = SandboxLimits{64, 0, 0};
  l = SandboxLaunchFor(spec);
  EXPECT_TRUE(HasTriple(l.argv, "--bind", "/srv/state/ws", "/workspace"));
  EXPECT_FALSE(l.confine.new_mount_namespace);
  EXPECT_TRUE(l.confine.mounts.empty());
  EXPECT_FALSE(l.confine.user.has_value());
  EXPECT_EQ(l.confine.rlimits.size(), 1u);
}

TEST(SandboxCommandTest, ShellQuoting) {
  EXPECT_EQ(ShellQuoteArg("a b"), "'a b'");
  EXPECT_EQ(ShellQuoteArg("it's"), "'it'\\''s'");
}

TEST(SandboxCommandTest, ValidationRefusesUnsafeSpecs) {
  SandboxSpec good = GoSpec("/srv/ws", {"go", "build"});
  EXPECT_TRUE(ValidateSandboxSpec(good).ok());
  auto refused = [&](SandboxSpec s) {
    EXPECT_EQ(ValidateSandboxSpec(s).code(), Status::Code::kInvalidArgument);
  };
  SandboxSpec s = good;
  s.workspace = "relative";
  refused(s);
  s = good;
  s.workspace = "/srv/../etc";
  refused(s);
  s = good;
  s.workspace = "/";
  refused(s);
  s = good;
  s.command.clear();
  refused(s);
  s = good;
  s.user = SandboxUser{0, 995};  // never root
  refused(s);
  s = good;
  s.user = SandboxUser{999, 0};
  refused(s);
  s = good;
  s.user = SandboxUser{999, 995};
  s.stage_dir = "run/x";
  refused(s);
  s = good;
  s.limits.max_processes = -1;
  refused(s);
  s = good;
  s.env["BAD=NAME"] = "x";
  refused(s);
  s = good;
  s.env["1X"] = "x";
  refused(s);
  s = good;
  s.env["X"] = std::string("a\0b", 3);
  refused(s);
  s = good;
  s.caches["GOCACHE"] = "cache";
  refused(s);
  s = good;
  s.caches["GO CACHE"] = "/c";
  refused(s);
  s = good;
  s.ro_binds.push_back("/");
  refused(s);
  s = good;
  s.ro_binds.push_back("/usr/../root");
  refused(s);
}

// ---- real bubblewrap runs ----

TEST(SandboxCommandTest, GoVersionRuns) {
  TempDir ws;
  ProcessResult r = RunSandboxed(GoSpec(ws.path(), {"go", "version"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("go1.19"), std::string::npos) << r.output;
}

TEST(SandboxCommandTest, GoBuildWithCacheWritesIntoWorkspace) {
  TempDir ws, cache;
  WriteFile(ws.path() + "/go.mod", "module example.com/hello\n\ngo 1.19\n");
  WriteFile(ws.path() + "/main.go",
            "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from kiln\") }\n");
  SandboxSpec spec = GoSpec(ws.path(), {"go", "build", "-o", "hello", "."});
  spec.caches = {{"GOCACHE", cache.path()}};
  ProcessResult r = RunSandboxed(spec);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  struct stat st;
  ASSERT_EQ(::stat((ws.path() + "/hello").c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);
  // The binary runs on the host.
  ProcessSpec run;
  run.argv = {ws.path() + "/hello"};
  run.env = std::map<std::string, std::string>{};
  ProcessResult hr = MakePosixProcessRunner()->Run(run, nullptr, nullptr);
  EXPECT_EQ(hr.output, "hello from kiln\n");
  // The cache was used: it now holds go's cache layout.
  EXPECT_EQ(::stat((cache.path() + "/README").c_str(), &st), 0);

  // A compile error is reported in the output with the workspace-relative file name.
  WriteFile(ws.path() + "/main.go", "package main\n\nfunc main() { undefinedThing() }\n");
  r = RunSandboxed(spec);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("undefined: undefinedThing"), std::string::npos) << r.output;
}

TEST(SandboxCommandTest, HostIsInvisible) {
  TempDir ws, state;
  WriteFile(state.path() + "/auth.json", "{\"auths\":{}}");
  ProcessResult r = Sh(ws.path(), "ls /root");
  EXPECT_NE(r.exit_code, 0) << r.output;
  r = Sh(ws.path(), "cat /etc/shadow");
  EXPECT_NE(r.exit_code, 0) << r.output;
  r = Sh(ws.path(), "cat /etc/passwd");
  EXPECT_NE(r.exit_code, 0) << r.output;
  r = Sh(ws.path(), "ls /var/tmp");
  EXPECT_NE(r.exit_code, 0) << r.output;
  r = Sh(ws.path(), "cat '" + state.path() + "/auth.json'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("auths"), std::string::npos);
  // The toolchain is read-only.
  r = Sh(ws.path(), "touch /usr/kiln-sandbox-probe");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(::access("/usr/kiln-sandbox-probe", F_OK), 0);
  // Only the declared environment is visible, and no capabilities.
  r = Sh(ws.path(), "env | sort; grep CapEff /proc/self/status");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("CapEff:\t0000000000000000"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("KILN_SANDBOX_TEST_SECRET"), std::string::npos) << r.output;
  // The workspace is writable and shared with the host.
  r = Sh(ws.path(), "echo written > /workspace/out.txt && pwd");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "/workspace\n");
  EXPECT_EQ(ReadFile(ws.path() + "/out.txt"), "written\n");
}

TEST(SandboxCommandTest, NoNetworkUnlessAsked) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::string port = std::to_string(ntohs(addr.sin_port));
  TempDir ws;
  std::string probe = "exec bash -c 'echo hi > /dev/tcp/127.0.0.1/" + port + "'";
  ProcessResult r = Sh(ws.path(), probe);
  EXPECT_NE(r.exit_code, 0) << r.output;
  // Control: the same probe connects when the network is shared, so the failure above is the
  // sandbox's doing.
  r = Sh(ws.path(), probe, /*network=*/true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ::close(fd);
}

// ---- Issue 15: the limits, for real ----

TEST(SandboxCommandTest, RunsAsTheBuildUserNotRoot) {
  TempDir ws;
  ProcessResult r = Sh(ws.path(), "id -u; id -g; touch /workspace/made");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  if (std::optional<SandboxUser> u = TestUser()) {
    EXPECT_EQ(r.output, std::to_string(u->uid) + "\n" + std::to_string(u->gid) + "\n");
    struct stat st;
    ASSERT_EQ(::stat((ws.path() + "/made").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, u->uid);  // on the host too: not root-owned
  }
  EXPECT_NE(r.output.substr(0, 2), "0\n");
  // Nested user namespaces are refused.
  r = Sh(ws.path(), "unshare -U true");
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(SandboxCommandTest, ForkingPastMaxProcessesFails) {
  TempDir ws;
  SandboxSpec spec = GoSpec(ws.path(), {"sh", "-c",
                                        "i=0; while [ $i -lt 64 ]; do sleep 2 & i=$((i+1)); "
                                        "done; echo all-forked"});
  spec.limits.max_processes = 16;
  ProcessResult r = RunSandboxed(spec, /*expect_start=*/false);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("all-forked"), std::string::npos) << r.output;
  // The shell's fork fails, or (when other processes of the build user already count against
  // the per-user limit, e.g. a concurrent build) bwrap's own clone does, or even the exec of
  // bwrap as that user (a start failure): the limit holds either way.
  EXPECT_TRUE(r.output.find("fork") != std::string::npos ||
              r.output.find("Resource temporarily unavailable") != std::string::npos ||
              r.start_status.message().find("Resource temporarily unavailable") !=
                  std::string::npos)
      << r.output << r.start_status.ToString();
}

TEST(SandboxCommandTest, AllocatingPastMaxMemoryFails) {
  TempDir ws;
  SandboxSpec spec =
      GoSpec(ws.path(), {"perl", "-e", "my $x = 'a' x (160 << 20); print \"allocated\\n\";"});
  spec.limits.max_memory_bytes = int64_t{128} << 20;
  ProcessResult r = RunSandboxed(spec);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("allocated"), std::string::npos) << r.output;
  // Control: the same program runs under a larger bound.
  spec.limits.max_memory_bytes = int64_t{768} << 20;
  r = RunSandboxed(spec);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(SandboxCommandTest, WritingPastMaxFileFails) {
  TempDir ws;
  SandboxSpec spec =
      GoSpec(ws.path(), {"sh", "-c", "head -c 3000000 /dev/zero > /workspace/big && echo wrote"});
  spec.limits.max_file_bytes = int64_t{1} << 20;
  ProcessResult r = RunSandboxed(spec);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  struct stat st;
  ASSERT_EQ(::stat((ws.path() + "/big").c_str(), &st), 0);
  EXPECT_LE(st.st_size, int64_t{1} << 20);
}

bool SleeperAlive(const std::string& marker) {
  DIR* d = ::opendir("/proc");
  if (!d) return false;
  bool found = false;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmdline = ReadFile(std::string("/proc/") + e->d_name + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline == "sleep " + marker + " ") found = true;
  }
  ::closedir(d);
  return found;
}

TEST(SandboxCommandTest, BackgroundProcessesDieWithTheSandbox) {
  TempDir ws;
  const std::string marker = "4242." + std::to_string(::getpid() % 1000);
  ProcessResult r =
      Sh(ws.path(), "setsid sleep " + marker + " </dev/null >/dev/null 2>&1 & echo started");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "started\n");
  bool alive = true;
  for (int i = 0; i < 40 && alive; ++i) {
    alive = SleeperAlive(marker);
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(alive) << "a background process outlived the sandbox";
}

}  // namespace
}  // namespace kiln
