#include "workspace/git_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "common/subprocess.h"

namespace kiln {
namespace {

constexpr size_t kMaxStderr = 64 * 1024;

// Issue 19: this thread's GitDeadlineScope.
thread_local std::optional<std::chrono::steady_clock::time_point> tls_git_deadline;
thread_local std::string tls_git_deadline_what;
constexpr const char* kChildPath = "/usr/local/bin:/usr/bin:/bin";

// Owns up to six fds (Run's pipe ends); closes them on destruction.
class FdSet {
 public:
  FdSet() { fds_.fill(-1); }
  ~FdSet() {
    for (int& fd : fds_) Close(fd);
  }
  int* Add() { return &fds_.at(used_++); }  // stable pointers: fixed storage
  static void Close(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

 private:
  std::array<int, 6> fds_;
  size_t used_ = 0;
};

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

Status ErrnoStatus(const char* what, int err) {
  return Status::Internal(std::string(what) + ": " + strerror(err));
}

// Spawns git with stdin/stdout/stderr connected to the given fds.
Status SpawnGit(const GitCommand& cmd, int in_fd, int out_fd, int err_fd, pid_t* pid) {
  const std::string& git = GitBinary();
  if (git.empty())
    return Status::Unavailable("git binary not found in /usr/local/bin, /usr/bin, /bin");
  SpawnSpec spec;
  spec.path = git;
  spec.argv = {"git"};
  if (!cmd.git_dir.empty()) spec.argv.push_back("--git-dir=" + cmd.git_dir);
  if (!cmd.work_tree.empty()) spec.argv.push_back("--work-tree=" + cmd.work_tree);
  spec.argv.insert(spec.argv.end(), cmd.args.begin(), cmd.args.end());
  spec.env = BuildEnv(cmd);
  spec.cwd = cmd.cwd;
  spec.fds = {{in_fd, 0}, {out_fd, 1}, {err_fd, 2}};
  Status s = Spawn(spec, pid);
  if (!s.ok()) return Status::Unavailable("cannot start git: " + s.message());
  return Status::Ok();
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
  FdSet fds;
  int *in_r = fds.Add(), *in_w = fds.Add(), *out_r = fds.Add(), *out_w = fds.Add(),
      *err_r = fds.Add(), *err_w = fds.Add();
  if (cmd.stdin_data.empty()) {
    *in_r = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (*in_r < 0) return ErrnoStatus("open /dev/null", errno);
  } else {
    // A socket, not a pipe, so that writing to an exited child gives EPIPE via MSG_NOSIGNAL
    // instead of a process-killing SIGPIPE.
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return ErrnoStatus("socketpair", errno);
    *in_r = sv[0];
    *in_w = sv[1];
    ::shutdown(*in_r, SHUT_WR);
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  *out_r = p[0];
  *out_w = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  *err_r = p[0];
  *err_w = p[1];

  pid_t pid = -1;
  Status s = SpawnGit(cmd, *in_r, *out_w, *err_w, &pid);
  if (!s.ok()) return s;
  FdSet::Close(*in_r);
  FdSet::Close(*out_w);
  FdSet::Close(*err_w);
  if (*in_w >= 0) ::fcntl(*in_w, F_SETFL, O_NONBLOCK);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cmd.timeout_ms);
  std::string limit = std::to_string(cmd.timeout_ms) + " ms";
  if (tls_git_deadline && *tls_git_deadline < deadline) {  // issue 19: the caller's deadline first
    deadline = *tls_git_deadline;
    limit = tls_git_deadline_what;
  }
  size_t written = 0;
  bool timed_out = false;
  char buf[65536];
  while (*out_r >= 0 || *err_r >= 0) {
    pollfd pfds[3];
    int n = 0;
    int out_i = -1, err_i = -1, in_i = -1;
    if (*out_r >= 0) pfds[out_i = n++] = {*out_r, POLLIN, 0};
    if (*err_r >= 0) pfds[err_i = n++] = {*err_r, POLLIN, 0};
    if (*in_w >= 0) pfds[in_i = n++] = {*in_w, POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int rc = ::poll(pfds, n, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno != EINTR) {
      ::kill(-pid, SIGKILL);
      WaitForExit(pid);
      return ErrnoStatus("poll", errno);
    }
    if (rc <= 0) continue;
    if (in_i >= 0 && pfds[in_i].revents) {
      ssize_t w = ::send(*in_w, cmd.stdin_data.data() + written, cmd.stdin_data.size() - written,
                         MSG_NOSIGNAL);
      if (w > 0) written += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == cmd.stdin_data.size())
        FdSet::Close(*in_w);
    }
    for (int idx : {out_i, err_i}) {
      if (idx < 0 || !pfds[idx].revents) continue;
      int* fd = idx == out_i ? out_r : err_r;
      ssize_t r = ::read(*fd, buf, sizeof(buf));
      if (r > 0) {
        std::string& dst = idx == out_i ? result->out : result->err;
        if (idx == out_i || dst.size() < kMaxStderr)
          dst.append(buf, idx == out_i ? r : std::min<size_t>(r, kMaxStderr - dst.size()));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        FdSet::Close(*fd);
      }
    }
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    WaitForExit(pid);
    return Status::DeadlineExceeded("git " + (cmd.args.empty() ? std::string() : cmd.args[0]) +
                                    " did not finish within " + limit);
  }
  result->exit_code = WaitForExit(pid);
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
