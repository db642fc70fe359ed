#include "builder/process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/process_test_util.h"
#include "core/cancel_token.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ProcessSpec Sh(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"sh", "-c", script};
  return spec;
}

ProcessResult RunSpec(const ProcessSpec& spec, const CancelToken* cancel = nullptr) {
  return MakePosixProcessRunner()->Run(spec, nullptr, cancel);
}

TEST(ProcessRunnerTest, ExitCodes) {
  EXPECT_EQ(RunSpec(Sh("exit 0")).exit_code, 0);
  EXPECT_EQ(RunSpec(Sh("exit 3")).exit_code, 3);
  ProcessResult r = RunSpec(Sh("kill -9 $$"));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(r.start_status.ok());
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.cancelled);
}

TEST(ProcessRunnerTest, OutputMergesStdoutAndStderrInOrder) {
  std::string got;
  ProcessResult r = MakePosixProcessRunner()->Run(
      Sh("echo one; echo two >&2; echo three; echo four >&2"),
      [&](std::string_view chunk) { got.append(chunk); }, nullptr);
  EXPECT_EQ(r.output, "one\ntwo\nthree\nfour\n");
  EXPECT_EQ(got, r.output);  // streamed chunks add up to the same bytes
}

TEST(ProcessRunnerTest, EnvIsExactlyTheGivenOne) {
  ::setenv("KILN_TEST_SECRET", "must-not-leak", 1);
  ProcessSpec spec;
  spec.argv = {"/usr/bin/env"};
  spec.env = std::map<std::string, std::string>{{"A", "1"}, {"B", "two words"}};
  ProcessResult r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "A=1\nB=two words\n");

  // An empty env is really empty; nullopt inherits kiln's.
  spec.env = std::map<std::string, std::string>{};
  EXPECT_EQ(RunSpec(spec).output, "");
  spec.env.reset();
  EXPECT_NE(RunSpec(spec).output.find("KILN_TEST_SECRET=must-not-leak"), std::string::npos);
  ::unsetenv("KILN_TEST_SECRET");
}

TEST(ProcessRunnerTest, PathLookupUsesTheGivenEnv) {
  ProcessSpec spec;
  spec.argv = {"env"};
  spec.env = std::map<std::string, std::string>{{"PATH", "/nonexistent"}};
  ProcessResult r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.start_status.code(), Status::Code::kNotFound);
  spec.env = std::map<std::string, std::string>{{"PATH", "/nonexistent:/usr/bin:/bin"}};
  r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "PATH=/nonexistent:/usr/bin:/bin\n");
}

TEST(ProcessRunnerTest, Cwd) {
  ProcessSpec spec = Sh("pwd");
  spec.cwd = "/usr/share";
  EXPECT_EQ(RunSpec(spec).output, "/usr/share\n");
  spec.cwd = "/no/such/dir";
  ProcessResult r = RunSpec(spec);
  EXPECT_FALSE(r.start_status.ok());
  EXPECT_EQ(r.start_status.code(), Status::Code::kNotFound);
  EXPECT_EQ(r.exit_code, 127);
}

TEST(ProcessRunnerTest, StdinDataAndDevNull) {
  ProcessSpec spec;
  spec.argv = {"cat"};
  spec.stdin_data = "hello\nworld";
  EXPECT_EQ(RunSpec(spec).output, "hello\nworld");
  // Large input through a pipe (bigger than the pipe buffer), echoed back.
  spec.stdin_data = std::string(3 << 20, 'z');
  ProcessResult r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, *spec.stdin_data);
  // Without stdin_data stdin is /dev/null: cat ends at once.
  spec.stdin_data.reset();
  r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "");
}

TEST(ProcessRunnerTest, ChildClosingStdinEarlyDoesNotKillUs) {
  ProcessSpec spec = Sh("exec 0<&-; echo closed");
  spec.stdin_data = std::string(8 << 20, 'x');
  ProcessResult r = RunSpec(spec);  // we would die of SIGPIPE here if it were not handled
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "closed\n");
}

