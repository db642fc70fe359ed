#include "common/process_supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

#include "common/process_test_util.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

SupervisedSpec Sh(const std::string& script) {
  SupervisedSpec spec;
  spec.spawn.path = "/bin/sh";
  spec.spawn.argv = {"sh", "-c", script};
  return spec;
}

SupervisedSpec Captured(const std::string& script) {
  SupervisedSpec spec = Sh(script);
  spec.out.capture_bytes = SIZE_MAX;
  spec.err.capture_bytes = SIZE_MAX;
  return spec;
}

ProcessOutcome RunSpec(SupervisedSpec spec) {
  ProcessOutcome o;
  Status s = RunProcess(std::move(spec), &o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return o;
}

std::vector<std::string> OpenFds() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  ::closedir(d);
  return out;  // includes the DIR's own descriptor, in every call alike
}

TEST(ProcessSupervisorTest, SeparateStreamsGoToTheirSinksAndCaptures) {
  SupervisedSpec spec = Captured("echo out1; echo err1 >&2; echo out2; exit 4");
  std::string streamed_out, streamed_err;
  spec.out.sink = [&](std::string_view c) { streamed_out.append(c); };
  spec.err.sink = [&](std::string_view c) { streamed_err.append(c); };
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(o.exit_code, 4);
  EXPECT_EQ(o.out, "out1\nout2\n");
  EXPECT_EQ(o.err, "err1\n");
  EXPECT_EQ(streamed_out, o.out);
  EXPECT_EQ(streamed_err, o.err);
  EXPECT_FALSE(o.timed_out);
  EXPECT_FALSE(o.cancelled);
  EXPECT_FALSE(o.stopped);
}

TEST(ProcessSupervisorTest, MergedStreamsKeepTheWriteOrder) {
  SupervisedSpec spec = Captured("echo a; echo b >&2; echo c; echo d >&2");
  spec.merge_stderr = true;
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(o.out, "a\nb\nc\nd\n");
  EXPECT_EQ(o.err, "");
}

TEST(ProcessSupervisorTest, StreamsWithoutSinkOrCaptureAreDevNull) {
  // stdout is /dev/null: writing succeeds (no EPIPE), and nothing is kept.
  SupervisedSpec spec = Sh("echo gone && test \"$(readlink /proc/$$/fd/1)\" = /dev/null");
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "");
}

TEST(ProcessSupervisorTest, CaptureBoundsCountWhatTheyDrop) {
  SupervisedSpec spec = Sh("head -c 100000 /dev/zero | tr '\\0' 'x'; head -c 5000 /dev/zero >&2");
  spec.out.capture_bytes = 1000;  // head only
  spec.err.capture_bytes = 400;
  spec.err.keep = OutputSpec::Keep::kHeadAndTail;
  size_t streamed = 0;
  spec.out.sink = [&](std::string_view c) { streamed += c.size(); };
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(streamed, 100000u);  // the sink sees everything; only the capture is bounded
  EXPECT_EQ(o.out, std::string(1000, 'x'));
  EXPECT_EQ(o.out_dropped, 99000u);
  EXPECT_EQ(o.err_dropped, 4600u);
  EXPECT_NE(o.err.find("[... 4600 bytes elided ...]"), std::string::npos);
}

TEST(ProcessSupervisorTest, StdinBytesLargerThanAnyBufferAreEchoed) {
  std::string input(3 << 20, 'z');
  input += "end";
  SupervisedSpec spec = Sh("cat");
  spec.stdin_bytes = input;
  spec.out.capture_bytes = SIZE_MAX;
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, input);
}

TEST(ProcessSupervisorTest, EmptyStdinBytesGiveEofAndNoStdinIsDevNull) {
  SupervisedSpec spec = Captured("cat; echo done");
  spec.stdin_bytes = std::string_view();
  EXPECT_EQ(RunSpec(std::move(spec)).out, "done\n");
  EXPECT_EQ(RunSpec(Captured("readlink /proc/self/fd/0")).out, "/dev/null\n");
}

