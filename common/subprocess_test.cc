#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

namespace kiln {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Runs /bin/sh -c `script` with stdout on a pipe; returns what it printed and its exit code.
std::string RunShell(const std::string& script, SpawnSpec spec = {}, int* exit_code = nullptr) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.fds.push_back({p[1], 1});
  pid_t pid = -1;
  Status s = Spawn(spec, &pid);
  ::close(p[1]);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::string out = ReadAll(p[0]);
  ::close(p[0]);
  int code = pid > 0 ? WaitForExit(pid) : -1;
  if (exit_code) *exit_code = code;
  return out;
}

TEST(SubprocessTest, ChildGetsOnlyTheMappedDescriptors) {
  int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: posix_spawn would pass it on
  ASSERT_GE(leaked, 3);
  std::string out =
      RunShell("test -e /proc/self/fd/" + std::to_string(leaked) + " && echo leaked || echo clean");
  ::close(leaked);
  EXPECT_EQ(out, "clean\n");
}

// Issue 18: the child shares kiln's memory until it execs (CLONE_VM | CLONE_VFORK) instead of
// getting a copy of it (fork). kiln's pages stay writable, so writing them again after a spawn
// takes no page faults; after a fork every private page is write-protected for copy-on-write
// and the first write to each faults (the cost, besides copying the page tables, that 8
// concurrent iterations paid for ~25 git/bwrap starts each).
TEST(SubprocessTest, SpawningLeavesThePagesOfTheParentWritable) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = 8192;
  void* m =
      ::mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::madvise(m, pages * page, MADV_NOHUGEPAGE);  // one fault per page, not per huge page
  char* b = static_cast<char*>(m);
  for (size_t i = 0; i < pages; ++i) b[i * page] = 1;  // every page present and writable
  int code = -1;
  EXPECT_EQ(RunShell("echo ran", {}, &code), "ran\n");
  EXPECT_EQ(code, 0);
  struct rusage before, after;
  ::getrusage(RUSAGE_THREAD, &before);
  for (size_t i = 0; i < pages; ++i) b[i * page] = 2;
  ::getrusage(RUSAGE_THREAD, &after);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, static_cast<long>(pages / 10))
      << "the spawn write-protected the parent's memory (a fork's copy-on-write)";
  ::munmap(m, pages * page);
}

TEST(SubprocessTest, ExtraDescriptorIsMappedToTheRequestedNumber) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  SpawnSpec spec;
  spec.fds.push_back({p[1], 7});
  std::string out = RunShell("echo via-seven >&7; echo done", spec);
  ::close(p[1]);
  EXPECT_EQ(out, "done\n");
  EXPECT_EQ(ReadAll(p[0]), "via-seven\n");
  ::close(p[0]);
}

TEST(SubprocessTest, UnmappedStdinIsDevNull) { EXPECT_EQ(RunShell("cat; echo end"), "end\n"); }

TEST(SubprocessTest, EnvironmentIsExactlyTheGivenOne) {
  SpawnSpec spec;
  spec.env = std::vector<std::string>{"ONLY=this"};
  ::setenv("KILN_SECRET_FOR_TEST", "must-not-leak", 1);
  std::string out = RunShell("echo \"$ONLY:${KILN_SECRET_FOR_TEST:-unset}\"", spec);
  ::unsetenv("KILN_SECRET_FOR_TEST");
  EXPECT_EQ(out, "this:unset\n");
}

TEST(SubprocessTest, BadEnvironmentEntryIsRefusedBeforeForking) {
  SpawnSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.env = std::vector<std::string>{"NOEQUALS"};
  pid_t pid = 123;
  Status s = Spawn(spec, &pid);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(pid, -1);
}

TEST(SubprocessTest, MissingExecutableIsNotFoundAndLeavesNoChild) {
  SpawnSpec spec;
  spec.path = "/nonexistent/kiln-no-such-tool";
  spec.argv = {"kiln-no-such-tool"};
  pid_t pid = 123;
  Status s = Spawn(spec, &pid);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("kiln-no-such-tool: command not found"), std::string::npos);
  EXPECT_EQ(pid, -1);
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);  // reaped: no zombie of ours
  EXPECT_EQ(errno, ECHILD);
}