TEST(ProcessRunnerTest, BoundedOutputKeepsHeadAndTail) {
  // 10 MB: a head line, filler, a tail line.
  ProcessSpec spec =
      Sh("echo HEAD-MARK; head -c 10000000 /dev/zero | tr '\\0' 'x'; echo; echo TAIL-MARK");
  spec.max_output_bytes = 1 << 20;
  size_t streamed = 0;
  ProcessResult r = MakePosixProcessRunner()->Run(
      spec, [&](std::string_view c) { streamed += c.size(); }, nullptr);
  EXPECT_EQ(r.exit_code, 0);
  const size_t total = 10 + 10000000 + 1 + 10;
  EXPECT_EQ(streamed, total);
  EXPECT_EQ(r.output.rfind("HEAD-MARK\n", 0), 0u);
  EXPECT_EQ(r.output.substr(r.output.size() - 11), "\nTAIL-MARK\n");
  std::string marker = "[... " + std::to_string(total - (1 << 20)) + " bytes elided ...]";
  size_t at = r.output.find(marker);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(at, (1u << 20) / 4 + 1);  // head of exactly 25%, then a newline, then the marker
  EXPECT_LE(r.output.size(), (1u << 20) + 64);
}

TEST(ProcessRunnerTest, TimeoutKillsTheWholeTree) {
  ProcessSpec spec = Sh("sleep 100 & echo $!; sleep 100");
  spec.timeout = milliseconds(300);
  auto t0 = Clock::now();
  ProcessResult r = RunSpec(spec);
  auto took = Clock::now() - t0;
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_LT(took, milliseconds(1500));
  pid_t grandchild = std::atoi(r.output.c_str());
  ASSERT_GT(grandchild, 1) << r.output;
  EXPECT_TRUE(GoneWithin(grandchild, milliseconds(200)));
}

TEST(ProcessRunnerTest, TimeoutEscalatesToSigkill) {
  ProcessSpec spec = Sh("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  spec.timeout = milliseconds(200);
  auto t0 = Clock::now();
  ProcessResult r = RunSpec(spec);
  auto took = Clock::now() - t0;
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_GE(took, milliseconds(650));  // 200 ms + 500 ms grace (minus scheduling slop)
  EXPECT_LT(took, milliseconds(1500));
}

TEST(ProcessRunnerTest, LeftoverBackgroundProcessIsKilledAfterNormalExit) {
  // The background job keeps the output pipe open; Run must not wait for it.
  auto t0 = Clock::now();
  ProcessResult r = RunSpec(Sh("sleep 100 & echo $!"));
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));
  EXPECT_EQ(r.exit_code, 0);
  pid_t grandchild = std::atoi(r.output.c_str());
  ASSERT_GT(grandchild, 1);
  EXPECT_TRUE(GoneWithin(grandchild, milliseconds(200)));
}

TEST(ProcessRunnerTest, CancelFromAnotherThread) {
  CancelToken token;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    token.Cancel();
  });
  auto t0 = Clock::now();
  ProcessResult r = RunSpec(Sh("sleep 100 & echo $!; sleep 100"), &token);
  auto took = Clock::now() - t0;
  canceller.join();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.timed_out);
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(1200));  // cancel at 200 ms + at most ~1 s
  pid_t grandchild = std::atoi(r.output.c_str());
  ASSERT_GT(grandchild, 1);
  EXPECT_TRUE(GoneWithin(grandchild, milliseconds(200)));
}

TEST(ProcessRunnerTest, AlreadyCancelledTokenStartsNothing) {
  CancelToken token;
  token.Cancel();
  token.Cancel();  // idempotent
  ProcessResult r = RunSpec(Sh("echo ran"), &token);
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.start_status.code(), Status::Code::kCancelled);
  EXPECT_EQ(r.output, "");
}

