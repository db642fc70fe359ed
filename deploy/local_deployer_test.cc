// Integration test of the local deploy target: a real docker-registry with htpasswd auth
// (scripts/registry.sh, port 5110), images made here from busybox-static with LayerWriter and
// pushed with RegistryClient, bubblewrap sandboxes and the host-port forwarder (19101-19110).
#include "deploy/local_deployer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "builder/layer_writer.h"
#include "builder/sandbox_command.h"
#include "common/sha256.h"
#include "deploy/launch_spec.h"
#include "deploy/sandbox_process.h"
#include "deploy/testing_tar.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr int kRegistryPort = 5110;
constexpr char kRepo[] = "kiln/local-deploy-test";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// GET http://127.0.0.1:<port><path> on the host; status 0 when the connection failed.
std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return {0, ""};
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
    resp.append(buf, static_cast<size_t>(n));
  close(fd);
  if (resp.size() < 12 || resp.compare(0, 5, "HTTP/") != 0) return {0, resp};
  int code = std::atoi(resp.substr(9, 3).c_str());
  size_t body = resp.find("\r\n\r\n");
  return {code, body == std::string::npos ? "" : resp.substr(body + 4)};
}

// pid -> cmdline of every process whose command line mentions `needle` (our sandboxes carry
// their root directory in bwrap's argv).
std::map<pid_t, std::string> ProcessesMentioning(const std::string& needle) {
  std::map<pid_t, std::string> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadFile(e.path() / "cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos) out[std::stoi(name)] = cmd;
  }
  return out;
}

std::string Dump(const std::map<pid_t, std::string>& procs) {
  std::string out;
  for (const auto& [pid, cmd] : procs)
    out += std::to_string(pid) + ": " + cmd.substr(0, 200) + "\n";
  return out;
}

struct Images {
  std::string a, b, crash, unhealthy, hostile, probe, stubborn, nobinary;
};

// Registry + images shared by all tests.
class Registry : public ::testing::Environment {
 public:
  static inline std::string dir, url, auth_file, outside;
  static inline Images images;
  static inline bool ready = false;

