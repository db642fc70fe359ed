// LaunchSpec: how the local deploy target starts an image, decided from the image reference and
// the image config alone. Pure functions, no I/O; thread-safe.
//   - ParseImageRef: "<host:port>/<repository>@sha256:<hex>" -> parts.
//   - DecideLaunch: Entrypoint + Cmd as argv, Env plus PORT (and a default PATH), WorkingDir,
//     a numeric User -> what the candidate process runs.
//   - LocalSandboxArgv: the bubblewrap argv that runs a LaunchSpec with an extracted root as
//     "/" and nothing of the host: all namespaces unshared (loopback-only network), its own
//     /proc, a minimal /dev, a private /tmp, no capabilities, a new session, dies with kiln.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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

/// The bwrap argv ("bwrap", options..., "--", argv...) running `spec` with `rootfs` (a host
/// directory) bound read-write as "/"; `info_fd` is passed as --info-fd. Call DecideLaunch
/// first; never fails.
std::vector<std::string> LocalSandboxArgv(const LaunchSpec& spec, const std::string& rootfs,
                                          int info_fd);

}  // namespace kiln
