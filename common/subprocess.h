// Subprocess: the one place kiln creates a child process. Every runner (builder/process_runner
// for buildah and compilers, workspace/git_runner, the git CGI in transport/git_http, the local
// deploy sandbox in deploy/sandbox_process) starts its children through Spawn(), so every child
// gets the same hygiene:
//   - exactly the descriptors the caller maps (0/1/2 default to /dev/null), nothing else —
//     no listening socket, journal or registry connection of kiln's leaks into a build;
//   - default signal dispositions and an empty signal mask;
//   - its own process group (so a timeout or cancel can kill the whole tree with kill(-pid));
//   - PR_SET_PDEATHSIG(SIGKILL): the child dies when the spawning THREAD exits (or kiln dies,
//     even by SIGKILL), so nothing builds or pushes on unsupervised beside a restarted kiln;
//   - failures at chdir/execve reported back as a Status (over a CLOEXEC pipe), not as an
//     unexplained exit code 127.
// Supervision (stdin, output, deadline, cancel, group kill, reap) is SupervisedProcess in
// common/process_supervisor.h, which every runner uses with its own policy (merged bounded
// capture, separate stdout/stderr, CGI streaming, a long-lived sandbox).
//
// Thread-safety: all functions are thread-safe. Spawn blocks the calling thread until the child
// has exec'd (or failed to), typically well under a millisecond: the child shares kiln's memory
// until then (clone CLONE_VM | CLONE_VFORK, like posix_spawn), so starting it costs the same
// however large kiln is, and kiln's other threads keep running.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kiln {

/// Owns one file descriptor; closes it on destruction. Not thread-safe.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Issue 18: one mount made in the child (after `new_mount_namespace`), as mount(2) takes it.
struct ChildMount {
  std::string source;
  std::string target;
  /// Empty for a bind mount.
  std::string fstype;
  unsigned long flags = 0;  // MS_* (MS_BIND for a bind mount)
  std::string data;
  /// mkdir(target, 0755) first (EEXIST is fine).
  bool make_target = false;
  /// Only when the target (followed) exists as: anything (kAlways: must succeed), a directory,
  /// or a regular file; otherwise the mount is skipped (as `[ -d X ] && mount ...`).
  enum class When { kAlways, kIfDirectory, kIfRegularFile };
  When when = When::kAlways;
};

/// Issue 18: what a chain of `unshare --mount` + a mount script + `prlimit` + `setpriv` did
/// (or `unshare --net --pid --fork --mount-proc`) before exec'ing a sandbox, done by the forked
/// child itself with plain system calls (no process starts). Applied in this order, after the
/// descriptors and before chdir/execve: the network namespace (loopback up), a private mount
/// namespace (every mount recursively private, so nothing propagates back to the host), /proc,
/// `mounts` in order, `rlimits` (soft = hard), the user switch (`groups`, then gid, then uid,
/// real/effective/saved), PR_SET_NO_NEW_PRIVS, and the parent-death signal again (a uid change
/// clears it). Any failure ends the child before exec
/// and Spawn reports it (Internal, naming the step). Plain value type.
struct ChildConfinement {
  /// The child is started with CLONE_NEWPID as well: it is PID 1 of a new PID
  /// namespace (everything it leaves behind dies with it); with `mount_proc`, /proc is mounted
  /// anew in its (then required) new mount namespace.
  bool new_pid_namespace = false;
  bool mount_proc = false;
  /// A new network namespace with only the loopback interface, brought up.
  bool new_net_namespace = false;
  bool new_mount_namespace = false;
  std::vector<ChildMount> mounts;
  /// {RLIMIT_*, value}: soft and hard limit.
  std::vector<std::pair<int, uint64_t>> rlimits;
  /// {uid, gid}; nullopt: keep kiln's.
  std::optional<std::pair<uid_t, gid_t>> user;
  /// Supplementary groups given with the user switch (none by default).
  std::vector<gid_t> groups;
  bool no_new_privs = false;
};

/// What to start. Plain value type.
struct SpawnSpec {
  /// Executable: an absolute or relative path (not searched; see FindExecutable).
  std::string path;
  /// argv, argv[0] included. Must not be empty.
  std::vector<std::string> argv;
  /// "NAME=value" entries; nullopt: inherit kiln's environment (trusted tools only).
  std::optional<std::vector<std::string>> env;
  /// Working directory of the child; empty: inherit kiln's.
  std::string cwd;
  /// {parent_fd, child_fd}: the child gets parent_fd as child_fd (one parent fd may be mapped
  /// to several child fds). Child fds 0, 1 and 2 not listed are /dev/null. No other fd is open
  /// in the child.
  std::vector<std::pair<int, int>> fds;
  /// Put the child in its own process group (pgid = pid).
  bool new_process_group = true;
  /// PR_SET_PDEATHSIG(SIGKILL). The signal follows the spawning thread: spawn from a thread
  /// that lives until the child is reaped.
  bool die_with_parent = true;
  /// Issue 18: set up in the child before exec (see ChildConfinement); nullopt: nothing.
  std::optional<ChildConfinement> confine;
};

/// Starts (clone, then execve) `spec`. On success *pid names the running child (the caller must
/// reap it). Errors: InvalidArgument (empty argv/path, bad fd map, too many mounts or limits),
/// NotFound
/// ("<argv0>: command not found", or a missing working directory), PermissionDenied, Internal
/// (pipe/clone failures, a confinement step that failed: "<argv0>: cannot confine the child
/// (<step>): <errno text>"). On error no child is left behind.
Status Spawn(const SpawnSpec& spec, pid_t* pid);

/// `name` if it contains '/', else the first executable regular file `dir/name` for the
/// directories of `path_var` (colon-separated; empty entries mean "."); "" if none.
std::string FindExecutable(const std::string& name, const std::string& path_var);

/// Exit status of a waitpid() status word; 128+signal when killed by a signal; -1 otherwise.
int DecodeWaitStatus(int status);

/// Blocks until `pid` exits (retrying EINTR) and returns DecodeWaitStatus, or -1 on error.
int WaitForExit(pid_t pid);

/// strerror_r as a string.
std::string ErrnoText(int err);

}  // namespace kiln
