#include "common/subprocess.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace kiln {
namespace {

// Why the child failed before or at execve, sent over a CLOEXEC pipe (EOF means exec worked).
struct ExecReport {
  int stage;
  int err;
  int step;  // kStageConfine: which ConfineStep failed
};
constexpr int kStageSetup = 1;
constexpr int kStageChdir = 2;
constexpr int kStageExec = 3;
constexpr int kStageConfine = 4;

constexpr int kMaxMappedFds = 16;
constexpr int kMaxMounts = 64;
constexpr int kMaxRlimits = 8;
constexpr int kMaxGroups = 64;

enum ConfineStep : int {
  kStepUnshare = 1,
  kStepPrivate,
  kStepMkdir,
  kStepMount,
  kStepRlimit,
  kStepGroups,
  kStepGid,
  kStepUid,
  kStepNoNewPrivs,
  kStepDeathSignal,
  kStepNetwork,
  kStepProc,
};

const char* StepName(int step) {
  switch (step) {
    case kStepUnshare:
      return "mount namespace";
    case kStepPrivate:
      return "private mounts";
    case kStepMkdir:
      return "mount point";
    case kStepMount:
      return "mount";
    case kStepRlimit:
      return "resource limit";
    case kStepGroups:
      return "supplementary groups";
    case kStepGid:
      return "gid";
    case kStepUid:
      return "uid";
    case kStepNoNewPrivs:
      return "no_new_privs";
    case kStepDeathSignal:
      return "parent-death signal";
    case kStepNetwork:
      return "network namespace";
    case kStepProc:
      return "/proc";
    default:
      return "setup";
  }
}

// Closes [first, last]; async-signal-safe.
void CloseRange(int first, int last) {
  if (first > last) return;
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), static_cast<unsigned>(last), 0) == 0)
    return;
#endif
  struct rlimit rl;
  int limit = 65536;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < static_cast<rlim_t>(limit))
    limit = static_cast<int>(rl.rlim_cur);
  for (int fd = first; fd <= last && fd < limit; ++fd) ::close(fd);
}

[[noreturn]] void ChildFail(int report_fd, int stage, int err, int step = 0) {
  ExecReport r{stage, err, step};
  ssize_t ignored = ::write(report_fd, &r, sizeof(r));
  (void)ignored;
  ::_exit(127);
}

struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* cwd;
  int n;                      // mapped fds
  int parent[kMaxMappedFds];  // sorted by child fd
  int child[kMaxMappedFds];
  bool new_group;
  bool die_with_parent;
  pid_t parent_pid;
  // Issue 18: ChildConfinement, as pointers into the spec (the child must not allocate).
  bool confine;
  bool new_pid_namespace;
  bool mount_proc;
  bool new_net_namespace;
  bool new_mount_namespace;
  int n_mounts;
  struct Mount {
    const char* source;
    const char* target;
    const char* fstype;  // nullptr: bind
    unsigned long flags;
    const char* data;  // nullptr: none
    bool make_target;
    ChildMount::When when;
  } mounts[kMaxMounts];
  int n_rlimits;
  int rlimit_resource[kMaxRlimits];
  uint64_t rlimit_value[kMaxRlimits];
  bool set_user;
  uid_t uid;
  gid_t gid;
  int n_groups;
  gid_t groups[kMaxGroups];
  bool no_new_privs;
};

// Brings the loopback interface of the current network namespace up; async-signal-safe.
bool LoopbackUp() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  ok = ok && ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  int err = errno;
  ::close(fd);
  errno = err;
  return ok;
}

