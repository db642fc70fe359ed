#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

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

TEST(SubprocessTest, FindExecutableSearchesThePathInOrder) {
  EXPECT_EQ(FindExecutable("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(FindExecutable("kiln-no-such-tool", "/bin:/usr/bin"), "");
  EXPECT_EQ(FindExecutable("./relative", "/bin"), "./relative");
}

}  // namespace
}  // namespace kiln
