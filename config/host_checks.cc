#include "config/host_checks.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/file_util.h"

namespace kiln {
namespace {

std::string ReadAll(const std::string& path) {
  std::string text;  // "" when missing
  ReadFile(path, &text);
  return text;
}

std::optional<long> ReadLong(const std::string& path) {
  std::ifstream in(path);
  long v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

bool SetuidRoot(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
         (st.st_mode & S_ISUID) != 0;
}

// Sum of the subordinate id counts /etc/sub[ug]id grants `name` (or its numeric id).
long SubordinateCount(const std::string& text, const std::string& name, uid_t id) {
  std::istringstream in(text);
  std::string line;
  long total = 0;
  const std::string idstr = std::to_string(id);
  while (std::getline(in, line)) {
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string who = line.substr(0, a);
    if (who != name && who != idstr) continue;
    try {
      long count = std::stol(line.substr(b + 1));
      if (count > 0) total += count;
    } catch (...) {
    }
  }
  return total;
}

std::string Octal(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

}  // namespace

HostFacts ProbeHost() {
  HostFacts f;
  f.lookup_user = [](const std::string& name, uid_t* uid, gid_t* gid) {
    struct passwd pw;
    struct passwd* res = nullptr;
    char buf[4096];
    if (::getpwnam_r(name.c_str(), &pw, buf, sizeof buf, &res) != 0 || res == nullptr) return false;
    *uid = pw.pw_uid;
    *gid = pw.pw_gid;
    return true;
  };
  f.subuid = ReadAll("/etc/subuid");
  f.subgid = ReadAll("/etc/subgid");
  f.max_user_namespaces = ReadLong("/proc/sys/user/max_user_namespaces");
  f.unprivileged_userns_clone = ReadLong("/proc/sys/kernel/unprivileged_userns_clone");
  f.newuidmap_setuid = SetuidRoot("/usr/bin/newuidmap");
  f.newgidmap_setuid = SetuidRoot("/usr/bin/newgidmap");
  f.kiln_uid = ::geteuid();
  f.stat_path = [](const std::string& path, uid_t* owner, mode_t* mode) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return false;
    *owner = st.st_uid;
    *mode = st.st_mode;
    return true;
  };
  f.list_dir = ListRegularFiles;
  return f;
}

std::vector<std::string> ListRegularFiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::end(it); it.increment(ec)) {
    std::error_code sec;
    if (it->is_regular_file(sec)) names.push_back(it->path().filename().string());
  }
  return names;
}

std::vector<std::pair<std::string, std::string>> SecretFiles(const Config& config,
                                                             const HostFacts& facts) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& key, const std::string& file) {
    if (seen.insert(file).second) out.emplace_back(key, file);
  };
  auto beside = [&](const std::string& key, const std::string& file) {
    if (!facts.list_dir) return;
    std::string dir = std::filesystem::path(file).parent_path().string();
    if (dir.empty() || dir == "/") return;
    for (const std::string& n : facts.list_dir(dir)) {
      auto ends = [&](const std::string& suf) {
        return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
      };
      if (ends(".key") || ends("key.pem") || ends(".p12") || ends(".pfx") || n == "token")
        add(key + " (key file beside it)", dir + "/" + n);
    }
  };
  for (const auto& [name, r] : config.registries) {
    const std::string key = "registries." + name;
    if (r.auth_file) add(key + ".auth_file", *r.auth_file);
  }
  for (const auto& [name, d] : config.domains)
    if (d.deploy.kubernetes && d.deploy.kubernetes->kubeconfig)
      add("domains." + name + ".deploy.kubernetes.kubeconfig", *d.deploy.kubernetes->kubeconfig);
  for (const auto& [name, r] : config.registries) {
    const std::string key = "registries." + name;
    if (r.auth_file) beside(key + ".auth_file", *r.auth_file);
    if (r.ca_file) beside(key + ".ca_file", *r.ca_file);
  }
  for (const auto& [name, d] : config.domains)
    if (d.deploy.kubernetes && d.deploy.kubernetes->kubeconfig)
      beside("domains." + name + ".deploy.kubernetes.kubeconfig", *d.deploy.kubernetes->kubeconfig);
  return out;
}

