#include "common/process_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kiln {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kPredicatePeriod{20};  // cancel predicate without fd, or no pidfd
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxReadsPerWakeup = 16;
constexpr size_t kMaxSendChunk = size_t{1} << 20;

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// One output's bounded capture.
class Capture {
 public:
  Capture(size_t max_bytes, OutputSpec::Keep keep) : max_(max_bytes), keep_(keep) {
    if (keep_ == OutputSpec::Keep::kHeadAndTail && max_ > 0) bounded_.emplace(max_);
  }
  void Append(std::string_view chunk) {
    if (bounded_) return bounded_->Append(chunk);
    size_t take = std::min(chunk.size(), max_ - std::min(max_, head_.size()));
    head_.append(chunk.data(), take);
    dropped_ += chunk.size() - take;
  }
  std::string Take(size_t* dropped) {
    if (bounded_) {
      std::string s = bounded_->Take();
      *dropped = bounded_->elided();
      return s;
    }
    *dropped = dropped_;
    return std::move(head_);
  }

 private:
  const size_t max_;
  const OutputSpec::Keep keep_;
  std::optional<BoundedOutput> bounded_;
  std::string head_;
  size_t dropped_ = 0;
};

}  // namespace

struct SupervisedProcess::Stream {
  UniqueFd fd;
  OutputSink sink;
  bool sink_failed = false;
  Capture capture;
  Stream(UniqueFd f, OutputSink s, size_t max_bytes, OutputSpec::Keep keep)
      : fd(std::move(f)), sink(std::move(s)), capture(max_bytes, keep) {}
};

// ---------------------------------------------------------------------------------------------
// BoundedOutput

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
  return out;
}

// ---------------------------------------------------------------------------------------------
// Start

namespace {

// A pipe whose read end stays with us (non-blocking) and whose write end goes to the child.
Status MakeOutputPipe(UniqueFd* read_end, UniqueFd* write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::Internal("pipe: " + ErrnoText(errno));
  read_end->Reset(p[0]);
  write_end->Reset(p[1]);
  SetNonBlocking(p[0]);
  return Status::Ok();
}

bool Wanted(const OutputSpec& o) { return o.sink || o.capture_bytes > 0; }

}  // namespace

SupervisedProcess::SupervisedProcess(SupervisedSpec spec) : spec_(std::move(spec)) {}

Status SupervisedProcess::Start(SupervisedSpec spec, std::unique_ptr<SupervisedProcess>* out) {
  out->reset();
  for (const auto& [parent_fd, child_fd] : spec.spawn.fds) {
    (void)parent_fd;
    if (child_fd < 3) return Status::InvalidArgument("descriptors 0-2 are set by the supervisor");
  }
  if (spec.stdin_bytes && spec.stdin_fd >= 0)
    return Status::InvalidArgument("stdin given both as bytes and as a descriptor");
  for (const ExtraOutput& e : spec.extra_outputs)
    if (e.child_fd < 3) return Status::InvalidArgument("an extra output needs a descriptor >= 3");

  std::unique_ptr<SupervisedProcess> p(new SupervisedProcess(std::move(spec)));
  SupervisedSpec& s = p->spec_;
  SpawnSpec child = s.spawn;
  std::vector<UniqueFd> child_ends;  // closed once the child has them

  if (s.stdin_bytes) {
    // A socket, not a pipe: send(MSG_NOSIGNAL) to an exited child gives EPIPE, no SIGPIPE.
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return Status::Internal("socketpair: " + ErrnoText(errno));
    child_ends.emplace_back(sv[0]);
    p->stdin_.Reset(sv[1]);
    ::shutdown(sv[0], SHUT_WR);
    SetNonBlocking(sv[1]);
    child.fds.push_back({sv[0], 0});
  } else if (s.stdin_fd >= 0) {
    child.fds.push_back({s.stdin_fd, 0});
  }

  auto add_output = [&](const OutputSink& sink, size_t cap, OutputSpec::Keep keep,
                        std::vector<int> child_fds) -> Status {
    UniqueFd r, w;
    Status made = MakeOutputPipe(&r, &w);
    if (!made.ok()) return made;
    for (int fd : child_fds) child.fds.push_back({w.get(), fd});
    child_ends.push_back(std::move(w));
    p->streams_.emplace_back(std::move(r), sink, cap, keep);
    return Status::Ok();
  };
  // Order: stdout, stderr, extra outputs (Wait() takes the captures in this order).
  Status piped = Status::Ok();
  if (Wanted(s.out)) {
    std::vector<int> fds = {1};
    if (s.merge_stderr) fds.push_back(2);
    piped = add_output(s.out.sink, s.out.capture_bytes, s.out.keep, fds);
  }
  if (piped.ok() && !s.merge_stderr && Wanted(s.err))
    piped = add_output(s.err.sink, s.err.capture_bytes, s.err.keep, {2});
  for (const ExtraOutput& e : s.extra_outputs)
    if (piped.ok()) piped = add_output(e.sink, 0, OutputSpec::Keep::kHead, {e.child_fd});
  if (!piped.ok()) return piped;

  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return Status::Internal("eventfd: " + ErrnoText(errno));
  p->wake_.Reset(wake);

  p->start_ = Clock::now();
  Status spawned = Spawn(child, &p->pid_);
  child_ends.clear();
  if (!spawned.ok()) return spawned;
#ifdef SYS_pidfd_open
  p->pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, p->pid_, 0)));