  void SetUp() override {
    char tmpl[] = "/tmp/kiln-local-deploy-XXXXXX";
    dir = mkdtemp(tmpl);
    outside = dir + "/outside";
    fs::create_directories(outside);
    std::string cmd = std::string(KILN_REGISTRY_SCRIPT) + " start --dir " + dir +
                      "/registry --port " + std::to_string(kRegistryPort) + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    ASSERT_EQ(pclose(p), 0) << out;
    std::map<std::string, std::string> kv;
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);)
      if (auto eq = l.find('='); eq != std::string::npos) kv[l.substr(0, eq)] = l.substr(eq + 1);
    url = kv["url"];
    auth_file = kv["auth_file"];
    ASSERT_FALSE(url.empty()) << out;
    ASSERT_NO_FATAL_FAILURE(PushImages());
    ready = true;
  }

  void TearDown() override {
    std::string cmd =
        std::string(KILN_REGISTRY_SCRIPT) + " stop --dir " + dir + "/registry >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    fs::remove_all(dir);
  }

 private:
  static LayerBlob Layer(const std::vector<std::pair<std::string, std::string>>& files) {
    fs::path ws = dir + "/ws";
    fs::remove_all(ws);
    std::vector<LayerEntry> entries;
    for (const auto& [to, content] : files) {
      fs::path from = ws / fs::path(to).relative_path();
      fs::create_directories(from.parent_path());
      std::ofstream(from, std::ios::binary) << content;
      if (to.rfind("/bin/", 0) == 0) fs::permissions(from, fs::perms(0755));
      entries.push_back({fs::path(to).relative_path().string(), to});
    }
    LayerBlob b;
    EXPECT_TRUE(WriteLayer(ws.string(), entries, 1, &b).ok());
    return b;
  }

  static LayerBlob Raw(const std::string& tar) {
    LayerBlob b;
    b.data = tar;
    b.digest = "sha256:" + Sha256Hex(tar);
    b.diff_id = b.digest;
    b.size = tar.size();
    return b;
  }

  // Pushes base + layers with `cmd` as Entrypoint; returns the image by digest.
  static std::string Push(RegistryClient* c, const std::vector<LayerBlob>& layers,
                          const json& entrypoint, const std::string& tag) {
    json cfg = {{"architecture", "amd64"},
                {"os", "linux"},
                {"config",
                 {{"Entrypoint", entrypoint},
                  {"Env", {"PATH=/bin", "GREETING=hello"}},
                  {"WorkingDir", "/www"}}},
                {"rootfs", {{"type", "layers"}, {"diff_ids", json::array()}}}};
    json mlayers = json::array();
    for (const auto& l : layers) {
      cfg["rootfs"]["diff_ids"].push_back(l.diff_id);
      bool gz = l.data.size() > 1 && static_cast<unsigned char>(l.data[0]) == 0x1f;
      mlayers.push_back({{"mediaType", gz ? "application/vnd.oci.image.layer.v1.tar+gzip"
                                          : "application/vnd.oci.image.layer.v1.tar"},
                         {"digest", l.digest},
                         {"size", l.size}});
      bool exists = false;
      EXPECT_TRUE(c->BlobExists(kRepo, l.digest, &exists).ok());
      if (!exists) {
        EXPECT_TRUE(c->PutBlob(kRepo, l.digest, l.data).ok());
      }
    }
    std::string cfgs = cfg.dump();
    std::string cfgd = "sha256:" + Sha256Hex(cfgs);
    EXPECT_TRUE(c->PutBlob(kRepo, cfgd, cfgs).ok());
    json m = {{"schemaVersion", 2},
              {"mediaType", kOciManifestType},
              {"config",
               {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                {"digest", cfgd},
                {"size", cfgs.size()}}},
              {"layers", mlayers}};
    std::string digest;
    Status st = c->PutManifest(kRepo, tag, kOciManifestType, m.dump(), &digest);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c->host() + "/" + kRepo + "@" + digest;
  }

  static void PushImages() {
    RegistryClient c({url, auth_file, std::nullopt});
    LayerBlob base = Layer({{"/bin/busybox", ReadFile("/bin/busybox")}});
    ASSERT_GT(base.size, 100000u);
    const json httpd = {"/bin/busybox", "sh", "-c",
                        "exec /bin/busybox httpd -f -p 127.0.0.1:$PORT -h /www"};
    images.a = Push(&c, {base, Layer({{"/www/healthz", "ok"}, {"/www/version", "A"}})}, httpd, "a");
    images.b = Push(&c, {base, Layer({{"/www/healthz", "ok"}, {"/www/version", "B"}})}, httpd, "b");
    images.crash = Push(
        &c, {base}, {"/bin/busybox", "sh", "-c", "echo 'fatal: missing DATABASE_URL' >&2; exit 3"},
        "crash");
    images.nobinary = Push(&c, {base}, {"/bin/no-such-server"}, "nobinary");
    images.unhealthy =
        Push(&c, {base, Layer({{"/www/version", "D"}})}, httpd, "unhealthy");  // no /healthz: 404
    // Hostile layer: "../" names and a write through an absolute symlink to a host directory.
    std::string tar = testing_tar::TarBuilder()
                          .File("../escape-kiln-local", "x")
                          .File("../../../../../tmp/escape-kiln-local", "x")
                          .Symlink("hostdir", outside)
                          .File("hostdir/pwned", "x")
                          .Symlink("www/etc-link", "/etc")
                          .File("www/etc-link/pwned-kiln", "x")
                          .Device("www/sda", '4')
                          .Tar();
    images.hostile =
        Push(&c, {base, Layer({{"/www/healthz", "ok"}, {"/www/version", "H"}}), Raw(tar)}, httpd,
             "hostile");
    // Ignores SIGTERM (inherited by httpd through exec): only SIGKILL after the grace stops it,
    // and a background child that also outlives a polite stop.
    images.stubborn = Push(&c, {base, Layer({{"/www/healthz", "ok"}, {"/www/version", "S"}})},
                           {"/bin/busybox", "sh", "-c",
                            "trap '' TERM; /bin/busybox sleep 1000 & exec /bin/busybox httpd -f -p "
                            "127.0.0.1:$PORT -h /www"},
                           "stubborn");
    // Writes what it sees of the world into /www, then serves it.
    images.probe = Push(
        &c, {base, Layer({{"/www/healthz", "ok"}})},
        {"/bin/busybox", "sh", "-c",
         "B=/bin/busybox; $B ls / > /www/root; $B env > /www/env; $B cat /proc/self/status > "
         "/www/status;"
         " $B ls /sys/class/net > /www/net 2>&1; $B ip -o link > /www/links 2>&1; $B ps -o "
         "pid,args > /www/ps;"
         " $B hostname > /www/hostname; $B id -u > /www/uid;"
         " if $B unshare -U $B true 2>/dev/null; then echo yes; else echo no; fi > /www/userns;"
         " exec $B httpd -f -p 127.0.0.1:$PORT -h /www"},
        "probe");
  }
};

class LocalDeployerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Registry::ready) << "registry/images set-up failed"; }

  std::unique_ptr<LocalDeployer> Make(int port, LocalDeployerOptions opts = {},
                                      LocalDeploy cfg = {}) {
    work_ = Registry::dir + "/work-" + std::to_string(port);
    if (opts.start_timeout == std::chrono::milliseconds(30000)) opts.start_timeout = 10s;
    opts.stop_grace = 2s;
    opts.poll_interval = 50ms;
    cfg.port = port;
    cfg.health_path = "/healthz";
    return std::make_unique<LocalDeployer>(
        "demo", cfg, RegistryEndpoint{Registry::url, Registry::auth_file, std::nullopt}, work_,
        opts);
  }

  DeployResult Deploy(LocalDeployer* d, const std::string& image,
                      std::vector<std::string>* lines = nullptr,
                      const CancelToken* cancel = nullptr) {
    DeployRequest req;
    req.deploy_id = "d-demo-" + std::to_string(++n_);
    req.domain = "demo";
    req.candidate = "c1";
    req.image = image;
    req.digest = image.substr(image.find('@') + 1);
    return d->Deploy(
        req,
        [lines](const std::string& l) {
          if (lines) lines->push_back(l);
        },
        cancel);
  }

  std::string Serving(LocalDeployer* d) {
    std::string img;
    EXPECT_TRUE(d->Current(&img).ok());
    return img;
  }

  // What the candidates' bwrap argv names: their staged root (kiln as root, Issue 15) or the
  // root under work_ itself.
  std::string RootsNeedle() const {
    return ::geteuid() == 0 ? std::string(kLocalSandboxStageDir) + "/" : work_ + "/rootfs/";
  }

  std::string work_;
  int n_ = 0;
};

