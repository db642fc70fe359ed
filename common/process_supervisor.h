// ProcessSupervisor: the one place kiln watches over a child process it started. Spawn()
// (common/subprocess.h) creates the child; SupervisedProcess owns it from then on: it feeds the
// child's stdin, pumps its stdout/stderr (and any extra output descriptors) into sinks and
// bounded captures, enforces a deadline and a cancellation, stops the child's whole process
// group (SIGTERM, then SIGKILL after a grace), kills what is left of the group once the child
// exited, and reaps it. Every runner — builder/process_runner (buildah, compilers, skopeo),
// workspace/git_runner, the git CGI in transport/git_http and the local deploy sandbox in
// deploy/sandbox_process — supervises its children through it.
//
// One poll() loop per child, run by Wait() on the caller's thread (a blocking-work thread,
// never an actor): it wakes on output, stdin space, the child's exit (pidfd), the cancel
// descriptor, a Terminate()/Kill() from another thread, and the next deadline.
//
// Ownership: a SupervisedProcess owns its child until Wait() reaped it, and the descriptors it
// created; descriptors handed in (SpawnSpec::fds, stdin_fd, cancel_fd) stay the caller's and
// must stay open until Wait() returns. Destroying it without Wait() kills the group and reaps.
// Thread-safety: Wait() runs once, on one thread; sinks run on that thread. Terminate(), Kill(),
// Finished(), WaitFinished() and pid() are safe from any thread, also from inside a sink.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace kiln {

/// Keeps the head (25%) and tail (75%) of a byte stream within a budget. Not thread-safe.
class BoundedOutput {
 public:
  explicit BoundedOutput(size_t max_bytes);
  /// Adds bytes; never fails (excess bytes are counted, then dropped).
  void Append(std::string_view chunk);
  /// head + "\n[... N bytes elided ...]\n" + tail, or everything if nothing was elided.
  std::string Take();
  /// Bytes dropped so far (final once Take() ran).
  size_t elided() const { return elided_; }

 private:
  const size_t head_max_;
  const size_t tail_max_;
  std::string head_;
  std::string tail_;  // may hold up to 2*tail_max_ before trimming, to amortize erases
  size_t elided_ = 0;
};

/// Receives a child's output as it arrives, on the thread running Wait(). It may block (that is
/// back-pressure: the child waits once its pipe is full), but while it blocks the deadline and
/// cancellation wait too. An exception from it stops further calls to it; the output is still
/// captured and the child still supervised.
using OutputSink = std::function<void(std::string_view chunk)>;

/// What becomes of one output stream of the child. With neither a sink nor a capture the
/// child's descriptor is /dev/null. Plain value type.
struct OutputSpec {
  enum class Keep {
    kHead,         // the first capture_bytes bytes
    kHeadAndTail,  // BoundedOutput(capture_bytes): 25% head, 75% tail, an "elided" line between
  };
  OutputSink sink;  // may be empty
  /// Bytes kept in ProcessOutcome::out/err; 0: none; SIZE_MAX: everything.
  size_t capture_bytes = 0;
  Keep keep = Keep::kHead;
};

/// A descriptor the child writes to besides stdout/stderr (e.g. bwrap's --info-fd).
struct ExtraOutput {
  int child_fd = -1;  // >= 3
  OutputSink sink;
};

/// What to run and how to watch it. Plain value type; the views and descriptors it names are
/// the caller's and must outlive Wait().
struct SupervisedSpec {
  /// path, argv, env, cwd, process group, PDEATHSIG. spawn.fds are passed through as extra
  /// descriptors (child fds >= 3 only; 0, 1 and 2 are set from the fields below).
  SpawnSpec spawn;
  /// Written to the child's stdin (a socket, written with MSG_NOSIGNAL: a child that closes its
  /// stdin early costs the rest of the bytes, never a SIGPIPE); stdin is closed after the last
  /// byte. nullopt (and stdin_fd -1): stdin is /dev/null.
  std::optional<std::string_view> stdin_bytes;
  /// A descriptor given to the child as its stdin (a file, a pipe). Excludes stdin_bytes.
  int stdin_fd = -1;
  OutputSpec out;
  /// Ignored when merge_stderr: stderr then shares stdout's pipe, so `out` gets both in the
  /// order they were written.
  OutputSpec err;
  bool merge_stderr = false;
  std::vector<ExtraOutput> extra_outputs;
  /// A descriptor that becomes readable once the run is cancelled (e.g. CancelToken::fd()),
  /// and/or a predicate polled every 20 ms (when there is no descriptor) and on every wake-up.
  /// Cancelled: the group is stopped like on a timeout and ProcessOutcome::cancelled is set.
  int cancel_fd = -1;
  std::function<bool()> cancel_requested;
  /// When the child is stopped with ProcessOutcome::timed_out (SIGTERM, SIGKILL after
  /// kill_grace). max(): no deadline. A deadline already past stops the child at once.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /// SIGTERM -> SIGKILL delay for the deadline and cancellation; 0: SIGKILL at once.
  std::chrono::milliseconds kill_grace{500};
  /// Once the child exited (and what was left of its group is killed), how long its outputs may
  /// still take to reach EOF (a process outside the group may hold them open).
  std::chrono::milliseconds drain_after_exit{250};
};

