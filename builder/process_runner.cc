#include "builder/process_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/subprocess.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTermGrace{500};      // SIGTERM -> SIGKILL
constexpr milliseconds kDrainCap{250};       // after the group is gone, wait this long for EOF
constexpr milliseconds kExitPollPeriod{20};  // only without pidfd
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxReadsPerWakeup = 16;

std::string SearchPath(const ProcessSpec& spec) {
  std::string path_var;
  bool have_path = false;
  if (spec.env) {
    auto it = spec.env->find("PATH");
    if (it != spec.env->end()) path_var = it->second, have_path = true;
  }
  if (!have_path) {
    const char* p = ::getenv("PATH");
    path_var = p ? p : "/usr/local/bin:/usr/bin:/bin";
  }
  return FindExecutable(spec.argv[0], path_var);
}

bool SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Blocks SIGPIPE in the calling thread while alive, so writing to a closed stdin pipe returns
// EPIPE instead of killing kiln; any SIGPIPE this raised is consumed before unblocking.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (!was_pending_) {
      struct timespec zero = {0, 0};
      while (::sigtimedwait(&set_, nullptr, &zero) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_;
  sigset_t old_;
  bool was_pending_ = false;
};

// The parent's side of one running child: pumps output and stdin, enforces timeout and cancel,
// kills the group, reaps the leader.
class ChildSupervisor {
 public:
  ChildSupervisor(pid_t pid, const ProcessSpec& spec,
                  const std::function<void(std::string_view)>& on_output, const CancelToken* cancel,
                  int out_fd, int stdin_fd, Clock::time_point start)
      : pid_(pid),
        spec_(spec),
        on_output_(on_output),
        cancel_(cancel),
        out_(out_fd),
        stdin_(stdin_fd),
        output_(spec.max_output_bytes),
        start_(start) {
#ifdef SYS_pidfd_open
    pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#endif
  }

  void Supervise(ProcessResult* result);

 private:
  void CheckKillTriggers(Clock::time_point now, ProcessResult* result);
  void CheckLeaderExit(Clock::time_point now);
  int PollTimeoutMs(Clock::time_point now) const;
  void ReadOutput();
  void WriteStdin();

  const pid_t pid_;
  const ProcessSpec& spec_;
  const std::function<void(std::string_view)>& on_output_;
  const CancelToken* const cancel_;
  UniqueFd out_;
  UniqueFd stdin_;
  UniqueFd pidfd_;
  size_t stdin_written_ = 0;
  BoundedOutput output_;
  const Clock::time_point start_;
  bool callback_failed_ = false;
  bool term_sent_ = false;
  bool kill_sent_ = false;
  Clock::time_point kill_at_{};
  bool leader_exited_ = false;
  bool leader_lost_ = false;  // ECHILD: someone else reaped it (or SIGCHLD is ignored)
  Clock::time_point drain_until_{};
};

void ChildSupervisor::CheckKillTriggers(Clock::time_point now, ProcessResult* result) {
  if (leader_exited_) return;
  if (!term_sent_) {
    bool cancel_now = cancel_ != nullptr && cancel_->cancelled();
    bool timeout_now = spec_.timeout.count() > 0 && now - start_ >= spec_.timeout;
    if (cancel_now || timeout_now) {
      result->cancelled = cancel_now;
      result->timed_out = !cancel_now && timeout_now;
      ::kill(-pid_, SIGTERM);
      term_sent_ = true;
      kill_at_ = now + kTermGrace;
    }
  } else if (!kill_sent_ && now >= kill_at_) {
    ::kill(-pid_, SIGKILL);
    kill_sent_ = true;
  }
}

void ChildSupervisor::CheckLeaderExit(Clock::time_point now) {
  if (leader_exited_) return;
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  if (rc == 0 && info.si_pid == 0) return;  // still running
  if (rc != 0 && errno == EINTR) return;
  if (rc != 0) leader_lost_ = true;
  leader_exited_ = true;
  // The leader is a zombie (not yet reaped), so its pid still names the group: nothing can
  // reuse it. Kill whatever stayed in the group (background jobs, grandchildren).
  ::kill(-pid_, SIGKILL);
  stdin_.Reset();
  pidfd_.Reset();
  drain_until_ = now + kDrainCap;
}