TEST_F(LocalDeployerTest, RollsOutReplacesAndIsIdempotent) {
  auto d = Make(19101);
  std::vector<std::string> lines;
  DeployResult r = Deploy(d.get(), Registry::images.a, &lines);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.reason << ": " << r.message;
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(HttpGet(19101, "/version"), std::make_pair(200, std::string("A")));
  EXPECT_EQ(Serving(d.get()), Registry::images.a);
  for (const char* want :
       {"fetching layers", "starting", "waiting for /healthz", "healthy, switched"})
    EXPECT_NE(std::find(lines.begin(), lines.end(), want), lines.end()) << want;

  uint64_t ns_a = PidNamespaceOf(d->serving_pid());
  ASSERT_NE(ns_a, 0u);
  EXPECT_FALSE(ProcessesInPidNamespace(ns_a).empty());
  auto rootfs_a = ProcessesMentioning(RootsNeedle());
  ASSERT_EQ(rootfs_a.size(), 2u);  // bwrap and the sandbox's init

  r = Deploy(d.get(), Registry::images.b);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.reason << ": " << r.message;
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(HttpGet(19101, "/version"), std::make_pair(200, std::string("B")));
  EXPECT_EQ(Serving(d.get()), Registry::images.b);
  EXPECT_TRUE(ProcessesInPidNamespace(ns_a).empty()) << "A's processes are still alive";
  for (const auto& [pid, cmd] : rootfs_a) EXPECT_TRUE(IsZombie(pid)) << cmd;
  EXPECT_EQ(std::distance(fs::directory_iterator(work_ + "/rootfs"), fs::directory_iterator()),
            1);  // A's root removed

  // Same image again: nothing changes, same process.
  int pid_b = d->serving_pid();
  r = Deploy(d.get(), Registry::images.b);
  EXPECT_EQ(r.state, DeployState::kRolledOut);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(d->serving_pid(), pid_b);
  EXPECT_EQ(HttpGet(19101, "/version").second, "B");
  // Layers came from the cache dir the second time: it holds the base and both www layers.
  EXPECT_GE(
      std::distance(fs::directory_iterator(work_ + "/blobs/sha256"), fs::directory_iterator()), 3);
  // Issue 19: the image's record names its layers, each one cached (the collector keeps the
  // blobs of the deployed image by it).
  const std::string digest_b = Registry::images.b.substr(Registry::images.b.rfind('@') + 1);
  std::ifstream rec(work_ + "/images/" + digest_b.substr(7) + ".json");
  json j = json::parse(rec, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.value("image", ""), digest_b);
  ASSERT_TRUE(j["layers"].is_array());
  EXPECT_EQ(j["layers"].size(), 2u);
  for (const auto& l : j["layers"])
    EXPECT_TRUE(fs::exists(work_ + "/blobs/sha256/" + l.get<std::string>().substr(7))) << l;
}

TEST_F(LocalDeployerTest, CrashingCandidateFailsWithItsOutputAndOldKeepsServing) {
  auto d = Make(19102);
  ASSERT_EQ(Deploy(d.get(), Registry::images.b).state, DeployState::kRolledOut);
  int pid_b = d->serving_pid();
  DeployResult r = Deploy(d.get(), Registry::images.crash);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "StartFailed");
  EXPECT_NE(r.message.find("fatal: missing DATABASE_URL"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("status 3"), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find("kiln:"), std::string::npos);  // no credential-bearing text
  // A binary that is not there: the sandbox dies at once, before kiln can enter its network.
  for (int i = 0; i < 3; ++i) {
    r = Deploy(d.get(), Registry::images.nobinary);
    EXPECT_EQ(r.reason, "StartFailed");
    EXPECT_NE(r.message.find("/bin/no-such-server"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("exited with status 1"), std::string::npos) << r.message;
  }
  EXPECT_EQ(HttpGet(19102, "/version"), std::make_pair(200, std::string("B")));
  EXPECT_EQ(Serving(d.get()), Registry::images.b);
  EXPECT_EQ(d->serving_pid(), pid_b);
  // Only B's sandbox is left.
  auto procs = ProcessesMentioning(RootsNeedle());
  EXPECT_EQ(procs.size(), 2u) << Dump(procs);
}

TEST_F(LocalDeployerTest, NeverHealthyTimesOutAndOldKeepsServing) {
  LocalDeployerOptions o;
  o.start_timeout = 1500ms;
  auto d = Make(19103, o);
  ASSERT_EQ(Deploy(d.get(), Registry::images.b).state, DeployState::kRolledOut);
  DeployResult r = Deploy(d.get(), Registry::images.unhealthy);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "HealthCheckFailed");
  EXPECT_NE(r.message.find("HTTP 404"), std::string::npos) << r.message;
  EXPECT_GE(r.elapsed_ms, 1500);
  EXPECT_LT(r.elapsed_ms, 10000);
  EXPECT_EQ(HttpGet(19103, "/version").second, "B");
  EXPECT_EQ(Serving(d.get()), Registry::images.b);
  EXPECT_EQ(ProcessesMentioning(RootsNeedle()).size(), 2u)
      << Dump(ProcessesMentioning(RootsNeedle()));
}