void CheckBuildHost(const Config& config, const HostFacts& facts,
                    std::vector<ConfigProblem>* problems, std::vector<ConfigProblem>* warnings) {
  constexpr long kMinSubIds = 65536;
  bool any_containerfile = false;
  std::set<std::string> users_checked;
  for (const auto& [name, d] : config.domains) {
    if (d.build.mode != "containerfile") continue;
    any_containerfile = true;
    const std::string path = "domains." + name + ".build.user";
    const std::string& user = d.build.user;
    uid_t uid = 0;
    gid_t gid = 0;
    if (!facts.lookup_user || !facts.lookup_user(user, &uid, &gid)) {
      problems->push_back(
          {path, "build user '" + user + "' does not exist (scripts/setup.sh creates kiln-build)"});
      continue;
    }
    if (uid == 0 || gid == 0) {
      problems->push_back(
          {path, "build user '" + user + "' is root: builds must run unprivileged"});
      continue;
    }
    if (uid == facts.kiln_uid) {
      problems->push_back(
          {path, "build user '" + user + "' is kiln's own uid: builds must run apart from kiln"});
      continue;
    }
    if (!users_checked.insert(user).second) continue;
    if (SubordinateCount(facts.subuid, user, uid) < kMinSubIds)
      problems->push_back({path, "build user '" + user +
                                     "' has no /etc/subuid range of at least 65536 ids "
                                     "(usermod --add-subuids; scripts/setup.sh does it)"});
    if (SubordinateCount(facts.subgid, user, uid) < kMinSubIds)
      problems->push_back({path, "build user '" + user +
                                     "' has no /etc/subgid range of at least 65536 ids "
                                     "(usermod --add-subgids; scripts/setup.sh does it)"});
  }
  if (any_containerfile) {
    if (!facts.newuidmap_setuid || !facts.newgidmap_setuid)
      problems->push_back({"host.uidmap",
                           "/usr/bin/newuidmap and /usr/bin/newgidmap must exist and be setuid "
                           "root (Debian package uidmap)"});
  }
  // Both modes rely on user namespaces (rootless buildah; bubblewrap's --unshare-user).
  if (!facts.max_user_namespaces || *facts.max_user_namespaces <= 0)
    problems->push_back(
        {"host.user_namespaces",
         "user namespaces are disabled (sysctl user.max_user_namespaces must be > 0)"});
  if (facts.unprivileged_userns_clone && *facts.unprivileged_userns_clone != 1)
    problems->push_back({"host.user_namespaces",
                         "unprivileged user namespaces are disabled "
                         "(sysctl kernel.unprivileged_userns_clone must be 1)"});
  // issue 15: every secret file kiln reads (and hides from builds), not just auth files.
  for (const auto& [path, file] : SecretFiles(config, facts)) {
    if (!facts.stat_path) break;
    uid_t owner = 0;
    mode_t mode = 0;
    if (!facts.stat_path(file, &owner, &mode)) continue;  // the parser reports missing ones
    if (mode & 077)
      problems->push_back({path, "'" + file + "' has mode " + Octal(mode) +
                                     ": other users could read kiln's credential (chmod 600)"});
    if (owner != facts.kiln_uid)
      problems->push_back({path, "'" + file + "' is owned by uid " + std::to_string(owner) +
                                     ", not kiln's uid " + std::to_string(facts.kiln_uid)});
  }
  if (!config.server.state_dir.empty() && facts.stat_path) {
    uid_t owner = 0;
    mode_t mode = 0;
    if (facts.stat_path(config.server.state_dir, &owner, &mode)) {
      if (mode & 077)
        warnings->push_back({"server.state_dir", "'" + config.server.state_dir + "' has mode " +
                                                     Octal(mode) +
                                                     "; kiln tightens it to 0700 at start"});
      if (owner != facts.kiln_uid)
        problems->push_back({"server.state_dir", "'" + config.server.state_dir +
                                                     "' is owned by uid " + std::to_string(owner) +
                                                     ", not kiln's uid " +
                                                     std::to_string(facts.kiln_uid)});
    }
  }
}

}  // namespace kiln