TEST(ProcessRunnerTest, MissingBinary) {
  ProcessSpec spec;
  spec.argv = {"kiln-no-such-binary-xyz", "arg"};
  ProcessResult r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.start_status.code(), Status::Code::kNotFound);
  EXPECT_EQ(r.start_status.message(), "kiln-no-such-binary-xyz: command not found");
  spec.argv = {"/nonexistent/bin/tool"};
  r = RunSpec(spec);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.start_status.code(), Status::Code::kNotFound);
  spec.argv = {};
  EXPECT_EQ(RunSpec(spec).start_status.code(), Status::Code::kInvalidArgument);
}

TEST(ProcessRunnerTest, NoFileDescriptorsLeakIntoTheChild) {
  // Our own test process has extra fds open (e.g. this ifstream); the child sees only 0,1,2
  // (plus the one ls opens to read the directory).
  std::ifstream keep_open("/proc/self/stat");
  ProcessResult r = RunSpec(Sh("ls /proc/$$/fd"));
  EXPECT_EQ(r.output, "0\n1\n2\n");
}

TEST(ProcessRunnerTest, ChildGetsDefaultSignalsAndEmptyMask) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  struct sigaction ign = {}, old_int = {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);
  ProcessSpec spec;  // grep directly: a shell might reset the mask itself
  spec.argv = {"grep", "-E", "^(SigBlk|SigIgn)", "/proc/self/status"};
  ProcessResult r = RunSpec(spec);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(r.output, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST(ProcessRunnerTest, ConcurrentRunsKeepTheirOwnOutput) {
  constexpr int kThreads = 32;
  std::vector<ProcessResult> results(kThreads);
  std::vector<std::string> streamed(kThreads);
  auto runner = MakePosixProcessRunner();
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ProcessSpec spec = Sh("for k in 1 2 3; do echo run-$ID-$k; sleep 0.01; done; exit $ID");
      spec.env =
          std::map<std::string, std::string>{{"ID", std::to_string(i)}, {"PATH", "/usr/bin:/bin"}};
      results[i] = runner->Run(
          spec, [&, i](std::string_view c) { streamed[i].append(c); }, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    std::string id = std::to_string(i);
    EXPECT_TRUE(results[i].start_status.ok()) << results[i].start_status.ToString();
    EXPECT_EQ(results[i].exit_code, i);
    EXPECT_EQ(results[i].output, "run-" + id + "-1\nrun-" + id + "-2\nrun-" + id + "-3\n");
    EXPECT_EQ(streamed[i], results[i].output);
  }
}

TEST(ProcessRunnerTest, ElapsedIsMeasured) {
  ProcessResult r = RunSpec(Sh("sleep 0.2"));
  EXPECT_GE(r.elapsed, milliseconds(190));
  EXPECT_LT(r.elapsed, milliseconds(2000));
}

// kiln killed by SIGKILL (no destructor, no supervisor) must not leave its build running: the
// child gets SIGKILL as its parent-death signal.
TEST(ProcessRunnerTest, ChildDiesWhenKilnIsKilled) {
  char dir[] = "/tmp/kiln-pdeath-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pid_file = std::string(dir) + "/pid";
  pid_t kiln = ::fork();
  ASSERT_GE(kiln, 0);
  if (kiln == 0) {  // plays kiln: a runner blocked in Run()
    RunSpec(Sh("echo $$ > " + pid_file + ".tmp && mv " + pid_file + ".tmp " + pid_file +
               " && exec sleep 60"));
    ::_exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 500 && child == 0; ++i) {
    std::ifstream in(pid_file);
    if (!(in >> child)) child = 0;
    if (child == 0) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_GT(child, 0) << "the runner's child never started";
  ASSERT_TRUE(ProcessAlive(child));
  ::kill(kiln, SIGKILL);
  int status = 0;
  ::waitpid(kiln, &status, 0);
  EXPECT_TRUE(GoneWithin(child, milliseconds(5000))) << "child " << child << " outlived kiln";
  ::kill(child, SIGKILL);  // in case it did not
  std::string cleanup = std::string("rm -rf ") + dir;
  EXPECT_EQ(std::system(cleanup.c_str()), 0);
}

}  // namespace
}  // namespace kiln