TEST(SubprocessTest, MissingWorkingDirectoryIsNotFound) {
  SpawnSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.cwd = "/nonexistent-kiln-dir";
  pid_t pid = -1;
  Status s = Spawn(spec, &pid);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("working directory"), std::string::npos);
}

TEST(SubprocessTest, ChildLeadsItsOwnProcessGroupWithDefaultSignals) {
  // A blocked SIGTERM in the spawning thread must not be inherited.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  SpawnSpec spec;
  spec.path = "/bin/sleep";
  spec.argv = {"sleep", "30"};
  pid_t pid = -1;
  Status s = Spawn(spec, &pid);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(::getpgid(pid), pid);
  ::kill(-pid, SIGTERM);
  EXPECT_EQ(WaitForExit(pid), 128 + SIGTERM);
}

TEST(SubprocessTest, ChildDiesWithTheSpawningThread) {
  pid_t pid = -1;
  std::thread t([&] {
    SpawnSpec spec;
    spec.path = "/bin/sleep";
    spec.argv = {"sleep", "30"};
    ASSERT_TRUE(Spawn(spec, &pid).ok());
  });
  t.join();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitForExit(pid), 128 + SIGKILL);
}

// ---- Issue 18: ChildConfinement (the sandbox's preamble without process starts) ----

TEST(SubprocessTest, ConfinedChildGetsItsLimits) {
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->rlimits = {{RLIMIT_FSIZE, uint64_t{4096} << 10}, {RLIMIT_NOFILE, 77}};
  // dash's ulimit -f counts 512-byte blocks; soft and hard are both set.
  EXPECT_EQ(RunShell("ulimit -f; ulimit -H -f; ulimit -n", spec), "8192\n8192\n77\n");
}

TEST(SubprocessTest, ConfinedChildRunsAsTheGivenUserWithNoGroupsAndNoNewPrivs) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (the user switch)";
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->user = std::make_pair(uid_t{65534}, gid_t{65534});
  spec.confine->no_new_privs = true;
  std::string out = RunShell(
      "id -u; id -g; id -G; grep -E '^(Uid|Gid|NoNewPrivs|PDeathSig):' /proc/self/status "
      "| tr -s '\t' ' '",
      spec);
  EXPECT_EQ(out,
            "65534\n65534\n65534\nUid: 65534 65534 65534 65534\nGid: 65534 65534 65534 "
            "65534\nNoNewPrivs: 1\n")
      << out;
}

TEST(SubprocessTest, ConfinedChildDiesWithTheSpawningThreadAfterTheUserSwitch) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (the user switch)";
  pid_t pid = -1;
  std::thread t([&] {
    SpawnSpec spec;
    spec.path = "/bin/sleep";
    spec.argv = {"sleep", "30"};
    spec.confine.emplace();
    spec.confine->user = std::make_pair(uid_t{65534}, gid_t{65534});
    ASSERT_TRUE(Spawn(spec, &pid).ok());
  });
  t.join();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitForExit(pid), 128 + SIGKILL);  // a uid change clears PDEATHSIG: set again
}