// Applies the plan's ChildConfinement (see subprocess.h for the order); async-signal-safe.
// The user switch uses the raw system calls: they change this (only) thread's credentials,
// with none of libc's cross-thread broadcast, which a forked child does not need.
void ChildConfine(const ChildPlan& p, int rep) {
  if (p.new_net_namespace) {
    if (::unshare(CLONE_NEWNET) != 0 || !LoopbackUp())
      ChildFail(rep, kStageConfine, errno, kStepNetwork);
  }
  if (p.new_mount_namespace) {
    if (::unshare(CLONE_NEWNS) != 0) ChildFail(rep, kStageConfine, errno, kStepUnshare);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      ChildFail(rep, kStageConfine, errno, kStepPrivate);
  }
  if (p.mount_proc &&
      ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    ChildFail(rep, kStageConfine, errno, kStepProc);
  for (int i = 0; i < p.n_mounts; ++i) {
    const ChildPlan::Mount& m = p.mounts[i];
    if (m.when != ChildMount::When::kAlways) {
      struct stat st;
      const bool dir = m.when == ChildMount::When::kIfDirectory;
      if (::stat(m.target, &st) != 0 || (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
        continue;
    }
    if (m.make_target && ::mkdir(m.target, 0755) != 0 && errno != EEXIST)
      ChildFail(rep, kStageConfine, errno, kStepMkdir);
    if (::mount(m.source, m.target, m.fstype, m.flags, m.data) != 0)
      ChildFail(rep, kStageConfine, errno, kStepMount);
  }
  for (int i = 0; i < p.n_rlimits; ++i) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(p.rlimit_value[i]);
    if (::setrlimit(static_cast<__rlimit_resource>(p.rlimit_resource[i]), &rl) != 0)
      ChildFail(rep, kStageConfine, errno, kStepRlimit);
  }
  if (p.set_user) {
    if (::syscall(SYS_setgroups, p.n_groups, p.n_groups > 0 ? p.groups : nullptr) != 0)
      ChildFail(rep, kStageConfine, errno, kStepGroups);
    if (::syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0)
      ChildFail(rep, kStageConfine, errno, kStepGid);
    if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0)
      ChildFail(rep, kStageConfine, errno, kStepUid);
  }
  if (p.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    ChildFail(rep, kStageConfine, errno, kStepNoNewPrivs);
  if (p.die_with_parent) {  // a uid change cleared it
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
      ChildFail(rep, kStageConfine, errno, kStepDeathSignal);
    // PID 1 of a new PID namespace sees no parent (0).
    if (::getppid() != (p.new_pid_namespace ? 0 : p.parent_pid)) ::_exit(127);
  }
}

// Runs in the child (sharing kiln's memory until execve): only async-signal-safe calls, no
// allocation, no writes outside its own stack but errno and the report pipe.
[[noreturn]] void ChildExec(const ChildPlan& p, int report_fd) {
  if (p.new_group) ::setpgid(0, 0);
  if (p.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent is already gone (PID 1 of a new PID namespace sees no parent: 0).
    if (::getppid() != (p.new_pid_namespace ? 0 : p.parent_pid)) ::_exit(127);
  }
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &sa, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  // Every descriptor we keep moves above the highest target first, so that dup2 onto a
  // target cannot clobber a source still needed.
  int top = 2;
  for (int i = 0; i < p.n; ++i) top = std::max(top, p.child[i]);
  int rep = ::fcntl(report_fd, F_DUPFD_CLOEXEC, top + 1);
  if (rep < 0) ::_exit(127);
  int moved[kMaxMappedFds];
  for (int i = 0; i < p.n; ++i) {
    moved[i] = ::fcntl(p.parent[i], F_DUPFD_CLOEXEC, top + 1);
    if (moved[i] < 0) ChildFail(rep, kStageSetup, errno);
  }
  bool mapped[3] = {false, false, false};
  for (int i = 0; i < p.n; ++i) {
    if (::dup2(moved[i], p.child[i]) < 0) ChildFail(rep, kStageSetup, errno);
    if (p.child[i] < 3) mapped[p.child[i]] = true;
  }
  for (int fd = 0; fd < 3; ++fd) {
    if (mapped[fd]) continue;
    int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null_fd < 0) ChildFail(rep, kStageSetup, errno);
    if (null_fd != fd) {
      if (::dup2(null_fd, fd) < 0) ChildFail(rep, kStageSetup, errno);
      ::close(null_fd);
    }
  }
  // Close everything but the targets and the report pipe (which is CLOEXEC).
  int prev = -1;
  for (int i = 0; i <= p.n; ++i) {
    int next = i < p.n ? p.child[i] : rep;
    int lo = std::max(prev + 1, 3);
    if (next - 1 >= lo) CloseRange(lo, next - 1);
    prev = std::max(prev, next);
  }
  CloseRange(rep + 1, 0x7fffffff);
  if (p.confine) ChildConfine(p, rep);
  if (p.cwd != nullptr && ::chdir(p.cwd) != 0) ChildFail(rep, kStageChdir, errno);
  ::execve(p.path, p.argv, p.envp);
  ChildFail(rep, kStageExec, errno);
}

// The child's entry on its own stack (clone with CLONE_VM); see Spawn.
constexpr size_t kChildStackBytes = 256 * 1024;
struct ChildStart {
  const ChildPlan* plan;
  int report_fd;
};
int ChildMain(void* arg) {
  const ChildStart* s = static_cast<const ChildStart*>(arg);
  ChildExec(*s->plan, s->report_fd);
}

Status StartError(const SpawnSpec& spec, const ExecReport& r) {
  const std::string& name = spec.argv[0];
  if (r.stage == kStageChdir) {
    std::string m = "cannot enter working directory " + spec.cwd + ": " + ErrnoText(r.err);
    return r.err == ENOENT || r.err == ENOTDIR ? Status::NotFound(m) : Status::PermissionDenied(m);
  }
  if (r.stage == kStageExec) {
    if (r.err == ENOENT) return Status::NotFound(name + ": command not found");
    if (r.err == EACCES || r.err == EPERM)
      return Status::PermissionDenied(name + ": " + ErrnoText(r.err));
    return Status::Internal(name + ": exec failed: " + ErrnoText(r.err));
  }
  if (r.stage == kStageConfine)
    return Status::Internal(name + ": cannot confine the child (" + StepName(r.step) +
                            "): " + ErrnoText(r.err));
  return Status::Internal(name + ": child setup failed: " + ErrnoText(r.err));
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string ErrnoText(int err) {
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  return std::string(::strerror_r(err, buf, sizeof(buf)));
}

std::string FindExecutable(const std::string& name, const std::string& path_var) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return name;
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t colon = path_var.find(':', start);
    if (colon == std::string::npos) colon = path_var.size();
    std::string dir = path_var.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
    start = colon + 1;
  }
  return "";
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int WaitForExit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return DecodeWaitStatus(status);
}

