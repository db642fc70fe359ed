#include "builder/sandbox_command.h"

#include <pwd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <map>
#include <utility>

#include "common/names.h"

namespace kiln {
namespace {

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

bool ValidEnvName(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> MergedUsrSymlinks() {
  return {{"usr/bin", "/bin"}, {"usr/lib", "/lib"}, {"usr/lib64", "/lib64"}, {"usr/sbin", "/sbin"}};
}

Status ValidateSandboxSpec(const SandboxSpec& spec) {
  if (!IsNormalizedAbsolutePath(spec.workspace) || spec.workspace == "/") {
    return Status::InvalidArgument("sandbox workspace must be a normalized absolute directory");
  }
  if (spec.command.empty() || spec.command[0].empty()) {
    return Status::InvalidArgument("sandbox command is empty");
  }
  for (const std::string& a : spec.command) {
    if (HasNul(a)) return Status::InvalidArgument("sandbox command contains a NUL byte");
  }
  for (const auto& [k, v] : spec.env) {
    if (!ValidEnvName(k)) return Status::InvalidArgument("invalid environment variable name");
    if (HasNul(v)) return Status::InvalidArgument("environment value of " + k + " has a NUL byte");
  }
  for (const auto& [k, dir] : spec.caches) {
    if (!ValidEnvName(k)) return Status::InvalidArgument("invalid cache variable name");
    if (!IsNormalizedAbsolutePath(dir) || dir == "/") {
      return Status::InvalidArgument("cache " + k + " must be a normalized absolute directory");
    }
  }
  for (const std::string& b : spec.ro_binds) {
    if (!IsNormalizedAbsolutePath(b) || b == "/") {
      return Status::InvalidArgument("read-only bind must be a normalized absolute path below /");
    }
  }
  for (const auto& [target, link] : spec.symlinks) {
    if (HasNul(target) || target.empty() || !IsNormalizedAbsolutePath(link) || link == "/") {
      return Status::InvalidArgument("invalid sandbox symlink");
    }
  }
  if (spec.user) {
    if (spec.user->uid == 0 || spec.user->gid == 0)
      return Status::InvalidArgument("the sandbox user must not be root (uid and gid 0 refused)");
    if (!IsNormalizedAbsolutePath(spec.stage_dir) || spec.stage_dir == "/")
      return Status::InvalidArgument("sandbox stage_dir must be a normalized absolute directory");
  }
  if (spec.limits.max_processes < 0 || spec.limits.max_memory_bytes < 0 ||
      spec.limits.max_file_bytes < 0)
    return Status::InvalidArgument("sandbox limits must not be negative");
  return Status::Ok();
}

std::vector<std::string> PrlimitArgv(const SandboxLimits& limits) {
  std::vector<std::string> a = {"prlimit"};
  auto add = [&](const char* opt, int64_t v) {
    if (v > 0) a.push_back(std::string(opt) + "=" + std::to_string(v) + ":" + std::to_string(v));
  };
  add("--nproc", limits.max_processes);
  add("--as", limits.max_memory_bytes);
  add("--fsize", limits.max_file_bytes);
  if (a.size() == 1) return {};
  return a;
}

std::vector<std::string> SetprivArgv(const SandboxUser& user) {
  return {"setpriv",
          "--reuid=" + std::to_string(user.uid),
          "--regid=" + std::to_string(user.gid),
          "--clear-groups",
          "--no-new-privs",
          "--pdeathsig",
          "SIGKILL",
          "--"};
}

Status LookupSandboxUser(const std::string& name, SandboxUser* out) {
  struct passwd pw;
  struct passwd* res = nullptr;
  char buf[4096];
  if (::getpwnam_r(name.c_str(), &pw, buf, sizeof buf, &res) != 0 || res == nullptr)
    return Status::Unavailable("sandbox user '" + name +
                               "' does not exist (scripts/setup.sh creates it; see "
                               "`kiln check-config`)");
  if (pw.pw_uid == 0 || pw.pw_gid == 0 || pw.pw_uid == ::geteuid())
    return Status::Unavailable("sandbox user '" + name + "' must be neither root nor kiln's uid");
  out->uid = pw.pw_uid;
  out->gid = pw.pw_gid;
  return Status::Ok();
}

std::string ShellQuoteArg(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::vector<std::string> BwrapArgv(const SandboxSpec& spec) {
  std::vector<std::string> a = {"bwrap", "--unshare-all"};
  if (spec.network) a.push_back("--share-net");
  // --unshare-all only *tries* a user namespace; require it, and forbid nested ones (a nested
  // user namespace would give the command capabilities over new namespaces it creates).
  a.insert(a.end(), {"--unshare-user", "--disable-userns"});
  a.insert(a.end(), {"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
                     "--hostname", "sandbox"});
  for (const std::string& b : spec.ro_binds) a.insert(a.end(), {"--ro-bind", b, b});
  for (const auto& [target, link] : spec.symlinks) a.insert(a.end(), {"--symlink", target, link});
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  // /tmp is memory: bounded, so a build step cannot fill the host's RAM through it.
  if (spec.tmp_size_bytes > 0) a.insert(a.end(), {"--size", std::to_string(spec.tmp_size_bytes)});
  a.insert(a.end(), {"--tmpfs", "/tmp"});
  // With a user, bwrap binds the staged copies (see the file comment) instead of the host paths.
  const std::string stage = spec.stage_dir;
  a.insert(a.end(), {"--bind", spec.user ? stage + "/w" : spec.workspace, kSandboxWorkspace});
  std::map<std::string, std::string> env = spec.env;
  for (const auto& [var, dir] : spec.caches) {
    std::string inside = std::string(kSandboxCacheRoot) + "/" + var;
    a.insert(a.end(), {"--bind", spec.user ? stage + "/c-" + var : dir, inside});
    env[var] = inside;
  }
  a.insert(a.end(), {"--chdir", kSandboxWorkspace});
  for (const auto& [k, v] : env) a.insert(a.end(), {"--setenv", k, v});
  a.push_back("--");
  a.insert(a.end(), spec.command.begin(), spec.command.end());
  return a;
}

SandboxLaunch SandboxLaunchFor(const SandboxSpec& spec) {
  SandboxLaunch l;
  l.argv = BwrapArgv(spec);
  ChildConfinement& c = l.confine;
  // Limits first (as root), inherited by bwrap and everything it starts.
  auto limit = [&](int resource, int64_t v) {
    if (v > 0) c.rlimits.emplace_back(resource, static_cast<uint64_t>(v));
  };
  limit(RLIMIT_NPROC, spec.limits.max_processes);
  limit(RLIMIT_AS, spec.limits.max_memory_bytes);
  limit(RLIMIT_FSIZE, spec.limits.max_file_bytes);
  if (!spec.user) return l;
  const std::string& stage = spec.stage_dir;
  c.new_mount_namespace = true;
  c.mounts.push_back(
      {"kiln-sandbox", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k", false});
  c.mounts.push_back({spec.workspace, stage + "/w", "", MS_BIND, "", true});
  for (const auto& [var, dir] : spec.caches)
    c.mounts.push_back({dir, stage + "/c-" + var, "", MS_BIND, "", true});
  c.user = std::make_pair(static_cast<uid_t>(spec.user->uid), static_cast<gid_t>(spec.user->gid));
  c.no_new_privs = true;
  return l;
}

}  // namespace kiln