TEST(ProcessSupervisorTest, ChildClosingStdinEarlyDoesNotKillUs) {
  std::string input(8 << 20, 'x');
  SupervisedSpec spec = Captured("exec 0<&-; echo closed");
  spec.stdin_bytes = input;
  ProcessOutcome o = RunSpec(std::move(spec));  // we would die of SIGPIPE if it were not handled
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "closed\n");
}

TEST(ProcessSupervisorTest, StdinFromADescriptor) {
  char path[] = "/tmp/kiln-sup-stdin-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "from-file\n", 10), 10);
  ::lseek(fd, 0, SEEK_SET);
  SupervisedSpec spec = Captured("cat");
  spec.stdin_fd = fd;
  EXPECT_EQ(RunSpec(std::move(spec)).out, "from-file\n");
  ::close(fd);
  ::unlink(path);
}

TEST(ProcessSupervisorTest, DeadlineStopsTheWholeGroupIncludingGrandchildren) {
  // Both pids are printed at once; the deadline leaves ample time for that on a loaded machine.
  SupervisedSpec spec = Captured("sleep 100 & echo $!; sh -c 'sleep 100 & echo $!; wait'");
  spec.deadline = Clock::now() + milliseconds(1500);
  auto t0 = Clock::now();
  ProcessOutcome o = RunSpec(std::move(spec));
  auto took = Clock::now() - t0;
  EXPECT_TRUE(o.timed_out);
  EXPECT_FALSE(o.cancelled);
  EXPECT_EQ(o.exit_code, 128 + SIGTERM);
  EXPECT_GE(took, milliseconds(1450));
  EXPECT_LT(took, milliseconds(3000));
  pid_t bg = 0, grandchild = 0;
  ASSERT_EQ(std::sscanf(o.out.c_str(), "%d\n%d", &bg, &grandchild), 2) << o.out;
  EXPECT_TRUE(GoneWithin(bg, milliseconds(500)));
  EXPECT_TRUE(GoneWithin(grandchild, milliseconds(500)));
}

TEST(ProcessSupervisorTest, TermIsEscalatedToKillAfterTheGrace) {
  SupervisedSpec spec = Sh("trap '' TERM; while :; do sleep 0.05; done");
  spec.deadline = Clock::now() + milliseconds(200);
  spec.kill_grace = milliseconds(400);
  auto t0 = Clock::now();
  ProcessOutcome o = RunSpec(std::move(spec));
  auto took = Clock::now() - t0;
  EXPECT_TRUE(o.timed_out);
  EXPECT_EQ(o.exit_code, 128 + SIGKILL);
  EXPECT_GE(took, milliseconds(550));
  EXPECT_LT(took, milliseconds(1500));
}

TEST(ProcessSupervisorTest, ZeroGraceAndAPastDeadlineKillAtOnce) {
  SupervisedSpec spec = Sh("trap '' TERM; sleep 100");
  spec.deadline = Clock::now() - milliseconds(1);
  spec.kill_grace = milliseconds(0);
  auto t0 = Clock::now();
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_LT(Clock::now() - t0, milliseconds(500));
  EXPECT_TRUE(o.timed_out);
  EXPECT_EQ(o.exit_code, 128 + SIGKILL);
}

TEST(ProcessSupervisorTest, CancelDescriptorStopsTheGroup) {
  int efd = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  SupervisedSpec spec = Captured("sleep 100 & echo $!; sleep 100");
  spec.cancel_fd = efd;
  std::promise<void> printed;
  bool told = false;
  spec.out.sink = [&](std::string_view) {
    if (!told) printed.set_value();
    told = true;
  };
  Clock::time_point cancelled_at;
  std::thread canceller([&] {
    printed.get_future().wait();  // the background job's pid is out
    cancelled_at = Clock::now();
    uint64_t one = 1;
    EXPECT_EQ(::write(efd, &one, sizeof(one)), 8);
  });
  ProcessOutcome o = RunSpec(std::move(spec));
  auto end = Clock::now();
  canceller.join();
  ::close(efd);
  EXPECT_TRUE(o.cancelled);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 128 + SIGTERM);
  EXPECT_LT(end - cancelled_at, milliseconds(1000));
  pid_t bg = std::atoi(o.out.c_str());
  ASSERT_GT(bg, 1);
  EXPECT_TRUE(GoneWithin(bg, milliseconds(500)));
}