TEST_F(LocalDeployerTest, CancelStopsTheNewCandidateAndKeepsTheOld) {
  auto d = Make(19104);
  ASSERT_EQ(Deploy(d.get(), Registry::images.b).state, DeployState::kRolledOut);
  CancelToken cancel;
  std::thread t([&] {
    std::this_thread::sleep_for(700ms);
    cancel.Cancel();
  });
  auto t0 = std::chrono::steady_clock::now();
  DeployResult r = Deploy(d.get(), Registry::images.unhealthy, nullptr, &cancel);
  t.join();
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Cancelled");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(HttpGet(19104, "/version").second, "B");
  EXPECT_EQ(ProcessesMentioning(RootsNeedle()).size(), 2u)
      << Dump(ProcessesMentioning(RootsNeedle()));
}

TEST_F(LocalDeployerTest, HostileLayerStaysInsideTheRoot) {
  auto d = Make(19105);
  std::vector<std::string> lines;
  DeployResult r = Deploy(d.get(), Registry::images.hostile, &lines);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.reason << ": " << r.message;
  EXPECT_EQ(HttpGet(19105, "/version").second, "H");
  EXPECT_TRUE(fs::is_empty(Registry::outside)) << "wrote through a symlink to the host";
  EXPECT_FALSE(fs::exists("/tmp/escape-kiln-local"));
  EXPECT_FALSE(fs::exists("/etc/pwned-kiln"));
  EXPECT_FALSE(fs::exists(work_ + "/escape-kiln-local"));
  EXPECT_FALSE(fs::exists(work_ + "/rootfs/escape-kiln-local"));
  EXPECT_FALSE(fs::exists(Registry::dir + "/escape-kiln-local"));
  // Everything landed inside the candidate's root instead, and the device was skipped.
  fs::path root = fs::directory_iterator(work_ + "/rootfs")->path();
  EXPECT_TRUE(fs::exists(root / "escape-kiln-local"));
  EXPECT_TRUE(fs::exists(root / "tmp/escape-kiln-local") || fs::exists(root / "escape-kiln-local"));
  EXPECT_TRUE(fs::exists(root / fs::path(Registry::outside).relative_path() / "pwned"));
  EXPECT_TRUE(fs::exists(root / "etc/pwned-kiln"));
  EXPECT_FALSE(fs::exists(root / "www/sda"));
  bool reported = false;
  for (const auto& l : lines) reported |= l.find("tried to leave the root") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST_F(LocalDeployerTest, SandboxSeesNothingOfTheHost) {
  auto d = Make(19106);
  DeployResult r = Deploy(d.get(), Registry::images.probe);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.reason << ": " << r.message;
  std::string root = HttpGet(19106, "/root").second;
  EXPECT_NE(root.find("www"), std::string::npos) << root;
  for (const char* host : {"work", "home", "root", "usr", "var"})
    EXPECT_EQ(root.find(host), std::string::npos) << host << " visible: " << root;
  std::string env = HttpGet(19106, "/env").second;
  EXPECT_NE(env.find("PORT=19106"), std::string::npos) << env;
  EXPECT_NE(env.find("GREETING=hello"), std::string::npos) << env;
  EXPECT_EQ(env.find("KILN"), std::string::npos) << env;
  EXPECT_EQ(env.find("auth"), std::string::npos) << env;
  std::string status = HttpGet(19106, "/status").second;
  EXPECT_NE(status.find("CapEff:\t0000000000000000"), std::string::npos) << status;
  std::string links = HttpGet(19106, "/links").second;
  EXPECT_NE(links.find("lo"), std::string::npos) << links;
  EXPECT_EQ(links.find("eth"), std::string::npos) << links;
  EXPECT_EQ(std::count(links.begin(), links.end(), '\n'), 1) << links;  // loopback only
  std::string ps = HttpGet(19106, "/ps").second;
  EXPECT_LE(std::count(ps.begin(), ps.end(), '\n'), 5) << ps;  // its own PID namespace
  EXPECT_EQ(HttpGet(19106, "/hostname").second, "candidate\n");
  // Issue 15: not root inside (the image has no User: the deploy user's uid), no nested user
  // namespace, and on the host the sandbox runs as the unprivileged deploy user.
  std::string uid = HttpGet(19106, "/uid").second;
  EXPECT_NE(uid, "0\n");
  EXPECT_FALSE(uid.empty());
  EXPECT_EQ(HttpGet(19106, "/userns").second, "no\n");
  if (::geteuid() == 0) {
    SandboxUser u;
    ASSERT_TRUE(LookupSandboxUser("kiln-build", &u).ok());
    EXPECT_EQ(uid, std::to_string(u.uid) + "\n");
    std::string host = ReadFile("/proc/" + std::to_string(d->serving_pid()) + "/status");
    EXPECT_NE(host.find("\nUid:\t" + std::to_string(u.uid) + "\t"), std::string::npos) << host;
  }
}

TEST_F(LocalDeployerTest, RootfsLargerThanTheBoundFailsCleanly) {
  LocalDeploy cfg;
  cfg.max_rootfs_mb = 1;  // busybox alone is larger
  auto d = Make(19111, {}, cfg);
  DeployResult r = Deploy(d.get(), Registry::images.a);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "ImageFetchFailed");
  EXPECT_NE(r.message.find("deploy.local.max_rootfs_mb (1 MiB)"), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find(work_), std::string::npos) << "no host path: " << r.message;
  EXPECT_EQ(Serving(d.get()), "");
  // Nothing half-written is left.
  EXPECT_TRUE(!fs::exists(work_ + "/rootfs") || fs::is_empty(work_ + "/rootfs"));
}