/// How a supervised child ended. Plain value type.
struct ProcessOutcome {
  /// Exit status; 128+signal when killed by a signal; -1 when the status was lost (someone
  /// else reaped the child).
  int exit_code = -1;
  bool timed_out = false;  // the deadline stopped it
  bool cancelled = false;  // the cancellation stopped it
  bool stopped = false;    // Terminate() or Kill() was asked before it exited
  std::string out;         // stdout capture (with stderr when merged)
  std::string err;         // stderr capture
  size_t out_dropped = 0;  // bytes of stdout the capture bound dropped
  size_t err_dropped = 0;
  std::chrono::milliseconds elapsed{0};  // from Start() to the reap
};

class SupervisedProcess {
 public:
  /// Starts `spec` (Spawn) with the pipes it asks for. On success *out owns the running child.
  /// Errors: what Spawn returns (InvalidArgument, NotFound, PermissionDenied, Internal),
  /// InvalidArgument for a mapping of fd 0-2 in spawn.fds, both stdin_bytes and stdin_fd, or a
  /// bad extra output, Internal when a pipe cannot be made. On error no child is left behind.
  static Status Start(SupervisedSpec spec, std::unique_ptr<SupervisedProcess>* out);
  /// Kills the group and reaps the child if Wait() never ran. Must not run while Wait() does.
  ~SupervisedProcess();
  SupervisedProcess(const SupervisedProcess&) = delete;
  SupervisedProcess& operator=(const SupervisedProcess&) = delete;

  /// Supervises until the child exited, its outputs reached EOF (or drain_after_exit passed)
  /// and it is reaped; returns how it ended. Call once; a second call returns an empty outcome.
  ProcessOutcome Wait();
  /// SIGTERM to the group now (unless already sent), SIGKILL after `grace` (0: at once). A no-op
  /// once the child exited. Never blocks.
  void Terminate(std::chrono::milliseconds grace);
  /// SIGKILL to the group now. A no-op once the child exited. Never blocks.
  void Kill();
  /// True once Wait() reaped the child; *exit_code (may be null) gets its exit code.
  bool Finished(int* exit_code = nullptr) const;
  /// Blocks up to `timeout` for Finished(); returns it.
  bool WaitFinished(std::chrono::milliseconds timeout, int* exit_code = nullptr) const;
  /// The child's pid (and process group id with spawn.new_process_group).
  pid_t pid() const { return pid_; }

 private:
  struct Stream;
  class Loop;
  explicit SupervisedProcess(SupervisedSpec spec);

  SupervisedSpec spec_;
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point start_;
  UniqueFd pidfd_;
  UniqueFd wake_;  // eventfd: Terminate()/Kill() wake the loop
  UniqueFd stdin_;
  std::vector<Stream> streams_;  // stdout, stderr (unless merged or discarded), extra outputs
  bool waited_ = false;          // Wait()'s thread only

  mutable std::mutex mu_;
  mutable std::condition_variable finished_cv_;
  bool finished_ = false;                                  // guarded by mu_
  int exit_code_ = -1;                                     // guarded by mu_
  std::optional<std::chrono::milliseconds> term_request_;  // guarded by mu_
  bool kill_request_ = false;                              // guarded by mu_
};

/// SupervisedProcess::Start, then Wait() on the calling thread. Returns Start's error (nothing
/// ran, *outcome untouched) or Ok with *outcome filled in.
Status RunProcess(SupervisedSpec spec, ProcessOutcome* outcome);

}  // namespace kiln
