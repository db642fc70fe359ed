#include "workspace/git_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "common/process_supervisor.h"

namespace kiln {
namespace {

constexpr size_t kMaxStderr = 64 * 1024;

// Issue 19: this thread's GitDeadlineScope.
thread_local std::optional<std::chrono::steady_clock::time_point> tls_git_deadline;
thread_local std::string tls_git_deadline_what;
constexpr const char* kChildPath = "/usr/local/bin:/usr/bin:/bin";

const std::string& GitBinary() {
  static const std::string path = [] {
    for (const char* p : {"/usr/local/bin/git", "/usr/bin/git", "/bin/git"})
      if (::access(p, X_OK) == 0) return std::string(p);
    return std::string();
  }();
  return path;
}

std::vector<std::string> BuildEnv(const GitCommand& cmd) {
  std::vector<std::string> env = {
      std::string("PATH=") + kChildPath,
      "HOME=" + (cmd.home.empty() ? std::string("/nonexistent") : cmd.home),
      "GIT_CONFIG_NOSYSTEM=1",
      "GIT_CONFIG_GLOBAL=/dev/null",
      "GIT_TERMINAL_PROMPT=0",
      "GIT_ATTR_NOSYSTEM=1",
      "GIT_PROTOCOL_FROM_USER=0",
      "LANG=C",
      "LC_ALL=C",
  };
  // cmd.env overrides the defaults (getenv would return the first duplicate).
  for (const auto& [k, v] : cmd.env) {
    std::string prefix = k + "=";
    env.erase(std::remove_if(
                  env.begin(), env.end(),
                  [&](const std::string& e) { return e.compare(0, prefix.size(), prefix) == 0; }),
              env.end());
    env.push_back(prefix + v);
  }
  return env;
}

}  // namespace

std::string GitResult::ErrorSummary() const {
  size_t start = 0;
  // Skip leading blank lines, then take the first line (bounded).
  while (start < err.size() && (err[start] == '\n' || err[start] == '\r')) ++start;
  size_t end = err.find('\n', start);
  std::string line = err.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (line.size() > 300) line.resize(300);
  if (line.empty()) return "git exited with code " + std::to_string(exit_code);
  return line;
}

Status PosixGitRunner::Run(const GitCommand& cmd, GitResult* result) {
  *result = GitResult();
  const std::string& git = GitBinary();
  if (git.empty())
    return Status::Unavailable("git binary not found in /usr/local/bin, /usr/bin, /bin");
  SupervisedSpec spec;
  spec.spawn.path = git;
  spec.spawn.argv = {"git"};
  if (!cmd.git_dir.empty()) spec.spawn.argv.push_back("--git-dir=" + cmd.git_dir);
  if (!cmd.work_tree.empty()) spec.spawn.argv.push_back("--work-tree=" + cmd.work_tree);
  spec.spawn.argv.insert(spec.spawn.argv.end(), cmd.args.begin(), cmd.args.end());
  spec.spawn.env = BuildEnv(cmd);
  spec.spawn.cwd = cmd.cwd;
  if (!cmd.stdin_data.empty()) spec.stdin_bytes = cmd.stdin_data;
  spec.out.capture_bytes = SIZE_MAX;
  spec.err.capture_bytes = kMaxStderr;

  spec.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cmd.timeout_ms);
  std::string limit = std::to_string(cmd.timeout_ms) + " ms";
  if (tls_git_deadline && *tls_git_deadline < spec.deadline) {  // issue 19: the caller's first
    spec.deadline = *tls_git_deadline;
    limit = tls_git_deadline_what;
  }
  spec.kill_grace = std::chrono::milliseconds(0);  // SIGKILL at the deadline
  ProcessOutcome outcome;
  Status s = RunProcess(std::move(spec), &outcome);
  if (!s.ok()) return Status::Unavailable("cannot start git: " + s.message());
  if (outcome.timed_out)
    return Status::DeadlineExceeded("git " + (cmd.args.empty() ? std::string() : cmd.args[0]) +
                                    " did not finish within " + limit);
  result->exit_code = outcome.exit_code;
  result->out = std::move(outcome.out);
  result->err = std::move(outcome.err);
  return Status::Ok();
}

GitRunner* DefaultGitRunner() {
  static PosixGitRunner* runner = new PosixGitRunner();
  return runner;
}

GitDeadlineScope::GitDeadlineScope(std::chrono::steady_clock::time_point deadline, std::string what)
    : prev_deadline_(tls_git_deadline), prev_what_(tls_git_deadline_what) {
  tls_git_deadline = deadline;
  tls_git_deadline_what = std::move(what);
}

GitDeadlineScope::~GitDeadlineScope() {
  tls_git_deadline = prev_deadline_;
  tls_git_deadline_what = std::move(prev_what_);
}

}  // namespace kiln
