// LaunchSpec: how the local deploy target starts an image, decided from the image reference and
// the image config alone. Pure functions, no I/O; thread-safe.
//   - ParseImageRef: "<host:port>/<repository>@sha256:<hex>" -> parts.
//   - DecideLaunch: Entrypoint + Cmd as argv, Env plus PORT (and a default PATH), WorkingDir,
//     a numeric User -> what the candidate process runs.
//   - LocalSandboxArgv: the bubblewrap argv that runs a LaunchSpec with an extracted root as
//     "/" and nothing of the host: all namespaces unshared (loopback-only network), its own
//     /proc, a minimal /dev, a private /tmp, no capabilities, a new session, dies with kiln,
//     no nested user namespaces (--disable-userns). Issue 15: under RLIMITs, and (kiln being
//     root) with bwrap itself run as an unprivileged host user: `unshare --mount` stages the
//     root at `stage_dir`/<root's directory name> on a fresh tmpfs (the state directory is not
//     reachable by that user), then `prlimit ... setpriv --reuid --regid --clear-groups bwrap ...`.
//     The program's uid inside is the image's numeric non-zero User, else the host user's; never 0.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "builder/sandbox_command.h"
#include "common/status.h"

namespace kiln {

struct ImageRef {
  std::string host;        // "127.0.0.1:5000"
  std::string repository;  // "kiln/demo"
  std::string digest;      // "sha256:<64 hex>"
};

/// InvalidArgument unless `ref` is exactly "<host>/<repository>@sha256:<64 lowercase hex>".
Status ParseImageRef(const std::string& ref, ImageRef* out);

struct LaunchSpec {
  std::vector<std::string> argv;           // Entrypoint + Cmd (non-empty)
  std::map<std::string, std::string> env;  // the process's entire environment
  std::string cwd = "/";                   // absolute
  std::optional<uint32_t> uid, gid;        // from a numeric User; nullopt: root
  std::string user_name, group_name;       // a named User ("nobody[:nogroup]"): resolve with
                                           // ResolveUserNames against the image's files
};

/// Resolves spec->user_name / group_name with the text of the image's /etc/passwd and
/// /etc/group (as runtimes do): sets uid and gid (the user's primary group unless a group is
/// named). InvalidArgument "image config: User 'x' is not in the image's /etc/passwd" when it
/// cannot be found. No-op when no name is set.
Status ResolveUserNames(const std::string& passwd, const std::string& group, LaunchSpec* spec);

/// PATH used when the image's Env has none.
inline constexpr char kDefaultPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Decides the launch from an OCI/docker image config JSON (the blob; its "config" object is
/// used). Env entries "K=V" in order (later wins; entries without '=' or with a bad name are
/// dropped), then PORT=<port> (always wins), PATH defaulted, HOME defaulted to "/".
/// Returns InvalidArgument when Entrypoint and Cmd are both empty, when they or Env are not
/// arrays of strings, when WorkingDir is relative, when User is malformed, or for a NUL byte
/// in any argument or variable. A named User is kept in user_name/group_name for
/// ResolveUserNames.
Status DecideLaunch(const nlohmann::json& image_config, int port, LaunchSpec* out);

// --- Issue 15: sandboxes with limits ---
/// Default `stage_dir` of the local deploy sandbox.
inline constexpr char kLocalSandboxStageDir[] = "/run/kiln-deploy";

struct LocalSandboxOptions {
  /// The unprivileged host user bwrap runs as (nullopt: kiln's own uid, when kiln is not root).
  std::optional<SandboxUser> host_user;
  /// The ids the program gets when the image's User is absent or 0 (the host user's, or kiln's
  /// own uid when not root). Must not be 0.
  SandboxUser fallback{65534, 65534};
  SandboxLimits limits;
  /// An existing 0755 directory (see the file comment).
  std::string stage_dir = kLocalSandboxStageDir;
};

/// The program's uid/gid: the image's numeric User (and group) when non-zero, else `fallback`'s
/// (a zero image group also falls back). Never 0 when fallback has no 0.
SandboxUser ProgramIds(const LaunchSpec& spec, const SandboxUser& fallback);

/// The argv (["unshare" ... "setpriv" ...,] ["prlimit" ...,] "bwrap", options..., "--",
/// argv...) running `spec` with `rootfs` (a host directory) bound read-write as "/"; `info_fd`
/// is passed as --info-fd. Call DecideLaunch first; never fails.
std::vector<std::string> LocalSandboxArgv(const LaunchSpec& spec, const std::string& rootfs,
                                          int info_fd,
                                          const LocalSandboxOptions& opts = LocalSandboxOptions());

}  // namespace kiln
