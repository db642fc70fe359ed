// Sandbox command: builds the bubblewrap (bwrap) launch that runs a domain's compile command in
// a candidate's workspace with nothing else of the host visible: all namespaces unshared (user,
// PID, IPC, UTS, cgroup, and network unless asked; nested user namespaces disabled), a tmpfs root
// holding only the read-only toolchain binds, /proc, a minimal /dev, a private size-bounded /tmp,
// the workspace read-write at /workspace and the domain's named caches read-write at
// /cache/<ENV_VAR>; a cleared environment; all capabilities dropped; the sandbox dies with its
// parent.
//
// With `user` set (kiln runs as root), bwrap itself runs as that unprivileged host user, never
// as root: kiln's forked child (still root) enters a private mount namespace, mounts a fresh
// tmpfs on `stage_dir` (reachable by the user even when the state directory is not) and
// bind-mounts the workspace and caches below it, sets the limits (RLIMIT_NPROC, _AS, _FSIZE),
// switches to the user (no supplementary groups, no_new_privs, parent-death signal) and execs
// bwrap, which binds the staged paths. Issue 18: this used to be a chain of processes
// (`unshare --mount` -> /bin/sh with mount/mkdir -> `prlimit` -> `setpriv` -> bwrap; ~8 process
// starts, 50-70 ms under load before bwrap ran); the same steps are now system calls in the
// child (ChildConfinement, common/subprocess.h). Without `user` (kiln is not root) bwrap runs as
// kiln's own uid under the same limits.
// Pure functions: no I/O (but LookupSandboxUser), thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"  // ChildConfinement

namespace kiln {

/// Mount point of the workspace inside the sandbox (also the working directory).
inline constexpr char kSandboxWorkspace[] = "/workspace";
/// Parent of the cache mounts inside the sandbox.
inline constexpr char kSandboxCacheRoot[] = "/cache";

/// Debian 12 (merged /usr): /lib, /lib64, /bin and /sbin are symlinks into /usr.
/// Pairs of (link target, link path).
std::vector<std::pair<std::string, std::string>> MergedUsrSymlinks();

// --- Issue 15: sandboxes with limits ---
/// Default `stage_dir` of the layered build sandbox.
inline constexpr char kSandboxStageDir[] = "/run/kiln-layered";

/// A host user by id.
struct SandboxUser {
  uint32_t uid = 0;
  uint32_t gid = 0;
};

/// RLIMITs set (soft = hard) on the sandbox's processes; 0: that limit is not set.
struct SandboxLimits {
  /// RLIMIT_NPROC: processes of the sandbox's host user (counted per user, see security.md).
  int64_t max_processes = 512;
  /// RLIMIT_AS: address space of each process.
  int64_t max_memory_bytes = int64_t{4096} << 20;
  /// RLIMIT_FSIZE: largest file a process may write.
  int64_t max_file_bytes = int64_t{8192} << 20;
};

/// The `prlimit` argv prefix ("prlimit", "--nproc=N:N", "--as=B:B", "--fsize=B:B") for the set
/// limits; empty when none is set.
std::vector<std::string> PrlimitArgv(const SandboxLimits& limits);

/// "setpriv", "--reuid=U", "--regid=G", "--clear-groups", "--no-new-privs", "--pdeathsig",
/// "SIGKILL", "--". Changing the uid clears the parent-death signal kiln's Spawn set; setpriv
/// sets it again, so what it runs dies with kiln even before bwrap's --die-with-parent.
std::vector<std::string> SetprivArgv(const SandboxUser& user);

/// Resolves the unprivileged host user `name` (the one I/O function here: reads the user
/// database with getpwnam_r; thread-safe). Unavailable naming the user and the fix when it does
/// not exist, or is root / has gid 0 / is kiln's own uid.
Status LookupSandboxUser(const std::string& name, SandboxUser* out);

/// Single-quotes `s` for /bin/sh.
std::string ShellQuoteArg(const std::string& s);

struct SandboxSpec {
  /// Host directory, bind-mounted read-write at /workspace; the command runs there.
  std::string workspace;
  /// argv run inside the sandbox; argv[0] is looked up in the sandbox's PATH (from `env`).
  std::vector<std::string> command;
  /// The command's entire environment (nothing is inherited).
  std::map<std::string, std::string> env;
  /// Env var -> host dir; each is bind-mounted read-write at /cache/<VAR> and VAR is set to
  /// that path (overriding `env`).
  std::map<std::string, std::string> caches;
  /// Host paths bind-mounted read-only at the same path (the toolchain).
  std::vector<std::string> ro_binds = {"/usr"};
  /// (target, link) symlinks created in the sandbox root.
  std::vector<std::pair<std::string, std::string>> symlinks = MergedUsrSymlinks();
  /// Share the host network namespace. Off by default: builds have no network.
  bool network = false;
  /// Size limit of the sandbox's /tmp (a tmpfs, i.e. memory); 0: the kernel default (half RAM).
  int64_t tmp_size_bytes = int64_t{1} << 30;
  // --- Issue 15: sandboxes with limits ---
  /// The unprivileged host user bwrap and the command run as (uid and gid never 0); nullopt:
  /// kiln's own uid (only when kiln is not root).
  std::optional<SandboxUser> user;
  /// Resource limits of every process in the sandbox.
  SandboxLimits limits;
  /// Where the private mount namespace stages the binds for `user` (an existing directory,
  /// 0755, reachable by the user; a tmpfs is mounted over it in that namespace only).
  std::string stage_dir = kSandboxStageDir;
};

/// Returns InvalidArgument when the spec is unsafe or malformed: a relative or non-normalized
/// workspace, cache or ro_bind path, an ro_bind of "/", an empty command, an env var name that
/// is not [A-Za-z_][A-Za-z0-9_]*, a NUL byte anywhere, a user with uid or gid 0, a negative
/// limit, or (with a user) a non-normalized stage_dir.
Status ValidateSandboxSpec(const SandboxSpec& spec);

/// The bwrap argv ("bwrap", options..., "--", command...); with a user, it binds the staged
/// paths below `stage_dir` (see SandboxLaunchFor). Call ValidateSandboxSpec first; the result
/// for an invalid spec is unspecified. Never fails.
std::vector<std::string> BwrapArgv(const SandboxSpec& spec);

/// What to start: the bwrap argv and the child's confinement before it (ProcessSpec::confine).
struct SandboxLaunch {
  std::vector<std::string> argv;
  ChildConfinement confine;
};

/// The launch of `spec` (see the file comment): with a user, a private mount namespace, the
/// tmpfs on `stage_dir` and the staged binds (workspace at `stage_dir`/w, each cache at
/// `stage_dir`/c-<VAR>), the limits, the user switch and no_new_privs; without, the limits
/// only. Call ValidateSandboxSpec first. Never fails.
SandboxLaunch SandboxLaunchFor(const SandboxSpec& spec);

}  // namespace kiln
