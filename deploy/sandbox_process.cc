#include "deploy/sandbox_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

std::string ResolveBinary(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/local/bin/"}) {
    std::string p = std::string(dir) + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "/usr/bin/" + name;
}

}  // namespace

uint64_t PidNamespaceOf(pid_t pid) {
  char link[64];
  std::string path = "/proc/" + std::to_string(pid) + "/ns/pid";
  ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = 0;
  unsigned long long ino = 0;
  if (sscanf(link, "pid:[%llu]", &ino) != 1) return 0;
  return ino;
}

bool IsZombie(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return true;  // gone
  char buf[512];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* close_paren = strrchr(buf, ')');
  return !close_paren || close_paren[1] == 0 || close_paren[2] == 'Z' || close_paren[2] == 'X';
}

std::vector<pid_t> ProcessesInPidNamespace(uint64_t ns) {
  std::vector<pid_t> out;
  if (ns == 0) return out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != 0) continue;
    if (PidNamespaceOf(static_cast<pid_t>(pid)) == ns && !IsZombie(static_cast<pid_t>(pid)))
      out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

Status SandboxProcess::Start(const std::vector<std::string>& argv, int info_fd, size_t tail_bytes,
                             std::chrono::milliseconds info_timeout,
                             std::unique_ptr<SandboxProcess>* out) {
  if (argv.empty() || info_fd < 3)
    return Status::InvalidArgument("sandbox: empty argv or bad info fd");
  int outp[2], infop[2];
  if (pipe2(outp, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(infop, O_CLOEXEC) != 0) {
    close(outp[0]);
    close(outp[1]);
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  std::string path = ResolveBinary(argv[0]);
  SpawnSpec spec;
  spec.path = path;
  spec.argv = argv;
  spec.env = std::vector<std::string>{};  // nothing of kiln's environment
  spec.fds = {{outp[1], 1}, {outp[1], 2}, {infop[1], info_fd}};
  // bwrap's own --die-with-parent ties the sandbox to bwrap; whether a deployed candidate
  // outlives kiln is the local deployer's decision, not this spawn's.
  spec.die_with_parent = false;
  pid_t pid = -1;
  Status spawned = Spawn(spec, &pid);
  close(outp[1]);
  close(infop[1]);
  if (!spawned.ok()) {
    close(outp[0]);
    close(infop[0]);
    return Status::Internal("cannot start the sandbox (bwrap): " + spawned.message());
  }
  std::unique_ptr<SandboxProcess> p(new SandboxProcess());
  p->bwrap_pid_ = pid;
  p->out_fd_ = outp[0];
  p->tail_bytes_ = tail_bytes;
  p->reader_ = std::thread([raw = p.get()] { raw->ReadLoop(); });

  // bwrap writes {"child-pid": N, "pid-namespace": M, ...} once the sandbox is set up.
  std::string info;
  auto deadline = Clock::now() + info_timeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd pf{infop[0], POLLIN, 0};
    if (poll(&pf, 1, static_cast<int>(std::min<long long>(left, 100))) <= 0) continue;
    char buf[1024];
    ssize_t n = read(infop[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    info.append(buf, static_cast<size_t>(n));
    auto j = nlohmann::json::parse(info, nullptr, false);
    if (!j.is_discarded()) break;  // complete object
  }
  close(infop[0]);
  auto j = nlohmann::json::parse(info, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.value("child-pid", 0) > 0) {
    p->sandbox_pid_ = j.value("child-pid", 0);
    p->pidns_ = j.value("pid-namespace", uint64_t{0});
    if (p->pidns_ == 0) p->pidns_ = PidNamespaceOf(p->sandbox_pid_);
    *out = std::move(p);
    return Status::Ok();
  }
  int code = -1;
  bool exited = p->Exited(&code);
  p->Stop(std::chrono::milliseconds(0));
  std::string msg =
      exited ? "the sandbox exited with status " + std::to_string(code) + " during set-up"
             : "the sandbox did not report its pid in time";
  std::string tail = p->OutputTail();
  if (!tail.empty()) msg += "; output:\n" + tail;
  return Status::FailedPrecondition(msg);
}

SandboxProcess::~SandboxProcess() { Stop(std::chrono::milliseconds(0)); }

void SandboxProcess::ReadLoop() {
  char buf[8192];
  while (!stop_reader_.load()) {
    pollfd pf{out_fd_, POLLIN, 0};
    int r = poll(&pf, 1, 100);
    if (r <= 0) continue;
    ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (n <= 0) {
      eof_ = true;
      break;
    }
    tail_.append(buf, static_cast<size_t>(n));
    if (tail_.size() > 2 * tail_bytes_) tail_.erase(0, tail_.size() - tail_bytes_);
  }
  close(out_fd_);
}

std::string SandboxProcess::OutputTail() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (tail_.size() <= tail_bytes_) return tail_;
  return tail_.substr(tail_.size() - tail_bytes_);
}

void SandboxProcess::DrainOutput(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (eof_) return;
    }
    if (Clock::now() >= deadline || !reader_.joinable()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool SandboxProcess::ReapLocked(bool block) {
  if (reaped_) return true;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(bwrap_pid_, &st, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == bwrap_pid_) {
    reaped_ = true;
    exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  } else if (r < 0) {
    reaped_ = true;  // not our child any more (ECHILD): nothing left to wait for
  }
  return reaped_;
}

bool SandboxProcess::Exited(int* code) {
  std::lock_guard<std::mutex> lock(reap_mu_);
  bool done = ReapLocked(false);
  if (done && code) *code = exit_code_;
  return done;
}

std::vector<pid_t> SandboxProcess::Members() const { return ProcessesInPidNamespace(pidns_); }

void SandboxProcess::Stop(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!Exited()) {
    // Polite first: every process of the sandbox (the init ignores it; its child's exit ends it).
    if (grace.count() > 0) {
      std::vector<pid_t> members = Members();
      if (members.empty()) kill(bwrap_pid_, SIGTERM);
      for (pid_t m : members) kill(m, SIGTERM);
      auto deadline = Clock::now() + grace;
      while (!Exited() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!Exited()) {
      // SIGKILL to a PID namespace's init kills everything in it.
      if (sandbox_pid_ > 0 && pidns_ != 0 && PidNamespaceOf(sandbox_pid_) == pidns_)
        kill(sandbox_pid_, SIGKILL);
      for (pid_t m : Members()) kill(m, SIGKILL);
      kill(bwrap_pid_, SIGKILL);
      std::lock_guard<std::mutex> lock(reap_mu_);
      ReapLocked(true);
    }
  }
  // The namespace's processes go away with its init; make sure before returning.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (std::vector<pid_t> left = Members(); !left.empty() && Clock::now() < deadline;
       left = Members()) {
    for (pid_t m : left) kill(m, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  DrainOutput(std::chrono::milliseconds(500));
  stop_reader_ = true;
  if (reader_.joinable()) reader_.join();
}

}  // namespace kiln
