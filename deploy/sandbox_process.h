// SandboxProcess: one candidate running under bubblewrap (see LocalSandboxArgv in
// deploy/launch_spec.h). Start() starts bwrap as a SupervisedProcess (common/
// process_supervisor.h) with stdout+stderr merged (the sink keeps the last bytes) and bwrap's
// --info-fd as an extra output, from which it reads the sandbox's pid and PID-namespace id; a
// supervisor thread runs the supervision loop (output, exit, kill, reap) for the sandbox's
// lifetime. What is the sandbox's own is its PID namespace: Stop() sends SIGTERM to every
// process of that namespace (bwrap --new-session puts them outside bwrap's process group), then
// SIGKILL to the namespace's init after the grace (the kernel then kills the rest) and to
// bwrap's group, and waits until /proc shows none of them.
//
// Ownership: owns the supervised bwrap child and the supervisor thread; the destructor calls
// Stop() with no grace. Thread-safety: all methods are thread-safe. Start() must be called on a
// thread that outlives the sandbox: bwrap's --die-with-parent fires when the forking THREAD
// exits (the local deployer forks on its own TaskThread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/process_supervisor.h"
#include "common/status.h"

namespace kiln {

class SandboxProcess {
 public:
  /// Forks and execs `argv` (argv[0] an absolute path or looked up in /usr/bin:/bin) with an
  /// empty environment, stdin /dev/null, stdout+stderr on a pipe, the write end of an info
  /// pipe as descriptor `info_fd` and no other descriptors. Waits up to `info_timeout` for the
  /// sandbox's pid. Internal when bwrap cannot be started; FailedPrecondition (with the last
  /// output) when bwrap exits or times out before reporting a pid.
  static Status Start(const std::vector<std::string>& argv, int info_fd, size_t tail_bytes,
                      std::chrono::milliseconds info_timeout, std::unique_ptr<SandboxProcess>* out);
  ~SandboxProcess();
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;

  /// pid (in kiln's namespace) of the sandbox's init, the owner of its namespaces.
  pid_t sandbox_pid() const { return sandbox_pid_; }
  /// pid of the bwrap process kiln forked.
  pid_t bwrap_pid() const { return bwrap_pid_; }
  /// Inode number of the sandbox's PID namespace ("pid:[N]" in /proc/<pid>/ns/pid).
  uint64_t pid_namespace() const { return pidns_; }

  /// True once bwrap has exited and the supervisor reaped it; *code gets its exit status
  /// (128+signal if killed).
  bool Exited(int* code = nullptr);
  /// The last `tail_bytes` of stdout+stderr so far.
  std::string OutputTail() const;
  /// Waits up to `timeout` for the supervision to end (bwrap reaped, its output at EOF), so
  /// the tail holds the last words.
  void DrainOutput(std::chrono::milliseconds timeout);
  /// Stops the sandbox (see the file comment). Idempotent.
  void Stop(std::chrono::milliseconds grace);

 private:
  SandboxProcess() = default;
  void OnOutput(std::string_view chunk);
  void OnInfo(std::string_view chunk);
  bool InfoCompleteLocked() const;     // requires mu_
  std::vector<pid_t> Members() const;  // live pids in the sandbox's PID namespace

  std::unique_ptr<SupervisedProcess> proc_;  // set once by Start
  pid_t bwrap_pid_ = -1;
  pid_t sandbox_pid_ = -1;
  uint64_t pidns_ = 0;
  size_t tail_bytes_ = 4096;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // info arrived, or the supervisor thread finished
  std::string tail_;            // guarded by mu_
  std::string info_;            // guarded by mu_
  bool supervised_ = false;     // guarded by mu_: the supervision loop returned
  std::thread supervisor_;      // runs proc_->Wait()
  std::mutex stop_mu_;          // serializes Stop()
  bool stopped_ = false;        // guarded by stop_mu_
};

/// Inode of /proc/<pid>/ns/pid, 0 when unreadable. Exposed for tests.
uint64_t PidNamespaceOf(pid_t pid);

/// True when `pid` has exited (no /proc entry, or a zombie waiting for its reaper).
bool IsZombie(pid_t pid);

/// pids of the live (non-zombie) processes in PID namespace `ns` (0: none). The sandbox's
/// init is reparented to the system's init when bwrap exits first, and stays a zombie until
/// that reaps it; it runs no code and holds nothing. Exposed for tests.
std::vector<pid_t> ProcessesInPidNamespace(uint64_t ns);

/// Issue 19/soak: SIGKILLs every process (other than this one) one of whose arguments starts
/// with `arg_prefix` (non-empty), and returns how many. The local deployer names its sandboxes'
/// staged roots uniquely per state directory and domain, and calls this at start for the
/// sandboxes of an earlier kiln process: bwrap's sandbox init, cloned but not yet released when
/// its parent died with kiln, waits forever and has no parent-death signal of its own yet.
size_t KillProcessesWithArgPrefix(const std::string& arg_prefix);

}  // namespace kiln
