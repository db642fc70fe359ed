#include "deploy/launch_spec.h"

#include "common/names.h"
#include "common/sha256.h"

namespace kiln {
namespace {

using json = nlohmann::json;

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

bool ValidEnvName(const std::string& n) {
  if (n.empty() || !(isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// A JSON array of strings (or null/missing) -> vector.
Status Strings(const json& cfg, const char* key, std::vector<std::string>* out) {
  out->clear();
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return Status::Ok();
  if (!it->is_array())
    return Status::InvalidArgument(std::string("image config: ") + key + " is not an array");
  for (const auto& v : *it) {
    if (!v.is_string())
      return Status::InvalidArgument(std::string("image config: ") + key + " has a non-string");
    if (HasNul(v.get<std::string>()))
      return Status::InvalidArgument(std::string("image config: NUL byte in ") + key);
    out->push_back(v.get<std::string>());
  }
  return Status::Ok();
}

bool ParseId(const std::string& s, uint32_t* v) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *v = static_cast<uint32_t>(std::stoul(s));
  return true;
}

}  // namespace

Status ParseImageRef(const std::string& ref, ImageRef* out) {
  size_t at = ref.find('@');
  size_t slash = ref.find('/');
  if (at == std::string::npos || slash == std::string::npos || slash == 0 || slash > at)
    return Status::InvalidArgument("image must be <host:port>/<repository>@sha256:<hex>: " + ref);
  std::string digest = ref.substr(at + 1);
  if (!IsSha256Digest(digest))
    return Status::InvalidArgument("image must be pinned by a sha256 digest: " + ref);
  std::string repo = ref.substr(slash + 1, at - slash - 1);
  if (!IsNormalizedRelativePath(repo) || repo.find(':') != std::string::npos)
    return Status::InvalidArgument("bad repository in image reference: " + ref);
  out->host = ref.substr(0, slash);
  out->repository = repo;
  out->digest = digest;
  return Status::Ok();
}

Status DecideLaunch(const json& image_config, int port, LaunchSpec* out) {
  if (!image_config.is_object())
    return Status::InvalidArgument("image config is not a JSON object");
  static const json kEmpty = json::object();
  auto it = image_config.find("config");
  const json& c = (it != image_config.end() && it->is_object()) ? *it : kEmpty;
  LaunchSpec spec;
  std::vector<std::string> entry, cmd, env;
  if (Status st = Strings(c, "Entrypoint", &entry); !st.ok()) return st;
  if (Status st = Strings(c, "Cmd", &cmd); !st.ok()) return st;
  if (Status st = Strings(c, "Env", &env); !st.ok()) return st;
  spec.argv = entry;
  spec.argv.insert(spec.argv.end(), cmd.begin(), cmd.end());
  if (spec.argv.empty())
    return Status::InvalidArgument("image config has neither Entrypoint nor Cmd");
  for (const auto& kv : env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || !ValidEnvName(kv.substr(0, eq))) continue;
    spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  spec.env["PORT"] = std::to_string(port);
  spec.env.emplace("PATH", kDefaultPath);
  spec.env.emplace("HOME", "/");
  if (auto w = c.find("WorkingDir");
      w != c.end() && w->is_string() && !w->get<std::string>().empty()) {
    std::string wd = w->get<std::string>();
    if (wd.front() != '/' || HasNul(wd))
      return Status::InvalidArgument("image config: WorkingDir must be absolute");
    spec.cwd = wd;
  }
  if (auto u = c.find("User"); u != c.end() && u->is_string()) {
    std::string user = u->get<std::string>();
    size_t colon = user.find(':');
    std::string uid = user.substr(0, colon);
    std::string gid = colon == std::string::npos ? "" : user.substr(colon + 1);
    uint32_t v = 0;
    if (user.empty() || user == "root" || user == "0") {
      // root: the default
    } else if (ParseId(uid, &v)) {
      spec.uid = v;
      spec.gid = v;
      if (colon != std::string::npos) {
        if (!ParseId(gid, &v))
          return Status::InvalidArgument("image config: User group must be numeric: " + user);
        spec.gid = v;
      }
    } else if (!uid.empty() && HasNul(user) == false && uid.find('/') == std::string::npos) {
      spec.user_name = uid;
      if (colon != std::string::npos) {
        if (ParseId(gid, &v))
          spec.gid = v;
        else if (!gid.empty())
          spec.group_name = gid;
        else
          return Status::InvalidArgument("image config: User has an empty group: " + user);
      }
    } else {
      return Status::InvalidArgument("image config: malformed User: " + user);
    }
  }
  *out = std::move(spec);
  return Status::Ok();
}

namespace {

// Finds `name` in a passwd/group style file: fields separated by ':', the name first and the
// numeric id third. Returns the line's fields, or empty when absent.
std::vector<std::string> FindEntry(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string> f;
    size_t a = 0;
    while (true) {
      size_t b = line.find(':', a);
      f.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    if (f.size() >= 3 && f[0] == name) return f;
  }
  return {};
}

}  // namespace

Status ResolveUserNames(const std::string& passwd, const std::string& group, LaunchSpec* spec) {
  uint32_t v = 0;
  if (!spec->user_name.empty()) {
    auto f = FindEntry(passwd, spec->user_name);
    if (f.size() < 4 || !ParseId(f[2], &v))
      return Status::InvalidArgument("image config: User '" + spec->user_name +
                                     "' is not in the image's /etc/passwd");
    spec->uid = v;
    if (!spec->gid) {
      if (!ParseId(f[3], &v))
        return Status::InvalidArgument("image config: /etc/passwd entry of '" + spec->user_name +
                                       "' has no numeric group");
      spec->gid = v;
    }
  }
  if (!spec->group_name.empty()) {
    auto f = FindEntry(group, spec->group_name);
    if (f.size() < 3 || !ParseId(f[2], &v))
      return Status::InvalidArgument("image config: group '" + spec->group_name +
                                     "' is not in the image's /etc/group");
    spec->gid = v;
  }
  return Status::Ok();
}

SandboxUser ProgramIds(const LaunchSpec& spec, const SandboxUser& fallback) {
  SandboxUser ids = fallback;
  if (spec.uid && *spec.uid != 0) {
    ids.uid = *spec.uid;
    if (spec.gid && *spec.gid != 0) ids.gid = *spec.gid;
  }
  return ids;
}

std::vector<std::string> LocalSandboxArgv(const LaunchSpec& spec, const std::string& rootfs,
                                          int info_fd, const LocalSandboxOptions& opts) {
  // Named after the root's directory, so `ps` tells the candidates apart.
  const std::string staged = opts.stage_dir + "/" + rootfs.substr(rootfs.find_last_of('/') + 1);
  std::vector<std::string> a = {"bwrap", "--unshare-all", "--unshare-user",
                                // no nested user namespaces: they would give the program
                                // capabilities over namespaces it creates.
                                "--disable-userns", "--die-with-parent", "--new-session",
                                "--cap-drop", "ALL", "--bind", opts.host_user ? staged : rootfs,
                                "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                                "--hostname", "candidate", "--clearenv"};
  for (const auto& [k, v] : spec.env) {
    a.insert(a.end(), {"--setenv", k, v});
  }
  const SandboxUser ids = ProgramIds(spec, opts.fallback);
  a.insert(a.end(), {"--uid", std::to_string(ids.uid), "--gid", std::to_string(ids.gid)});
  a.insert(a.end(), {"--chdir", spec.cwd, "--info-fd", std::to_string(info_fd), "--"});
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  std::vector<std::string> out;
  if (opts.host_user) {
    auto q = ShellQuoteArg;
    const std::string setup =
        "set -eu\n"
        "fail() { echo \"kiln: the candidate sandbox could not be set up\" >&2; exit 125; }\n"
        "trap fail EXIT\n"
        "mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev kiln-sandbox " +
        q(opts.stage_dir) + "\nmkdir " + q(staged) + "\nmount --bind " + q(rootfs) + " " +
        q(staged) + "\ntrap - EXIT\nexec \"$@\"\n";
    out = {"unshare", "--mount", "--propagation", "private",
           "/bin/sh", "-c",      setup,           "kiln-sandbox"};
  }
  std::vector<std::string> lim = PrlimitArgv(opts.limits);
  out.insert(out.end(), lim.begin(), lim.end());
  if (opts.host_user) {
    std::vector<std::string> sp = SetprivArgv(*opts.host_user);
    out.insert(out.end(), sp.begin(), sp.end());
  }
  out.insert(out.end(), a.begin(), a.end());
  return out;
}

}  // namespace kiln
