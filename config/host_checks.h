// Host checks for `kiln check-config` (docs/security.md): is this machine set up so that
// containerfile builds can run unprivileged and apart from kiln? Refuses (problems): a missing
// build user, a build user that is root or kiln's own uid, no /etc/subuid or /etc/subgid range
// of at least 65536 ids for it, user namespaces disabled, newuidmap/newgidmap missing or not
// setuid, a secret file (registry auth_file, kubeconfig, key files beside them or a ca_file)
// that other users can read or that kiln's uid does not own.
// Warns: a state directory that other users can enter (kiln tightens it to 0700 at start).
//
// Pure functions over a HostFacts snapshot (ProbeHost() reads the real machine), so the rules
// are unit-tested with fake facts. No shared state; thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/config_parser.h"

namespace kiln {

/// What the checks look at. Every field is filled by ProbeHost().
struct HostFacts {
  /// Looks up a user by name; false when there is none.
  std::function<bool(const std::string& name, uid_t* uid, gid_t* gid)> lookup_user;
  std::string subuid;                             // contents of /etc/subuid ("" when missing)
  std::string subgid;                             // contents of /etc/subgid
  std::optional<long> max_user_namespaces;        // /proc/sys/user/max_user_namespaces
  std::optional<long> unprivileged_userns_clone;  // /proc/sys/kernel/unprivileged_userns_clone
  bool newuidmap_setuid = false;  // /usr/bin/newuidmap exists, is root-owned and setuid
  bool newgidmap_setuid = false;
  uid_t kiln_uid = 0;  // the uid kiln runs as
  /// stat() of a path (follows symlinks); false when it does not exist.
  std::function<bool(const std::string& path, uid_t* owner, mode_t* mode)> stat_path;
  // --- issue 15: secret files beside a credential ---
  /// The names of the regular files in a directory (empty when unreadable); may be null.
  std::function<std::vector<std::string>(const std::string& dir)> list_dir;
  // --- end issue 15 ---
};

/// issue 15: the secret files `kiln check-config` checks the permissions of (and the builder
/// hides from builds), as config key -> file: every registry auth_file, every kubeconfig, and
/// the key files beside them and beside every ca_file (`*.key`, `*key.pem`, `*.p12`, `*.pfx`,
/// `token`; listed with facts.list_dir).
std::vector<std::pair<std::string, std::string>> SecretFiles(const Config& config,
                                                             const HostFacts& facts);

/// The names of the regular files in `dir` (what ProbeHost's list_dir does).
std::vector<std::string> ListRegularFiles(const std::string& dir);

/// Reads the facts of this machine. Never fails (missing files read as empty/absent).
HostFacts ProbeHost();

/// Problems (refuse) and warnings for `config` on a host with `facts`, as `path: reason`.
/// Paths name the config key concerned (e.g. `domains.epp.build.user`) or `host.<what>`.
void CheckBuildHost(const Config& config, const HostFacts& facts,
                    std::vector<ConfigProblem>* problems, std::vector<ConfigProblem>* warnings);

/// CheckConfigCommand with explicit host facts (tests); CheckConfigCommand uses ProbeHost().
int CheckConfigCommandWithFacts(const std::string& path, const HostFacts& facts, std::ostream& out,
                                std::ostream& err);

}  // namespace kiln