TEST_F(LocalDeployerTest, ShutdownLeavesNoProcessAndClosesThePort) {
  auto d = Make(19107);
  ASSERT_EQ(Deploy(d.get(), Registry::images.a).state, DeployState::kRolledOut);
  uint64_t ns = PidNamespaceOf(d->serving_pid());
  ASSERT_NE(ns, 0u);
  auto procs = ProcessesMentioning(RootsNeedle());
  ASSERT_EQ(procs.size(), 2u);
  d->Shutdown();
  EXPECT_TRUE(ProcessesInPidNamespace(ns).empty());
  for (const auto& [pid, cmd] : procs) EXPECT_TRUE(IsZombie(pid)) << cmd;
  EXPECT_TRUE(ProcessesMentioning(RootsNeedle()).empty());
  EXPECT_EQ(HttpGet(19107, "/version").first, 0);  // nothing listens any more
  EXPECT_EQ(Serving(d.get()), "");
  d->Shutdown();  // idempotent
  DeployResult r = Deploy(d.get(), Registry::images.a);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unavailable");
  d.reset();
  EXPECT_TRUE(ProcessesMentioning(RootsNeedle()).empty());
}

TEST_F(LocalDeployerTest, DestructorStopsEverything) {
  uint64_t ns = 0;
  {
    auto d = Make(19108);
    ASSERT_EQ(Deploy(d.get(), Registry::images.a).state, DeployState::kRolledOut);
    ns = PidNamespaceOf(d->serving_pid());
  }
  EXPECT_TRUE(ProcessesInPidNamespace(ns).empty());
  EXPECT_TRUE(ProcessesMentioning(RootsNeedle()).empty());
}

