// GitRunner: runs the git binary as a child process (SupervisedProcess in
// common/process_supervisor.h; argv as a vector, never a shell) in a clean environment,
// capturing stdout and stderr.
//
// The child's environment is built from scratch: PATH, HOME (a kiln-owned directory),
// GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null, GIT_TERMINAL_PROMPT=0, LANG=LC_ALL=C,
// plus the command's own extra variables. Nothing of kiln's environment (credentials, the
// user's git config, GIT_* overrides) reaches git.
//
// Callers must validate every agent-controlled argument (common/names.h) and put
// `--end-of-options` before revisions, so no argument can become an option.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kiln {

/// One git invocation. Plain value type.
struct GitCommand {
  std::vector<std::string> args;  // after "git" and the --git-dir/--work-tree options
  std::string git_dir;            // passed as --git-dir=...; empty: none
  std::string work_tree;          // passed as --work-tree=...; empty: none
  std::string cwd;                // child's working directory; empty: inherit
  std::string home;               // HOME for the child; empty: "/nonexistent"
  std::vector<std::pair<std::string, std::string>> env;  // extra/overriding variables
  std::string stdin_data;           // fed to the child's stdin; empty: stdin is /dev/null
  int timeout_ms = 10 * 60 * 1000;  // the child is killed (SIGKILL) after this
};

/// What a finished git process produced.
struct GitResult {
  int exit_code = -1;  // exit status, or 128 + signal number when killed by a signal
  std::string out;
  std::string err;  // truncated to 64 KiB
  /// First line of stderr (or "exit code N"), for error messages.
  std::string ErrorSummary() const;
};

/// Runs git. Implementations must be thread-safe: GitRepo calls Run from several threads.
class GitRunner {
 public:
  virtual ~GitRunner() = default;
  /// Runs `cmd` to completion. A non-zero exit code is NOT an error here (it is in
  /// result->exit_code). Returns Unavailable when git cannot be started, DeadlineExceeded
  /// when it ran longer than cmd.timeout_ms (the child is killed), Internal on pipe errors.
  virtual Status Run(const GitCommand& cmd, GitResult* result) = 0;
};

/// The real runner: the git binary found in /usr/local/bin, /usr/bin or /bin, supervised.
/// Stateless and thread-safe.
class PosixGitRunner : public GitRunner {
 public:
  Status Run(const GitCommand& cmd, GitResult* result) override;
};

// --- Issue 19: every wait bounded ---
/// While alive, every git process PosixGitRunner runs on this thread ends by `deadline` (the
/// build's): its timeout is min(cmd.timeout_ms, time left), and a command started with no time
/// left is killed at once: DeadlineExceeded "git <cmd> did not finish within <what>". Nested
/// scopes: the inner one applies until it ends. Per thread; not shared.
class GitDeadlineScope {
 public:
  GitDeadlineScope(std::chrono::steady_clock::time_point deadline, std::string what);
  ~GitDeadlineScope();
  GitDeadlineScope(const GitDeadlineScope&) = delete;
  GitDeadlineScope& operator=(const GitDeadlineScope&) = delete;

 private:
  std::optional<std::chrono::steady_clock::time_point> prev_deadline_;
  std::string prev_what_;
};
// --- end issue 19 ---

/// A process-wide PosixGitRunner (never destroyed). Thread-safe.
GitRunner* DefaultGitRunner();

}  // namespace kiln