#endif
  *out = std::move(p);
  return Status::Ok();
}

SupervisedProcess::~SupervisedProcess() {
  if (waited_ || pid_ <= 0) return;
  ::kill(spec_.spawn.new_process_group ? -pid_ : pid_, SIGKILL);
  WaitForExit(pid_);
}

// ---------------------------------------------------------------------------------------------
// Requests from any thread

void SupervisedProcess::Terminate(milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    term_request_ = term_request_ ? std::min(*term_request_, grace) : grace;
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof(one));
  (void)ignored;
}

void SupervisedProcess::Kill() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    kill_request_ = true;
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof(one));
  (void)ignored;
}

bool SupervisedProcess::Finished(int* exit_code) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ && exit_code) *exit_code = exit_code_;
  return finished_;
}

bool SupervisedProcess::WaitFinished(milliseconds timeout, int* exit_code) const {
  std::unique_lock<std::mutex> lock(mu_);
  finished_cv_.wait_for(lock, timeout, [&] { return finished_; });
  if (finished_ && exit_code) *exit_code = exit_code_;
  return finished_;
}

// ---------------------------------------------------------------------------------------------
// The supervision loop (Wait's thread)

class SupervisedProcess::Loop {
 public:
  Loop(SupervisedProcess& p, ProcessOutcome* outcome) : p_(p), s_(p.spec_), outcome_(outcome) {}

  void Run() {
    while (true) {
      Clock::time_point now = Clock::now();
      TakeRequests(now);
      CheckTriggers(now);
      CheckLeaderExit(now);
      if (leader_exited_ && (OpenStreams() == 0 || now >= drain_until_)) break;
      PollOnce(now);
    }
    for (Stream& st : p_.streams_) st.fd.Reset();
    int status = 0;
    pid_t w;
    do {
      w = ::waitpid(p_.pid_, &status, 0);
    } while (w < 0 && errno == EINTR);
    outcome_->exit_code = (w == p_.pid_ && !leader_lost_) ? DecodeWaitStatus(status) : -1;
  }

 private:
  void Signal(int sig) {
    if (leader_exited_) return;  // the pid may be reaped by someone else (ECHILD)
    ::kill(s_.spawn.new_process_group ? -p_.pid_ : p_.pid_, sig);
    if (sig == SIGKILL) kill_sent_ = true;
  }