int ChildSupervisor::PollTimeoutMs(Clock::time_point now) const {
  Clock::time_point wake = Clock::time_point::max();
  if (leader_exited_) {
    wake = drain_until_;
  } else {
    if (!term_sent_ && spec_.timeout.count() > 0) wake = std::min(wake, start_ + spec_.timeout);
    if (term_sent_ && !kill_sent_) wake = std::min(wake, kill_at_);
    bool cancel_pollable = cancel_ == nullptr || cancel_->fd() >= 0;
    if (!pidfd_.valid() || !cancel_pollable) wake = std::min(wake, now + kExitPollPeriod);
  }
  if (wake == Clock::time_point::max()) return -1;
  if (wake <= now) return 0;
  auto ms = std::chrono::duration_cast<milliseconds>(wake - now).count() + 1;
  return static_cast<int>(std::min<long long>(ms, 60 * 60 * 1000));
}

void ChildSupervisor::ReadOutput() {
  char buf[kReadChunk];
  for (int i = 0; i < kMaxReadsPerWakeup && out_.valid(); ++i) {
    ssize_t n = ::read(out_.get(), buf, sizeof(buf));
    if (n > 0) {
      std::string_view chunk(buf, static_cast<size_t>(n));
      output_.Append(chunk);
      if (on_output_ && !callback_failed_) {
        try {
          on_output_(chunk);
        } catch (...) {
          callback_failed_ = true;  // keep supervising: the child must still be reaped
        }
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    out_.Reset();  // EOF or error
  }
}

void ChildSupervisor::WriteStdin() {
  const std::string& data = *spec_.stdin_data;
  while (stdin_written_ < data.size()) {
    ssize_t n = ::write(stdin_.get(), data.data() + stdin_written_, data.size() - stdin_written_);
    if (n > 0) {
      stdin_written_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // EPIPE: the child closed its stdin; drop the rest
  }
  stdin_.Reset();
}

void ChildSupervisor::Supervise(ProcessResult* result) {
  if (stdin_.valid() && spec_.stdin_data->empty()) stdin_.Reset();
  while (true) {
    Clock::time_point now = Clock::now();
    CheckKillTriggers(now, result);
    CheckLeaderExit(now);
    if (leader_exited_ && (!out_.valid() || now >= drain_until_)) break;

    struct pollfd fds[4];
    int n = 0, out_i = -1, in_i = -1;
    if (out_.valid()) out_i = n, fds[n++] = {out_.get(), POLLIN, 0};
    if (stdin_.valid()) in_i = n, fds[n++] = {stdin_.get(), POLLOUT, 0};
    if (!leader_exited_ && !term_sent_ && cancel_ != nullptr && cancel_->fd() >= 0)
      fds[n++] = {cancel_->fd(), POLLIN, 0};
    if (pidfd_.valid()) fds[n++] = {pidfd_.get(), POLLIN, 0};
    int rc = ::poll(fds, static_cast<nfds_t>(n), PollTimeoutMs(now));
    if (rc < 0 && errno != EINTR) {
      // Cannot wait properly: do not spin; fall back to a short sleep.
      ::usleep(static_cast<useconds_t>(kExitPollPeriod.count() * 1000));
      continue;
    }
    if (rc <= 0) continue;
    if (out_i >= 0 && fds[out_i].revents != 0) ReadOutput();
    if (in_i >= 0 && fds[in_i].revents != 0) WriteStdin();
  }
  out_.Reset();

  int status = 0;
  pid_t w;
  do {
    w = ::waitpid(pid_, &status, 0);
  } while (w < 0 && errno == EINTR);
  result->exit_code = (w == pid_ && !leader_lost_) ? DecodeWaitStatus(status) : -1;
  result->output = output_.Take();
}

}  // namespace

BoundedOutput::BoundedOutput(size_t max_bytes)
    : head_max_(max_bytes / 4), tail_max_(max_bytes - max_bytes / 4) {}

void BoundedOutput::Append(std::string_view chunk) {
  if (head_.size() < head_max_) {
    size_t take = std::min(chunk.size(), head_max_ - head_.size());
    head_.append(chunk.data(), take);
    chunk.remove_prefix(take);
  }
  if (chunk.empty()) return;
  if (chunk.size() >= tail_max_) {
    elided_ += tail_.size() + (chunk.size() - tail_max_);
    tail_.assign(chunk.data() + (chunk.size() - tail_max_), tail_max_);
    return;
  }
  tail_.append(chunk.data(), chunk.size());
  if (tail_.size() > 2 * tail_max_ || tail_.size() > tail_max_ + (1 << 20)) {
    size_t drop = tail_.size() - tail_max_;
    elided_ += drop;
    tail_.erase(0, drop);
  }
}

std::string BoundedOutput::Take() {
  if (tail_.size() > tail_max_) {
    size_t drop = tail_.size() - tail_max_;
    elided_ += drop;
    tail_.erase(0, drop);
  }
  std::string out = std::move(head_);
  if (elided_ > 0) {
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += "[... " + std::to_string(elided_) + " bytes elided ...]\n";
  }
  out += tail_;
  head_.clear();
  tail_.clear();
  elided_ = 0;
  return out;
}

ProcessResult PosixProcessRunner::Run(const ProcessSpec& spec,
                                      const std::function<void(std::string_view)>& on_output,
                                      const CancelToken* cancel) {
  const Clock::time_point start = Clock::now();
  ProcessResult result;
  auto finish = [&](Status s) {
    result.start_status = std::move(s);
    result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    return result;
  };
  if (spec.argv.empty() || spec.argv[0].empty())
    return finish(Status::InvalidArgument("empty argv"));
  if (cancel != nullptr && cancel->cancelled()) {
    result.cancelled = true;
    return finish(Status::Cancelled("cancelled before start"));
  }

  std::string path = SearchPath(spec);
  if (path.empty()) {
    result.exit_code = 127;
    return finish(Status::NotFound(spec.argv[0] + ": command not found"));
  }
  SpawnSpec child;
  child.path = path;
  child.argv = spec.argv;
  if (spec.env) {
    child.env.emplace();
    for (const auto& [k, v] : *spec.env) {
      if (k.empty() || k.find('=') != std::string::npos)
        return finish(Status::InvalidArgument("bad environment variable name"));
      child.env->push_back(k + "=" + v);
    }
  }
  child.cwd = spec.cwd;

  ScopedSigpipeBlock sigpipe_block;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return finish(Status::Internal("pipe: " + ErrnoText(errno)));
  UniqueFd out_r(p[0]), out_w(p[1]);
  UniqueFd in_r, in_w;
  if (spec.stdin_data) {
    if (::pipe2(p, O_CLOEXEC) != 0) return finish(Status::Internal("pipe: " + ErrnoText(errno)));
    in_r.Reset(p[0]);
    in_w.Reset(p[1]);
    SetNonBlocking(in_w.get());
  }
  SetNonBlocking(out_r.get());
  if (in_r.valid()) child.fds.push_back({in_r.get(), 0});
  child.fds.push_back({out_w.get(), 1});
  child.fds.push_back({out_w.get(), 2});

  pid_t pid = -1;
  Status started = Spawn(child, &pid);
  in_r.Reset();
  out_w.Reset();
  if (!started.ok()) {
    result.exit_code = 127;
    return finish(started);
  }

  ChildSupervisor supervisor(pid, spec, on_output, cancel, out_r.Release(), in_w.Release(), start);
  supervisor.Supervise(&result);
  return finish(Status::Ok());
}

std::unique_ptr<ProcessRunner> MakePosixProcessRunner() {
  return std::make_unique<PosixProcessRunner>();
}

}  // namespace kiln