TEST_F(LocalDeployerTest, StubbornCandidateIsKilledAfterTheGrace) {
  auto d = Make(19111);
  ASSERT_EQ(Deploy(d.get(), Registry::images.stubborn).state, DeployState::kRolledOut);
  EXPECT_EQ(HttpGet(19111, "/version").second, "S");
  uint64_t ns = PidNamespaceOf(d->serving_pid());
  EXPECT_GE(ProcessesInPidNamespace(ns).size(), 3u);  // init, sleep, httpd
  auto t0 = std::chrono::steady_clock::now();
  DeployResult r = Deploy(d.get(), Registry::images.a);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s);  // waited the grace (Make: 2 s)
  EXPECT_TRUE(ProcessesInPidNamespace(ns).empty());
  EXPECT_EQ(HttpGet(19111, "/version").second, "A");
  EXPECT_EQ(ProcessesMentioning(RootsNeedle()).size(), 2u)
      << Dump(ProcessesMentioning(RootsNeedle()));
}

TEST_F(LocalDeployerTest, NoRequestFailsDuringTheSwitch) {
  auto d = Make(19112);
  ASSERT_EQ(Deploy(d.get(), Registry::images.a).state, DeployState::kRolledOut);
  // Many short connections while B rolls out: each is answered by A or by B, none fails (A
  // finishes what it serves before it is stopped).
  std::atomic<bool> done{false};
  std::atomic<int> ok{0}, bad{0};
  std::thread client([&] {
    while (!done) {
      auto [code, body] = HttpGet(19112, "/version");
      (code == 200 && (body == "A" || body == "B")) ? ++ok : ++bad;
    }
  });
  std::this_thread::sleep_for(200ms);
  DeployResult r = Deploy(d.get(), Registry::images.b);
  std::this_thread::sleep_for(200ms);
  done = true;
  client.join();
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  EXPECT_GT(ok.load(), 10);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(HttpGet(19112, "/version").second, "B");
}

TEST_F(LocalDeployerTest, BusyPortIsAClearError) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(19109);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  auto d = Make(19109);
  DeployResult r = Deploy(d.get(), Registry::images.a);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unavailable");
  EXPECT_NE(r.message.find("127.0.0.1:19109"), std::string::npos) << r.message;
  EXPECT_TRUE(ProcessesMentioning(RootsNeedle()).empty());
  close(fd);
}

TEST_F(LocalDeployerTest, MissingImageAndForeignRegistryFailToFetch) {
  auto d = Make(19110);
  std::string missing = Registry::images.a.substr(0, Registry::images.a.find('@')) +
                        "@sha256:" + std::string(64, '0');
  DeployResult r = Deploy(d.get(), missing);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "ImageFetchFailed");
  r = Deploy(d.get(), "registry.example.com:5000/x@sha256:" + std::string(64, '1'));
  EXPECT_EQ(r.reason, "ImageFetchFailed");
  r = Deploy(d.get(), "not-a-digest-ref:latest");
  EXPECT_EQ(r.reason, "Invalid");
  EXPECT_EQ(Serving(d.get()), "");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A process of an earlier kiln's sandbox carries its staged root as an argument: found by that
// prefix and killed; a process with another prefix is left alone.
TEST(KillProcessesWithArgPrefix, KillsOnlyTheProcessesNamingThePrefix) {
  const std::string prefix = "/run/kiln-deploy/t" + std::to_string(::getpid()) + "x-";
  auto spawn = [](const std::string& arg) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", "while :; do sleep 0.05; done", arg.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Until the exec is visible in /proc.
    for (int i = 0; i < 400; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
      std::string c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (c.find(arg) != std::string::npos) break;
      std::this_thread::sleep_for(5ms);
    }
    return pid;
  };
  pid_t mine = spawn(prefix + "1-abc");
  pid_t other = spawn("/run/kiln-deploy/other-1-abc");
  ASSERT_GT(mine, 0);
  ASSERT_GT(other, 0);
  EXPECT_EQ(KillProcessesWithArgPrefix(prefix), 1u);
  int status = 0;
  ASSERT_EQ(::waitpid(mine, &status, 0), mine);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(::waitpid(other, &status, WNOHANG), 0) << "the other process was killed";
  ::kill(other, SIGKILL);
  ::waitpid(other, &status, 0);
  EXPECT_EQ(KillProcessesWithArgPrefix(""), 0u);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new kiln::Registry);
  return RUN_ALL_TESTS();
}