  void BeginStop(Clock::time_point now, milliseconds grace) {
    if (leader_exited_ || kill_sent_) return;
    if (grace.count() <= 0) return Signal(SIGKILL);
    if (!term_sent_) {
      Signal(SIGTERM);
      term_sent_ = true;
      kill_at_ = now + grace;
    } else {
      kill_at_ = std::min(kill_at_, now + grace);
    }
  }

  void TakeRequests(Clock::time_point now) {
    std::optional<milliseconds> term;
    bool kill = false;
    {
      std::lock_guard<std::mutex> lock(p_.mu_);
      term.swap(p_.term_request_);
      std::swap(kill, p_.kill_request_);
    }
    if ((term || kill) && !leader_exited_) outcome_->stopped = true;
    if (kill) Signal(SIGKILL);
    if (term) BeginStop(now, *term);
  }

  void CheckTriggers(Clock::time_point now) {
    if (leader_exited_) return;
    if (!triggered_) {
      bool cancel_now = cancel_fd_ready_ || (s_.cancel_requested && s_.cancel_requested());
      bool timeout_now = now >= s_.deadline;
      if (cancel_now || timeout_now) {
        triggered_ = true;
        outcome_->cancelled = cancel_now;
        outcome_->timed_out = !cancel_now;
        BeginStop(now, s_.kill_grace);
      }
    }
    if (term_sent_ && !kill_sent_ && now >= kill_at_) Signal(SIGKILL);
  }

