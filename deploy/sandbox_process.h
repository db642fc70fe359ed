// SandboxProcess: one candidate running under bubblewrap (see LocalSandboxArgv in
// deploy/launch_spec.h). Start() forks bwrap with stdout+stderr on one pipe (a reader thread
// keeps the last bytes) and reads the sandbox's pid and PID-namespace id from bwrap's
// --info-fd. Stop() ends every process of the sandbox: SIGTERM to all processes of its PID
// namespace, SIGKILL to the namespace's init after the grace (the kernel then kills the rest),
// and waits until /proc shows none of them.
//
// Ownership: owns the bwrap child, the pipe and the reader thread; the destructor calls Stop()
// with no grace. Thread-safety: all methods are thread-safe. Start() must be called on a
// thread that outlives the sandbox: bwrap's --die-with-parent fires when the forking THREAD
// exits (the local deployer forks on its own TaskThread).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace kiln {

class SandboxProcess {
 public:
  /// Forks and execs `argv` (argv[0] an absolute path or looked up in /usr/bin:/bin) with an
  /// empty environment, stdin /dev/null, stdout+stderr on a pipe, the write end of an info
  /// pipe as descriptor `info_fd` and no other descriptors. Waits up to `info_timeout` for the
  /// sandbox's pid. Internal when the pipe or fork fails; FailedPrecondition (with the last
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

  /// True once bwrap has exited (reaps it); *code gets its exit status (128+signal if killed).
  bool Exited(int* code = nullptr);
  /// The last `tail_bytes` of stdout+stderr so far.
  std::string OutputTail() const;
  /// Waits up to `timeout` for the output pipe to reach EOF (after the process exited), so the
  /// tail holds the last words.
  void DrainOutput(std::chrono::milliseconds timeout);
  /// Stops the sandbox (see the file comment). Idempotent.
  void Stop(std::chrono::milliseconds grace);

 private:
  SandboxProcess() = default;
  void ReadLoop();
  bool ReapLocked(bool block);
  std::vector<pid_t> Members() const;  // live pids in the sandbox's PID namespace

  pid_t bwrap_pid_ = -1;
  pid_t sandbox_pid_ = -1;
  uint64_t pidns_ = 0;
  int out_fd_ = -1;  // read end of stdout+stderr, owned by the reader thread
  size_t tail_bytes_ = 4096;

  mutable std::mutex mu_;
  std::string tail_;  // guarded by mu_
  bool eof_ = false;  // guarded by mu_
  std::mutex reap_mu_;
  bool reaped_ = false;  // guarded by reap_mu_
  int exit_code_ = -1;   // guarded by reap_mu_
  std::atomic<bool> stop_reader_{false};
  std::thread reader_;
  std::mutex stop_mu_;    // serializes Stop()
  bool stopped_ = false;  // guarded by stop_mu_
};

/// Inode of /proc/<pid>/ns/pid, 0 when unreadable. Exposed for tests.
uint64_t PidNamespaceOf(pid_t pid);

/// True when `pid` has exited (no /proc entry, or a zombie waiting for its reaper).
bool IsZombie(pid_t pid);

/// pids of the live (non-zombie) processes in PID namespace `ns` (0: none). The sandbox's
/// init is reparented to the system's init when bwrap exits first, and stays a zombie until
/// that reaps it; it runs no code and holds nothing. Exposed for tests.
std::vector<pid_t> ProcessesInPidNamespace(uint64_t ns);

}  // namespace kiln