Status Spawn(const SpawnSpec& spec, pid_t* pid) {
  *pid = -1;
  if (spec.argv.empty() || spec.argv[0].empty() || spec.path.empty())
    return Status::InvalidArgument("empty argv or executable path");
  if (spec.fds.size() > static_cast<size_t>(kMaxMappedFds))
    return Status::InvalidArgument("too many descriptors for a child");

  // Everything the child needs is built here: the child must not allocate.
  ChildPlan plan;
  std::vector<std::pair<int, int>> fds = spec.fds;  // {parent, child}
  std::sort(fds.begin(), fds.end(), [](auto& a, auto& b) { return a.second < b.second; });
  plan.n = static_cast<int>(fds.size());
  for (int i = 0; i < plan.n; ++i) {
    if (fds[i].first < 0 || fds[i].second < 0 || (i > 0 && fds[i].second == fds[i - 1].second))
      return Status::InvalidArgument("bad descriptor map for a child");
    plan.parent[i] = fds[i].first;
    plan.child[i] = fds[i].second;
  }
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (spec.env) {
    for (const std::string& e : *spec.env) {
      if (e.empty() || e[0] == '=' || e.find('=') == std::string::npos)
        return Status::InvalidArgument("bad environment entry for a child");
      envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
  }
  plan.path = spec.path.c_str();
  plan.argv = argv.data();
  plan.envp = spec.env ? envp.data() : environ;
  plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  plan.new_group = spec.new_process_group;
  plan.die_with_parent = spec.die_with_parent;
  plan.parent_pid = ::getpid();
  plan.confine = spec.confine.has_value();
  plan.new_pid_namespace = plan.mount_proc = plan.new_net_namespace = false;
  plan.n_groups = 0;
  plan.new_mount_namespace = false;
  plan.n_mounts = plan.n_rlimits = 0;
  plan.set_user = plan.no_new_privs = false;
  plan.uid = 0;
  plan.gid = 0;
  if (spec.confine) {
    const ChildConfinement& c = *spec.confine;
    if (c.mounts.size() > static_cast<size_t>(kMaxMounts) ||
        c.rlimits.size() > static_cast<size_t>(kMaxRlimits) ||
        c.groups.size() > static_cast<size_t>(kMaxGroups))
      return Status::InvalidArgument("too many mounts, limits or groups for a child");
    if (c.mount_proc && !(c.new_pid_namespace && c.new_mount_namespace))
      return Status::InvalidArgument("a new /proc needs new PID and mount namespaces");
    plan.new_pid_namespace = c.new_pid_namespace;
    plan.mount_proc = c.mount_proc;
    plan.new_net_namespace = c.new_net_namespace;
    plan.new_mount_namespace = c.new_mount_namespace;
    for (gid_t g : c.groups) plan.groups[plan.n_groups++] = g;
    for (const ChildMount& m : c.mounts) {
      plan.mounts[plan.n_mounts++] = {m.source.c_str(),
                                      m.target.c_str(),
                                      m.fstype.empty() ? nullptr : m.fstype.c_str(),
                                      m.flags,
                                      m.data.empty() ? nullptr : m.data.c_str(),
                                      m.make_target,
                                      m.when};
    }
    for (const auto& [resource, value] : c.rlimits) {
      plan.rlimit_resource[plan.n_rlimits] = resource;
      plan.rlimit_value[plan.n_rlimits++] = value;
    }
    plan.set_user = c.user.has_value();
    if (c.user) plan.uid = c.user->first, plan.gid = c.user->second;
    plan.no_new_privs = c.no_new_privs;
  }

  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::Internal("pipe: " + ErrnoText(errno));
  UniqueFd report_r(p[0]), report_w(p[1]);
  // Issue 18: the child shares kiln's memory until it execs (CLONE_VM | CLONE_VFORK, as
  // posix_spawn does) instead of getting a copy (fork): no page tables of kiln's whole address
  // space copied and torn down again, no copy-on-write faults in kiln's threads meanwhile, for
  // each of the ~25 git/bwrap starts of an iteration. The child runs on its own stack, touches
  // nothing of kiln's but reads `plan` (this thread is suspended until the exec), and every
  // signal is blocked across the clone so no handler of kiln's runs in it before ChildExec
  // resets them. A new PID namespace: the child is its PID 1.
  void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return Status::Internal("child stack: " + ErrnoText(errno));
  ChildStart start{&plan, report_w.get()};
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const int flags = CLONE_VM | CLONE_VFORK | SIGCHLD | (plan.new_pid_namespace ? CLONE_NEWPID : 0);
  pid_t child = ::clone(ChildMain, static_cast<char*>(stack) + kChildStackBytes, flags, &start);
  const int clone_err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kChildStackBytes);
  if (child < 0) return Status::Internal("clone: " + ErrnoText(clone_err));
  if (spec.new_process_group) ::setpgid(child, child);  // also done by the child; either wins
  report_w.Reset();

  ExecReport report{0, 0, 0};
  size_t got = 0;
  while (got < sizeof(report)) {
    ssize_t n =
        ::read(report_r.get(), reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == sizeof(report)) {
    WaitForExit(child);
    return StartError(spec, report);
  }
  *pid = child;
  return Status::Ok();
}

}  // namespace kiln