TEST(ProcessSupervisorTest, CancelPredicateAloneIsPolled) {
  std::atomic<bool> cancelled{false};
  SupervisedSpec spec = Sh("sleep 100");
  spec.cancel_requested = [&] { return cancelled.load(); };
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(150));
    cancelled = true;
  });
  auto t0 = Clock::now();
  ProcessOutcome o = RunSpec(std::move(spec));
  canceller.join();
  EXPECT_TRUE(o.cancelled);
  EXPECT_LT(Clock::now() - t0, milliseconds(800));
}

TEST(ProcessSupervisorTest, TerminateAndKillFromOtherThreadsAndFromASink) {
  // Terminate from another thread: SIGTERM, and the process ends.
  std::unique_ptr<SupervisedProcess> p;
  ASSERT_TRUE(SupervisedProcess::Start(Sh("sleep 100"), &p).ok());
  EXPECT_FALSE(p->Finished());
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    p->Terminate(milliseconds(5000));
  });
  ProcessOutcome o = p->Wait();
  stopper.join();
  EXPECT_TRUE(o.stopped);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 128 + SIGTERM);
  int code = 0;
  EXPECT_TRUE(p->Finished(&code));
  EXPECT_EQ(code, 128 + SIGTERM);
  p->Kill();  // after the end: a no-op

  // Kill from inside a sink, after the first line: nothing after it arrives.
  SupervisedProcess* raw = nullptr;
  std::string seen;
  SupervisedSpec spec = Sh("trap '' TERM; echo first; sleep 0.3; echo second; sleep 100");
  spec.out.sink = [&](std::string_view c) {
    seen.append(c);
    raw->Kill();
  };
  ASSERT_TRUE(SupervisedProcess::Start(std::move(spec), &p).ok());
  raw = p.get();
  o = p->Wait();
  EXPECT_EQ(seen, "first\n");
  EXPECT_EQ(o.exit_code, 128 + SIGKILL);
}

TEST(ProcessSupervisorTest, WaitFinishedFromAnotherThread) {
  std::unique_ptr<SupervisedProcess> p;
  ASSERT_TRUE(SupervisedProcess::Start(Sh("sleep 0.2; exit 7"), &p).ok());
  std::thread waiter([&] { p->Wait(); });
  EXPECT_FALSE(p->WaitFinished(milliseconds(20)));
  int code = -1;
  EXPECT_TRUE(p->WaitFinished(milliseconds(3000), &code));
  EXPECT_EQ(code, 7);
  waiter.join();
}

TEST(ProcessSupervisorTest, ExtraDescriptorsInAndOut) {
  // A caller's pipe passed through as fd 5, and an extra output read by the supervisor as fd 4.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::string extra;
  SupervisedSpec spec = Captured("echo to-five >&5; echo to-four >&4; ls /proc/$$/fd");
  spec.spawn.fds = {{p[1], 5}};
  spec.extra_outputs = {{4, [&](std::string_view c) { extra.append(c); }}};
  ProcessOutcome o = RunSpec(std::move(spec));
  ::close(p[1]);
  char buf[64] = {};
  ssize_t n = ::read(p[0], buf, sizeof(buf) - 1);
  ::close(p[0]);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "to-five\n");
  EXPECT_EQ(extra, "to-four\n");
  EXPECT_EQ(o.out, "0\n1\n2\n4\n5\n");  // nothing else reaches the child
}

