#include "deploy/sandbox_process.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

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

size_t KillProcessesWithArgPrefix(const std::string& arg_prefix) {
  if (arg_prefix.empty()) return 0;
  size_t killed = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != 0 || pid == ::getpid()) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = 0; at < cmdline.size();) {
      size_t nul = cmdline.find('\0', at);
      if (nul == std::string::npos) nul = cmdline.size();
      if (cmdline.compare(at, arg_prefix.size(), arg_prefix) == 0) {
        if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
        break;
      }
      at = nul + 1;
    }
  }
  closedir(d);
  return killed;
}

Status SandboxProcess::Start(const std::vector<std::string>& argv, int info_fd, size_t tail_bytes,
                             std::chrono::milliseconds info_timeout,
                             std::unique_ptr<SandboxProcess>* out) {
  if (argv.empty() || info_fd < 3)
    return Status::InvalidArgument("sandbox: empty argv or bad info fd");
  std::unique_ptr<SandboxProcess> p(new SandboxProcess());
  p->tail_bytes_ = tail_bytes;
  SandboxProcess* raw = p.get();  // the sinks run on the supervisor thread, which p outlives
  SupervisedSpec spec;
  spec.spawn.path = ResolveBinary(argv[0]);
  spec.spawn.argv = argv;
  spec.spawn.env = std::vector<std::string>{};  // nothing of kiln's environment
  // bwrap's own --die-with-parent ties the sandbox to bwrap; whether a deployed candidate
  // outlives kiln is the local deployer's decision, not this spawn's.
  spec.spawn.die_with_parent = false;
  spec.merge_stderr = true;
  spec.out.sink = [raw](std::string_view chunk) { raw->OnOutput(chunk); };
  spec.extra_outputs = {{info_fd, [raw](std::string_view chunk) { raw->OnInfo(chunk); }}};
  Status started = SupervisedProcess::Start(std::move(spec), &p->proc_);
  if (!started.ok())
    return Status::Internal("cannot start the sandbox (bwrap): " + started.message());
  p->bwrap_pid_ = p->proc_->pid();
  p->supervisor_ = std::thread([raw] {
    raw->proc_->Wait();
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->supervised_ = true;
    raw->cv_.notify_all();
  });

  // bwrap writes {"child-pid": N, "pid-namespace": M, ...} once the sandbox is set up.
  nlohmann::json j;
  {
    std::unique_lock<std::mutex> lock(p->mu_);
    p->cv_.wait_for(lock, info_timeout, [&] { return p->InfoCompleteLocked() || p->supervised_; });
    j = nlohmann::json::parse(p->info_, nullptr, false);
  }
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

void SandboxProcess::OnOutput(std::string_view chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  tail_.append(chunk.data(), chunk.size());
  if (tail_.size() > 2 * tail_bytes_) tail_.erase(0, tail_.size() - tail_bytes_);
}

void SandboxProcess::OnInfo(std::string_view chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (info_.size() < 64 * 1024) info_.append(chunk.data(), chunk.size());
  if (InfoCompleteLocked()) cv_.notify_all();
}

bool SandboxProcess::InfoCompleteLocked() const {
  return !nlohmann::json::parse(info_, nullptr, false).is_discarded();
}

std::string SandboxProcess::OutputTail() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (tail_.size() <= tail_bytes_) return tail_;
  return tail_.substr(tail_.size() - tail_bytes_);
}

void SandboxProcess::DrainOutput(std::chrono::milliseconds timeout) {
  if (proc_) proc_->WaitFinished(timeout);
}

bool SandboxProcess::Exited(int* code) { return !proc_ || proc_->Finished(code); }

std::vector<pid_t> SandboxProcess::Members() const { return ProcessesInPidNamespace(pidns_); }

void SandboxProcess::Stop(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  if (stopped_ || !proc_) return;
  stopped_ = true;
  if (!Exited()) {
    // Polite first: every process of the sandbox (the init ignores it; its child's exit ends it).
    if (grace.count() > 0) {
      std::vector<pid_t> members = Members();
      if (members.empty()) proc_->Terminate(grace);  // bwrap alone: TERM, KILL after the grace
      for (pid_t m : members) kill(m, SIGTERM);
      proc_->WaitFinished(grace);
    }
    if (!Exited()) {
      // SIGKILL to a PID namespace's init kills everything in it.
      if (sandbox_pid_ > 0 && pidns_ != 0 && PidNamespaceOf(sandbox_pid_) == pidns_)
        kill(sandbox_pid_, SIGKILL);
      for (pid_t m : Members()) kill(m, SIGKILL);
      proc_->Kill();
    }
  }
  // The supervisor reaps bwrap and drains its output, then returns.
  if (supervisor_.joinable()) supervisor_.join();
  // The namespace's processes go away with its init; make sure before returning.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (std::vector<pid_t> left = Members(); !left.empty() && Clock::now() < deadline;
       left = Members()) {
    for (pid_t m : left) kill(m, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace kiln
