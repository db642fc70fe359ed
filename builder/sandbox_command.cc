#include "builder/sandbox_command.h"

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
  return Status::Ok();
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
  a.insert(a.end(), {"--bind", spec.workspace, kSandboxWorkspace});
  std::map<std::string, std::string> env = spec.env;
  for (const auto& [var, dir] : spec.caches) {
    std::string inside = std::string(kSandboxCacheRoot) + "/" + var;
    a.insert(a.end(), {"--bind", dir, inside});
    env[var] = inside;
  }
  a.insert(a.end(), {"--chdir", kSandboxWorkspace});
  for (const auto& [k, v] : env) a.insert(a.end(), {"--setenv", k, v});
  a.push_back("--");
  a.insert(a.end(), spec.command.begin(), spec.command.end());
  return a;
}

}  // namespace kiln