TEST(ProcessSupervisorTest, NoDescriptorLeaksIntoTheChildOrStaysOpenInUs) {
  std::ifstream keep_open("/proc/self/stat");
  size_t before = OpenFds().size();
  std::string input = "in";
  SupervisedSpec spec = Captured("cat >/dev/null; ls /proc/$$/fd");
  spec.stdin_bytes = input;
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(o.out, "0\n1\n2\n");
  EXPECT_EQ(OpenFds().size(), before);
  // Also after a timeout and a failed start.
  SupervisedSpec slow = Sh("sleep 100");
  slow.deadline = Clock::now() + milliseconds(50);
  RunSpec(std::move(slow));
  SupervisedSpec missing;
  missing.spawn.path = "/nonexistent/tool";
  missing.spawn.argv = {"tool"};
  missing.out.capture_bytes = 10;
  ProcessOutcome unused;
  EXPECT_EQ(RunProcess(std::move(missing), &unused).code(), Status::Code::kNotFound);
  EXPECT_EQ(OpenFds().size(), before);
}

TEST(ProcessSupervisorTest, LeftoverBackgroundProcessIsKilledAfterTheChildExits) {
  // The job holds stdout, stderr and an extra output open; Wait must not wait for it.
  SupervisedSpec spec = Captured("sleep 100 & echo $!; exit 5");
  spec.extra_outputs = {{3, nullptr}};
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_LT(o.elapsed, milliseconds(1000));
  EXPECT_EQ(o.exit_code, 5);
  pid_t bg = std::atoi(o.out.c_str());
  ASSERT_GT(bg, 1);
  EXPECT_TRUE(GoneWithin(bg, milliseconds(200)));
}

TEST(ProcessSupervisorTest, AThrowingSinkStopsBeingCalledButTheCaptureGoesOn) {
  SupervisedSpec spec = Captured("echo one; sleep 0.05; echo two");
  int calls = 0;
  spec.out.sink = [&](std::string_view) {
    ++calls;
    throw std::runtime_error("sink broke");
  };
  ProcessOutcome o = RunSpec(std::move(spec));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(o.out, "one\ntwo\n");
  EXPECT_EQ(o.exit_code, 0);
}

TEST(ProcessSupervisorTest, DestroyingWithoutWaitKillsAndReaps) {
  std::unique_ptr<SupervisedProcess> p;
  ASSERT_TRUE(SupervisedProcess::Start(Sh("sleep 100"), &p).ok());
  pid_t pid = p->pid();
  p.reset();
  EXPECT_FALSE(ProcessAlive(pid));  // reaped: not even a zombie is left
}

TEST(ProcessSupervisorTest, BadSpecsAreRefusedBeforeAnythingRuns) {
  SupervisedSpec spec = Sh("true");
  spec.spawn.fds = {{0, 1}};
  std::unique_ptr<SupervisedProcess> p;
  EXPECT_EQ(SupervisedProcess::Start(spec, &p).code(), Status::Code::kInvalidArgument);
  spec = Sh("true");
  spec.stdin_bytes = "x";
  spec.stdin_fd = 0;
  EXPECT_EQ(SupervisedProcess::Start(spec, &p).code(), Status::Code::kInvalidArgument);
  spec = Sh("true");
  spec.extra_outputs = {{2, nullptr}};
  EXPECT_EQ(SupervisedProcess::Start(spec, &p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(p, nullptr);
}

TEST(BoundedOutputTest, SmallAndExactSizes) {
  BoundedOutput b(8);  // head 2, tail 6
  b.Append("abc");
  EXPECT_EQ(b.Take(), "abc");
  BoundedOutput c(8);
  c.Append("12345678");
  EXPECT_EQ(c.Take(), "12345678");
  BoundedOutput d(8);
  for (char ch : std::string("0123456789")) d.Append(std::string(1, ch));
  EXPECT_EQ(d.Take(), "01\n[... 2 bytes elided ...]\n456789");
  EXPECT_EQ(d.elided(), 2u);
  EXPECT_EQ(c.elided(), 0u);
}

}  // namespace
}  // namespace kiln
