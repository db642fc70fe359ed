// Sandbox command: builds the bubblewrap (bwrap) argv that runs a domain's compile command in a
// candidate's workspace with nothing else of the host visible: all namespaces unshared (user,
// PID, IPC, UTS, cgroup, and network unless asked; nested user namespaces disabled), a tmpfs root holding only the read-only toolchain binds, /proc, a
// minimal /dev, a private size-bounded /tmp, the workspace read-write at /workspace and the domain's named
// caches read-write at /cache/<ENV_VAR>; a cleared environment; all capabilities dropped; the
// sandbox dies with its parent. Pure functions: no I/O, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kiln {

/// Mount point of the workspace inside the sandbox (also the working directory).
inline constexpr char kSandboxWorkspace[] = "/workspace";
/// Parent of the cache mounts inside the sandbox.
inline constexpr char kSandboxCacheRoot[] = "/cache";

/// Debian 12 (merged /usr): /lib, /lib64, /bin and /sbin are symlinks into /usr.
/// Pairs of (link target, link path).
std::vector<std::pair<std::string, std::string>> MergedUsrSymlinks();

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
};

/// Returns InvalidArgument when the spec is unsafe or malformed: a relative or non-normalized
/// workspace, cache or ro_bind path, an ro_bind of "/", an empty command, an env var name that
/// is not [A-Za-z_][A-Za-z0-9_]*, or a NUL byte anywhere.
Status ValidateSandboxSpec(const SandboxSpec& spec);

/// The full argv ("bwrap", options..., "--", command...). Call ValidateSandboxSpec first; the
/// result for an invalid spec is unspecified. Never fails.
std::vector<std::string> BwrapArgv(const SandboxSpec& spec);

}  // namespace kiln
