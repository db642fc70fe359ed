// Unit tests of the check-config host checks (config/host_checks.h) with fake host facts.
#include "config/host_checks.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <set>

namespace kiln {
namespace {

struct FakeHost {
  std::map<std::string, std::pair<uid_t, gid_t>> users = {{"kiln-build", {999, 995}}};
  std::map<std::string, std::pair<uid_t, mode_t>> files = {
      {"/etc/kiln/auth.json", {0, S_IFREG | 0600}}, {"/var/lib/kiln", {0, S_IFDIR | 0700}}};
  HostFacts Facts() const {
    HostFacts f;
    auto users_copy = users;
    f.lookup_user = [users_copy](const std::string& n, uid_t* u, gid_t* g) {
      auto it = users_copy.find(n);
      if (it == users_copy.end()) return false;
      *u = it->second.first;
      *g = it->second.second;
      return true;
    };
    f.subuid = "someone:100000:65536\nkiln-build:165536:65536\n";
    f.subgid = "someone:100000:65536\n999:165536:65536\n";  // by uid works too
    f.max_user_namespaces = 63000;
    f.newuidmap_setuid = f.newgidmap_setuid = true;
    f.kiln_uid = 0;
    auto files_copy = files;
    f.stat_path = [files_copy](const std::string& p, uid_t* o, mode_t* m) {
      auto it = files_copy.find(p);
      if (it == files_copy.end()) return false;
      *o = it->second.first;
      *m = it->second.second;
      return true;
    };
    return f;
  }
};

Config OneDomain(const std::string& mode) {
  Config c;
  c.server.state_dir = "/var/lib/kiln";
  c.registries["local"] = RegistryConfig{"local", "http://127.0.0.1:5000",
                                         std::string("/etc/kiln/auth.json"), std::nullopt};
  DomainConfig d;
  d.name = "app";
  d.build.mode = mode;
  c.domains["app"] = d;
  return c;
}

std::string Check(const Config& c, const HostFacts& f,
                  std::vector<ConfigProblem>* warnings = nullptr) {
  std::vector<ConfigProblem> problems, w;
  CheckBuildHost(c, f, &problems, &w);
  if (warnings) *warnings = w;
  std::string s;
  for (const auto& p : problems) s += FormatConfigProblem(p) + "\n";
  return s;
}

TEST(HostChecks, SafeHostHasNoProblems) {
  FakeHost h;
  std::vector<ConfigProblem> w;
  EXPECT_EQ(Check(OneDomain("containerfile"), h.Facts(), &w), "");
  EXPECT_TRUE(w.empty());
}

TEST(HostChecks, MissingBuildUserIsRefused) {
  FakeHost h;
  h.users.clear();
  std::string out = Check(OneDomain("containerfile"), h.Facts());
  EXPECT_NE(out.find("domains.app.build.user: build user 'kiln-build' does not exist"),
            std::string::npos)
      << out;
  // Layered builds do not use the build user.
  EXPECT_EQ(Check(OneDomain("layered"), h.Facts()), "");
}

TEST(HostChecks, RootOrKilnUidAsBuildUserIsRefused) {
  FakeHost h;
  h.users["kiln-build"] = {0, 0};
  EXPECT_NE(Check(OneDomain("containerfile"), h.Facts()).find("is root"), std::string::npos);
  h.users["kiln-build"] = {1000, 1000};
  HostFacts f = h.Facts();
  f.kiln_uid = 1000;
  EXPECT_NE(Check(OneDomain("containerfile"), f).find("kiln's own uid"), std::string::npos);
}

TEST(HostChecks, MissingOrSmallSubordinateRangesAreRefused) {
  FakeHost h;
  HostFacts f = h.Facts();
  f.subuid = "kiln-build:100000:1000\n";
  f.subgid = "";
  std::string out = Check(OneDomain("containerfile"), f);
  EXPECT_NE(out.find("no /etc/subuid range"), std::string::npos) << out;
  EXPECT_NE(out.find("no /etc/subgid range"), std::string::npos) << out;
}

TEST(HostChecks, DisabledUserNamespacesAreRefused) {
  FakeHost h;
  HostFacts f = h.Facts();
  f.max_user_namespaces = 0;
  EXPECT_NE(
      Check(OneDomain("layered"), f).find("host.user_namespaces: user namespaces are disabled"),
      std::string::npos);
  f = h.Facts();
  f.unprivileged_userns_clone = 0;
  EXPECT_NE(Check(OneDomain("containerfile"), f).find("kernel.unprivileged_userns_clone"),
            std::string::npos);
  f = h.Facts();
  f.newuidmap_setuid = false;
  EXPECT_NE(Check(OneDomain("containerfile"), f).find("host.uidmap"), std::string::npos);
}

TEST(HostChecks, CredentialAndStateDirPermissions) {
  FakeHost h;
  h.files["/etc/kiln/auth.json"] = {0, S_IFREG | 0644};
  h.files["/var/lib/kiln"] = {0, S_IFDIR | 0755};
  std::vector<ConfigProblem> w;
  std::string out = Check(OneDomain("containerfile"), h.Facts(), &w);
  EXPECT_NE(out.find("registries.local.auth_file: '/etc/kiln/auth.json' has mode 0644"),
            std::string::npos)
      << out;
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, "server.state_dir");
  h.files["/etc/kiln/auth.json"] = {1000, S_IFREG | 0600};
  out = Check(OneDomain("containerfile"), h.Facts());
  EXPECT_NE(out.find("owned by uid 1000"), std::string::npos) << out;
}

// --- issue 15: every secret file, not just auth files ---
TEST(HostChecks, KubeconfigAndKeyFilesBesideCredentialsArePermissionChecked) {
  FakeHost h;
  Config c = OneDomain("containerfile");
  c.registries["local"].ca_file = "/etc/kiln/tls/ca.crt";
  DomainConfig d;
  d.name = "epp";
  d.deploy.type = "kubernetes";
  d.deploy.kubernetes.emplace();
  d.deploy.kubernetes->kubeconfig = "/etc/kube/config";
  c.domains["epp"] = d;
  h.files["/etc/kube/config"] = {0, S_IFREG | 0644};
  h.files["/etc/kube/client.key"] = {1000, S_IFREG | 0600};
  h.files["/etc/kiln/tls/ca.crt"] = {0, S_IFREG | 0644};  // a CA certificate is public
  h.files["/etc/kiln/tls/tls-key.pem"] = {0, S_IFREG | 0640};
  HostFacts f = h.Facts();
  f.list_dir = [](const std::string& dir) {
    if (dir == "/etc/kube") return std::vector<std::string>{"config", "client.key", "README"};
    if (dir == "/etc/kiln/tls") return std::vector<std::string>{"ca.crt", "tls-key.pem"};
    if (dir == "/etc/kiln") return std::vector<std::string>{"auth.json"};
    return std::vector<std::string>{};
  };
  std::string out = Check(c, f);
  EXPECT_NE(out.find("domains.epp.deploy.kubernetes.kubeconfig: '/etc/kube/config' has mode 0644"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("'/etc/kube/client.key' is owned by uid 1000"), std::string::npos) << out;
  EXPECT_NE(out.find("registries.local.ca_file (key file beside it): '/etc/kiln/tls/tls-key.pem' "
                     "has mode 0640"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("ca.crt"), std::string::npos) << out;
  EXPECT_EQ(out.find("README"), std::string::npos) << out;
  auto files = SecretFiles(c, f);
  std::set<std::string> names;
  for (const auto& [key, file] : files) names.insert(file);
  EXPECT_EQ(names, (std::set<std::string>{"/etc/kiln/auth.json", "/etc/kube/config",
                                          "/etc/kube/client.key", "/etc/kiln/tls/tls-key.pem"}));
}
// --- end issue 15 ---

}  // namespace
}  // namespace kiln