TEST(SubprocessTest, ConfinedChildMountsInItsOwnNamespaceOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount namespace)";
  char tmpl[] = "/tmp/kiln-confine-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::mkdir((dir + "/src").c_str(), 0755), 0);
  ASSERT_EQ(::close(::open((dir + "/src/marker").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(::mkdir((dir + "/stage").c_str(), 0755), 0);
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->new_mount_namespace = true;
  spec.confine->mounts = {
      {"kiln-test", dir + "/stage", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k", false},
      {dir + "/src", dir + "/stage/w", "", MS_BIND, "", true}};
  std::string out = RunShell("ls " + dir + "/stage/w; stat -f -c %T " + dir + "/stage", spec);
  EXPECT_EQ(out, "marker\ntmpfs\n");
  // Nothing reached the host's namespace.
  struct stat st;
  EXPECT_NE(::stat((dir + "/stage/w").c_str(), &st), 0);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(SubprocessTest, FailedConfinementIsReportedAndLeavesNoChild) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount namespace)";
  SpawnSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.confine.emplace();
  spec.confine->new_mount_namespace = true;
  spec.confine->mounts = {
      {"/nonexistent-kiln-src", "/nonexistent-kiln-target", "", MS_BIND, "", false}};
  pid_t pid = 123;
  Status s = Spawn(spec, &pid);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("cannot confine the child (mount)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(pid, -1);
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);  // reaped
}

TEST(SubprocessTest, ConfinedChildIsPidOneOfItsOwnNamespacesWithOnlyLoopback) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (namespaces)";
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->new_pid_namespace = true;
  spec.confine->new_mount_namespace = true;
  spec.confine->mount_proc = true;
  spec.confine->new_net_namespace = true;
  // $$ is 1; /proc shows this namespace only: the shell's own glob (no child running) sees
  // PID 1 alone; lo is the only interface, up.
  std::string out = RunShell(
      "echo $$; set -- /proc/[0-9]*; echo \"$# $1\"; ip -o link | wc -l; "
      "ip -o link show lo | grep -c '[<,]UP[,>]'",
      spec);
  EXPECT_EQ(out, "1\n1 /proc/1\n1\n1\n");
}

TEST(SubprocessTest, ConfinedChildInANewPidNamespaceDiesWithTheSpawningThread) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (namespaces)";
  pid_t pid = -1;
  std::thread t([&] {
    SpawnSpec spec;
    spec.path = "/bin/sleep";
    spec.argv = {"sleep", "30"};
    spec.confine.emplace();
    spec.confine->new_pid_namespace = true;
    ASSERT_TRUE(Spawn(spec, &pid).ok());
  });
  t.join();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitForExit(pid), 128 + SIGKILL);
}

TEST(SubprocessTest, ConditionalMountsAreSkippedWhenTheTargetIsMissingOrOfAnotherType) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount namespace)";
  char tmpl[] = "/tmp/kiln-confine-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::mkdir((dir + "/d").c_str(), 0755), 0);
  ASSERT_EQ(::close(::open((dir + "/d/secret").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  std::system(("echo hush > '" + dir + "/f'").c_str());
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->new_mount_namespace = true;
  using W = ChildMount::When;
  spec.confine->mounts = {
      {"kiln-hidden", dir + "/d", "tmpfs", MS_RDONLY, "size=4k,mode=0700", false, W::kIfDirectory},
      {"/dev/null", dir + "/f", "", MS_BIND, "", false, W::kIfRegularFile},
      {"kiln-hidden", dir + "/f", "tmpfs", MS_RDONLY, "", false, W::kIfDirectory},  // a file
      {"kiln-hidden", dir + "/none", "tmpfs", MS_RDONLY, "", false, W::kIfDirectory}};
  std::string out = RunShell("ls -A " + dir + "/d | wc -l; cat " + dir + "/f | wc -c", spec);
  EXPECT_EQ(out, "0\n0\n");
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(SubprocessTest, ConfinedChildGetsTheGivenSupplementaryGroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (the user switch)";
  SpawnSpec spec;
  spec.confine.emplace();
  spec.confine->user = std::make_pair(uid_t{65534}, gid_t{65534});
  spec.confine->groups = {65534, 4242};
  EXPECT_EQ(RunShell("id -G", spec), "65534 4242\n");
}

TEST(SubprocessTest, TooManyMountsAreRefusedBeforeForking) {
  SpawnSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.confine.emplace();
  spec.confine->mounts.resize(65);
  pid_t pid = 123;
  EXPECT_EQ(Spawn(spec, &pid).code(), Status::Code::kInvalidArgument);
}

TEST(SubprocessTest, FindExecutableSearchesThePathInOrder) {
  EXPECT_EQ(FindExecutable("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(FindExecutable("kiln-no-such-tool", "/bin:/usr/bin"), "");
  EXPECT_EQ(FindExecutable("./relative", "/bin"), "./relative");
}

}  // namespace
}  // namespace kiln