  void CheckLeaderExit(Clock::time_point now) {
    if (leader_exited_) return;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    int rc = ::waitid(P_PID, static_cast<id_t>(p_.pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == 0) return;  // still running
    if (rc != 0 && errno == EINTR) return;
    if (rc != 0) leader_lost_ = true;
    // The leader is a zombie (not yet reaped), so its pid still names the group and nothing can
    // reuse it: kill whatever stayed in the group (background jobs, grandchildren).
    if (!leader_lost_ && s_.spawn.new_process_group) ::kill(-p_.pid_, SIGKILL);
    leader_exited_ = true;
    p_.stdin_.Reset();
    p_.pidfd_.Reset();
    drain_until_ = now + s_.drain_after_exit;
  }

  size_t OpenStreams() const {
    size_t n = 0;
    for (const Stream& st : p_.streams_) n += st.fd.valid() ? 1 : 0;
    return n;
  }

  int PollTimeoutMs(Clock::time_point now) const {
    Clock::time_point wake = Clock::time_point::max();
    if (leader_exited_) {
      wake = drain_until_;
    } else {
      if (!triggered_) wake = std::min(wake, s_.deadline);
      if (term_sent_ && !kill_sent_) wake = std::min(wake, kill_at_);
      bool cancel_unpollable = s_.cancel_requested && s_.cancel_fd < 0;
      if (!p_.pidfd_.valid() || (cancel_unpollable && !triggered_))
        wake = std::min(wake, now + kPredicatePeriod);
    }
    if (wake == Clock::time_point::max()) return -1;
    if (wake <= now) return 0;
    auto ms = std::chrono::duration_cast<milliseconds>(wake - now).count() + 1;
    return static_cast<int>(std::min<long long>(ms, 60 * 60 * 1000));
  }

  void PollOnce(Clock::time_point now) {
    std::vector<pollfd> fds;
    fds.reserve(p_.streams_.size() + 4);
    for (const Stream& st : p_.streams_)
      fds.push_back({st.fd.valid() ? st.fd.get() : -1, POLLIN, 0});  // -1: ignored by poll
    const size_t in_i = fds.size();
    fds.push_back({p_.stdin_.valid() ? p_.stdin_.get() : -1, POLLOUT, 0});
    const size_t cancel_i = fds.size();
    bool watch_cancel = !leader_exited_ && !triggered_ && s_.cancel_fd >= 0;
    fds.push_back({watch_cancel ? s_.cancel_fd : -1, POLLIN, 0});
    const size_t wake_i = fds.size();
    fds.push_back({p_.wake_.get(), POLLIN, 0});
    fds.push_back({p_.pidfd_.valid() ? p_.pidfd_.get() : -1, POLLIN, 0});
    int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), PollTimeoutMs(now));
    if (rc < 0 && errno != EINTR) {
      // Cannot wait properly: do not spin; fall back to a short sleep.
      ::usleep(static_cast<useconds_t>(kPredicatePeriod.count() * 1000));
      return;
    }
    if (rc <= 0) return;
    if (fds[cancel_i].revents != 0) cancel_fd_ready_ = true;
    if (fds[wake_i].revents != 0) {
      uint64_t n;
      ssize_t ignored = ::read(p_.wake_.get(), &n, sizeof(n));
      (void)ignored;
    }
    if (fds[in_i].revents != 0) WriteStdin();
    for (size_t i = 0; i < p_.streams_.size(); ++i)
      if (fds[i].revents != 0) ReadStream(p_.streams_[i]);
  }

  void ReadStream(Stream& st) {
    for (int i = 0; i < kMaxReadsPerWakeup && st.fd.valid(); ++i) {
      ssize_t n = ::read(st.fd.get(), buf_, sizeof(buf_));
      if (n > 0) {
        std::string_view chunk(buf_, static_cast<size_t>(n));
        st.capture.Append(chunk);
        if (st.sink && !st.sink_failed) {
          try {
            st.sink(chunk);
          } catch (...) {
            st.sink_failed = true;  // keep supervising: the child must still be reaped
          }
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      st.fd.Reset();  // EOF or error
    }
  }

  void WriteStdin() {
    std::string_view data = *s_.stdin_bytes;
    while (stdin_written_ < data.size()) {
      size_t len = std::min(data.size() - stdin_written_, kMaxSendChunk);
      ssize_t n = ::send(p_.stdin_.get(), data.data() + stdin_written_, len, MSG_NOSIGNAL);
      if (n > 0) {
        stdin_written_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      break;  // EPIPE: the child closed its stdin; drop the rest
    }
    p_.stdin_.Reset();
  }

  SupervisedProcess& p_;
  const SupervisedSpec& s_;
  ProcessOutcome* const outcome_;
  char buf_[kReadChunk];
  size_t stdin_written_ = 0;
  bool cancel_fd_ready_ = false;
  bool triggered_ = false;  // deadline or cancellation seen
  bool term_sent_ = false;
  bool kill_sent_ = false;
  Clock::time_point kill_at_{};
  bool leader_exited_ = false;
  bool leader_lost_ = false;  // ECHILD: someone else reaped it (or SIGCHLD is ignored)
  Clock::time_point drain_until_{};
};

ProcessOutcome SupervisedProcess::Wait() {
  ProcessOutcome outcome;
  if (waited_) return outcome;
  waited_ = true;
  if (stdin_.valid() && spec_.stdin_bytes->empty()) stdin_.Reset();
  {
    auto loop = std::make_unique<Loop>(*this, &outcome);  // its read buffer is 64 KiB
    loop->Run();
  }
  // Captures: stdout first (with stderr when merged), then stderr; extra outputs keep none.
  size_t k = 0;
  if (Wanted(spec_.out)) outcome.out = streams_[k++].capture.Take(&outcome.out_dropped);
  if (!spec_.merge_stderr && Wanted(spec_.err))
    outcome.err = streams_[k++].capture.Take(&outcome.err_dropped);
  outcome.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start_);
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  exit_code_ = outcome.exit_code;
  finished_cv_.notify_all();
  return outcome;
}

Status RunProcess(SupervisedSpec spec, ProcessOutcome* outcome) {
  std::unique_ptr<SupervisedProcess> p;
  Status s = SupervisedProcess::Start(std::move(spec), &p);
  if (!s.ok()) return s;
  *outcome = p->Wait();
  return Status::Ok();
}

}  // namespace kiln
