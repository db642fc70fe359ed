// Integration tests: KubernetesDeployer (and KubeClient) against tests/fake_k8s/fake_apiserver.py
// over real HTTPS on 127.0.0.1 (ports 16443-16450), with a CA made here by openssl.
// Each test starts its own fake (fresh state) and stops it at the end.
#include "k8s/kubernetes_deployer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/cancel_token.h"
#include "net/http_client.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kHexA(64, 'a');
const std::string kHexB(64, 'b');
const std::string kHexC(64, 'c');
const std::string kHexD(64, 'd');
const char kUser[] = "system:serviceaccount:loop:kiln";

std::string Image(const std::string& repo, const std::string& hex) {
  return "127.0.0.1:5000/" + repo + "@sha256:" + hex;
}

void WriteFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::trunc) << text;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Certificates shared by every test: the cluster CA, the API server's certificate (SAN
// IP:127.0.0.1), a client certificate for CN "kiln-client", and an unrelated CA.
fs::path g_pki;

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    g_pki = fs::temp_directory_path() / ("kiln-k8s-pki-" + std::to_string(::getpid()));
    fs::remove_all(g_pki);
    fs::create_directories(g_pki);
    const std::string d = g_pki.string();
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 " + ec +
                 " -keyout ca.key -out ca.crt -subj /CN=fake-cluster-ca -days 2"),
              0);
    ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 " + ec +
                 " -keyout wrong-ca.key -out wrong-ca.crt -subj /CN=fake-cluster-ca -days 2"),
              0);
    WriteFile(g_pki / "server.ext", "subjectAltName=IP:127.0.0.1\n");
    ASSERT_EQ(Sh("cd " + d + " && openssl req " + ec +
                 " -keyout server.key -out server.csr -subj /CN=kube-apiserver && "
                 "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                 "-out server.crt -days 2 -extfile server.ext"),
              0);
    ASSERT_EQ(Sh("cd " + d + " && openssl req " + ec +
                 " -keyout client.key -out client.csr -subj /CN=kiln-client && "
                 "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                 "-out client.crt -days 2"),
              0);
  }
  void TearDown() override { fs::remove_all(g_pki); }
};

const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Environment);

std::string Base64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(t[(v >> (6 * k)) & 63]);
  }
  if (i + 1 == s.size()) {
    uint32_t v = uint8_t(s[i]) << 16;
    out += std::string{t[(v >> 18) & 63], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == s.size()) {
    uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
    out += std::string{t[(v >> 18) & 63], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

class FakeApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-k8s-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tokens_ = {{"tokens",
                {{"good-token",
                  {{"user", kUser},
                   {"allow",
                    {{"deployments.apps", {"get", "patch"}},
                     {"replicasets.apps", {"list"}},
                     {"pods", {"list"}},
                     {"pods/log", {"get"}},
                     {"events", {"list"}}}}}},
                 // Issue 16: kiln's Role before pods/log and events were granted.
                 {"no-log-token",
                  {{"user", kUser},
                   {"allow",
                    {{"deployments.apps", {"get", "patch"}},
                     {"replicasets.apps", {"list"}},
                     {"pods", {"list"}}}}}},
                 {"read-only-token",
                  {{"user", kUser},
                   {"allow",
                    {{"deployments.apps", {"get"}},
                     {"replicasets.apps", {"list"}},
                     {"pods", {"list"}}}}}}}},
               {"certs", {{"kiln-client", {{"user", "kiln-client"}, {"allow", {{"*", {"*"}}}}}}}}};
    WriteTokens();
    TlsOptions t;
    t.ca_file = (g_pki / "ca.crt").string();
    ASSERT_TRUE(TlsContext::Create(t, &tls_).ok());
  }

  void TearDown() override {
    StopFake();
    fs::remove_all(dir_);
  }

  void WriteTokens() { WriteFile(dir_ / "tokens.json", tokens_.dump()); }

  // Starts the fake on the first free port of 16443..16450.
  void StartFake(const std::vector<std::string>& extra = {}) {
    for (int port = 16443; port <= 16450; ++port) {
      fs::path port_file = dir_ / "port";
      fs::remove(port_file);
      std::vector<std::string> args = {"python3",     KILN_FAKE_APISERVER,
                                       "--port",      std::to_string(port),
                                       "--port-file", port_file.string(),
                                       "--cert",      (g_pki / "server.crt").string(),
                                       "--key",       (g_pki / "server.key").string(),
                                       "--ca",        (g_pki / "ca.crt").string(),
                                       "--tokens",    (dir_ / "tokens.json").string(),
                                       "--step-ms",   "50"};
      args.insert(args.end(), extra.begin(), extra.end());
      pid_t parent = ::getpid();
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
        int devnull = ::open("/dev/null", O_WRONLY);
        if (devnull >= 0) ::dup2(devnull, 1);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execvp("python3", argv.data());
        ::_exit(127);
      }
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      bool exited = false;
      while (std::chrono::steady_clock::now() < deadline) {
        if (fs::exists(port_file)) break;
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (exited) continue;  // port in use: try the next one
      ASSERT_TRUE(fs::exists(port_file)) << "fake API server did not start";
      pid_ = pid;
      port_ = port;
      server_ = "https://127.0.0.1:" + std::to_string(port);
      return;
    }
    FAIL() << "no free port in 16443..16450 for the fake API server";
  }

  void StopFake() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // One request to the fake (control endpoints need no token).
  json Fake(const std::string& method, const std::string& target, const json& body = nullptr,
            int* status_out = nullptr) {
    HttpOrigin o{true, "127.0.0.1", std::to_string(port_)};
    HttpClientRequest req;
    req.method = method;
    req.target = target;
    if (!body.is_null()) {
      req.body = body.dump();
      req.headers.emplace_back("Content-Type", "application/json");
    }
    HttpClientResponse resp;
    HttpResult r = HttpRoundTrip(o, tls_.get(), req, std::chrono::seconds(10), &resp);
    EXPECT_TRUE(r.ok()) << r.detail;
    if (status_out) *status_out = resp.status;
    auto j = json::parse(resp.body, nullptr, false);
    return j.is_discarded() ? json() : j;
  }

  void Seed(int replicas = 2, int progress_deadline_s = 600, const std::string& name = "web",
            const std::string& image = "", const std::string& memory_limit = "") {
    json dep = {
        {"metadata", {{"name", name}, {"namespace", "loop"}, {"labels", {{"app", name}}}}},
        {"spec",
         {{"replicas", replicas},
          {"progressDeadlineSeconds", progress_deadline_s},
          {"selector", {{"matchLabels", {{"app", name}}}}},
          {"template",
           {{"metadata", {{"labels", {{"app", name}}}}},
            {"spec",
             {{"containers",
               json::array(
                   {{{"name", "app"}, {"image", image.empty() ? Image("loop/app", kHexA) : image}},
                    {{"name", "sidecar"}, {"image", "127.0.0.1:5000/proxy:1"}}})}}}}}}}};
    if (!memory_limit.empty())
      dep["spec"]["template"]["spec"]["containers"][0]["resources"] = {
          {"limits", {{"memory", memory_limit}}}};
    int status = 0;
    Fake("POST", "/_fake/state", {{"deployments", json::array({dep})}}, &status);
    ASSERT_EQ(status, 200);
  }

  json Stored(const std::string& name = "web") {
    return Fake("GET", "/_fake/deployments/loop/" + name);
  }
  int PatchRequests() { return Fake("GET", "/_fake/stats")["patch_requests"].get<int>(); }

  std::string Kubeconfig(const std::string& user_yaml, const std::string& ca = "ca.crt") {
    std::string text =
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        "contexts:\n- name: test\n  context: {cluster: fake, user: kiln, namespace: loop}\n"
        "clusters:\n- name: fake\n  cluster:\n    server: " +
        server_ + "\n    certificate-authority: " + (g_pki / ca).string() +
        "\nusers:\n- name: kiln\n  user:\n" + user_yaml;
    WriteFile(dir_ / "kubeconfig", text);
    return (dir_ / "kubeconfig").string();
  }

  KubernetesDeployerOptions Options() {
    KubernetesDeployerOptions o;
    o.poll_interval = std::chrono::milliseconds(50);
    o.rollout_timeout = std::chrono::seconds(30);
    o.conflict_backoff = std::chrono::milliseconds(20);
    o.client.backoff_base = std::chrono::milliseconds(20);
    o.client.io_timeout = std::chrono::seconds(5);
    return o;
  }

  std::unique_ptr<KubernetesDeployer> Deployer(const std::string& token = "good-token",
                                               const std::string& deployment = "web",
                                               const std::string& container = "app",
                                               std::optional<KubernetesDeployerOptions> opts = {}) {
    KubernetesDeploy cfg;
    cfg.namespace_ = "loop";
    cfg.deployment = deployment;
    cfg.container = container;
    cfg.kubeconfig = Kubeconfig("    token: " + token + "\n");
    return std::make_unique<KubernetesDeployer>(cfg, opts ? *opts : Options());
  }

  DeployRequest Request(const std::string& image, const std::string& n = "1") {
    DeployRequest r;
    r.deploy_id = "d-loop-" + n;
    r.domain = "loop";
    r.candidate = "cand-" + n;
    r.build_id = "b-loop-" + n;
    r.commit = std::string(40, '1');
    r.image = image;
    r.digest = image.substr(image.find('@') + 1);
    return r;
  }

  fs::path dir_;
  json tokens_;
  std::shared_ptr<const TlsContext> tls_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string server_;
};

void ExpectNoSecret(const DeployResult& r, const std::string& secret) {
  EXPECT_EQ(r.message.find(secret), std::string::npos) << r.message;
}

// Issue 16: nothing the agent sees names the kubeconfig path, the API server's URL or address.
void ExpectNoLeak(const DeployResult& r, const std::string& kubeconfig, int port) {
  std::vector<std::string> texts = {r.message, r.next_step, r.details.probe_message,
                                    r.details.reason};
  for (const auto& l : r.details.log_tail) texts.push_back(l);
  for (const auto& t : texts) {
    EXPECT_EQ(t.find(kubeconfig), std::string::npos) << t;
    EXPECT_EQ(t.find("https://127.0.0.1"), std::string::npos) << t;
    EXPECT_EQ(t.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << t;
    EXPECT_EQ(t.find("serviceaccount"), std::string::npos) << t;
  }
}

TEST_F(FakeApiTest, SuccessfulRolloutFollowsGenerationsAndAnnotates) {
  StartFake();
  Seed(3);
  json before = Stored();
  ASSERT_EQ(before["metadata"]["generation"], 1);
  auto d = Deployer();
  std::string image;
  ASSERT_TRUE(d->Current(&image).ok());
  EXPECT_EQ(image, Image("loop/app", kHexA));

  std::vector<std::string> lines;
  const std::string target = Image("loop/app", kHexB);
  DeployResult r = d->Deploy(
      Request(target), [&](const std::string& l) { lines.push_back(l); }, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.reason << ": " << r.message;
  EXPECT_TRUE(r.changed);
  EXPECT_GT(r.elapsed_ms, 0);
  EXPECT_NE(r.message.find(target), std::string::npos);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_NE(lines.front().find("(generation 2)"), std::string::npos) << lines.front();
  bool saw_in_progress = false;
  for (const auto& l : lines)
    saw_in_progress |= l.find("new replicas updated") != std::string::npos ||
                       l.find("updated replicas are available") != std::string::npos ||
                       l.find("pending termination") != std::string::npos;
  EXPECT_TRUE(saw_in_progress);
  EXPECT_EQ(lines.back(), "rolled out: 3 of 3 replicas available");

  json after = Stored();
  EXPECT_EQ(after["metadata"]["generation"], 2);
  EXPECT_EQ(after["status"]["observedGeneration"], 2);
  EXPECT_EQ(after["status"]["updatedReplicas"], 3);
  EXPECT_EQ(after["status"]["availableReplicas"], 3);
  EXPECT_EQ(after["status"]["replicas"], 3);
  const json& tmpl = after["spec"]["template"];
  EXPECT_EQ(tmpl["spec"]["containers"][0]["name"], "app");
  EXPECT_EQ(tmpl["spec"]["containers"][0]["image"], target);
  EXPECT_EQ(tmpl["spec"]["containers"][1]["image"], "127.0.0.1:5000/proxy:1");  // untouched
  const json& ann = tmpl["metadata"]["annotations"];
  EXPECT_EQ(ann["kiln.dev/candidate"], "cand-1");
  EXPECT_EQ(ann["kiln.dev/commit"], std::string(40, '1'));
  EXPECT_EQ(ann["kiln.dev/build-id"], "b-loop-1");
  EXPECT_EQ(ann["kiln.dev/deploy-id"], "d-loop-1");
  EXPECT_EQ(after["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");

  ASSERT_TRUE(d->Current(&image).ok());
  EXPECT_EQ(image, target);
}

TEST_F(FakeApiTest, IdempotentSecondDeploySendsNoPatch) {
  StartFake();
  Seed(2);
  auto d = Deployer();
  const std::string target = Image("loop/app", kHexB);
  DeployResult r1 = d->Deploy(Request(target, "1"), nullptr, nullptr);
  ASSERT_EQ(r1.state, DeployState::kRolledOut) << r1.message;
  EXPECT_TRUE(r1.changed);
  EXPECT_EQ(PatchRequests(), 1);
  DeployResult r2 = d->Deploy(Request(target, "2"), nullptr, nullptr);
  ASSERT_EQ(r2.state, DeployState::kRolledOut) << r2.message;
  EXPECT_FALSE(r2.changed);
  EXPECT_NE(r2.message.find("already runs"), std::string::npos) << r2.message;
  EXPECT_EQ(PatchRequests(), 1);
  EXPECT_EQ(Stored()["metadata"]["generation"], 2);
  // The previous deploy's annotations stay (no patch was sent).
  EXPECT_EQ(Stored()["spec"]["template"]["metadata"]["annotations"]["kiln.dev/deploy-id"],
            "d-loop-1");
}

TEST_F(FakeApiTest, ProgressDeadlineExceeded) {
  StartFake();
  Seed(2, /*progress_deadline_s=*/1);
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/stuck-app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "ProgressDeadlineExceeded") << r.message;
  EXPECT_NE(r.message.find("has timed out progressing"), std::string::npos) << r.message;
  // Issue 16: and why: the pod runs but its readiness probe fails (from its Events).
  EXPECT_EQ(r.error_kind, "deploy_unready") << r.message;
  EXPECT_EQ(r.details.probe_message,
            "Readiness probe failed: HTTP probe failed with statuscode: 503");
  EXPECT_TRUE(r.changed);
  EXPECT_GE(r.elapsed_ms, 1000);
  json after = Stored();
  bool found = false;
  for (const auto& c : after["status"]["conditions"])
    found |= c["type"] == "Progressing" && c["reason"] == "ProgressDeadlineExceeded" &&
             c["status"] == "False";
  EXPECT_TRUE(found) << after["status"].dump();
}

TEST_F(FakeApiTest, ImagePullBackOffReportsReasonAndPodMessage) {
  StartFake({"--errimagepull-steps", "0"});
  Seed(2);
  auto d = Deployer();
  const std::string target = Image("loop/pullfail", kHexB);
  DeployResult r = d->Deploy(Request(target), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "ImagePullBackOff") << r.message;
  EXPECT_NE(r.message.find("Back-off pulling image \"" + target + "\""), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("pod \"web-"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("container \"app\""), std::string::npos) << r.message;
  EXPECT_EQ(r.error_kind, "deploy_image");  // Issue 16
  EXPECT_NE(r.next_step.find("not your code"), std::string::npos) << r.next_step;
  EXPECT_EQ(r.details.reason, "ImagePullBackOff");
}

TEST_F(FakeApiTest, ErrImagePullAndCrashLoopBackOff) {
  StartFake({"--errimagepull-steps", "1000"});
  Seed(1);
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/pullfail", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.reason, "ErrImagePull") << r.message;
  EXPECT_NE(r.message.find("failed to pull and unpack image"), std::string::npos) << r.message;
  r = d->Deploy(Request(Image("loop/crash", kHexC), "2"), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "CrashLoopBackOff") << r.message;
  EXPECT_NE(r.message.find("back-off 10s restarting failed container=app"), std::string::npos)
      << r.message;
}

TEST_F(FakeApiTest, WrongTokenIsUnauthorized) {
  StartFake();
  Seed();
  auto d = Deployer("not-a-known-token");
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unauthorized");
  EXPECT_NE(r.message.find("rejected kiln's credential (401 Unauthorized)"), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("deployments.apps \"web\" in namespace \"loop\""), std::string::npos);
  EXPECT_EQ(r.error_kind, "infrastructure");
  ExpectNoLeak(r, (dir_ / "kubeconfig").string(), port_);
  ExpectNoSecret(r, "not-a-known-token");
  EXPECT_FALSE(r.changed);
  std::string image;
  Status st = d->Current(&image);
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(st.message().find("not-a-known-token"), std::string::npos);
}

TEST_F(FakeApiTest, MissingPermissionNamesTheVerb) {
  StartFake();
  Seed();
  auto d = Deployer("read-only-token");
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Forbidden");
  EXPECT_NE(r.message.find("kiln may not patch deployments.apps \"web\" in namespace \"loop\""),
            std::string::npos)
      << r.message;
  // Issue 16: the API's wording (kiln's identity) goes to the log, not to the agent.
  EXPECT_EQ(r.message.find("system:serviceaccount"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("grant verb \"patch\" on \"deployments\" (apps)"), std::string::npos)
      << r.message;
  ExpectNoSecret(r, "read-only-token");
  EXPECT_EQ(Fake("GET", "/_fake/stats")["patches_applied"], 0);
}

TEST_F(FakeApiTest, MissingDeploymentIsNotFound) {
  StartFake();
  Seed();
  auto d = Deployer("good-token", "nope");
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "NotFound");
  EXPECT_NE(r.message.find("deployments.apps \"nope\" not found in namespace \"loop\""),
            std::string::npos)
      << r.message;
  std::string image;
  EXPECT_EQ(d->Current(&image).code(), Status::Code::kNotFound);
  EXPECT_EQ(PatchRequests(), 0);
}

TEST_F(FakeApiTest, UnknownContainerIsAnErrorBeforePatching) {
  StartFake();
  Seed();
  auto d = Deployer("good-token", "web", "nope");
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "ContainerNotFound");
  EXPECT_NE(r.message.find("container \"nope\" not found in deployment \"web\""), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("\"app\", \"sidecar\""), std::string::npos) << r.message;
  EXPECT_EQ(PatchRequests(), 0);
  std::string image;
  EXPECT_EQ(d->Current(&image).code(), Status::Code::kNotFound);
}

TEST_F(FakeApiTest, ConflictIsRetried) {
  StartFake();
  Seed();
  Fake("POST", "/_fake/conflicts?count=2");
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  EXPECT_EQ(PatchRequests(), 3);
  EXPECT_EQ(Fake("GET", "/_fake/stats")["patches_applied"], 1);
}

TEST_F(FakeApiTest, ServerErrorsAreRetriedWithBackoff) {
  StartFake();
  Seed();
  Fake("POST", "/_fake/errors?count=3&code=503");
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  json reqs = Fake("GET", "/_fake/stats")["requests"];
  ASSERT_GE(reqs.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reqs[i]["code"], 503) << reqs.dump();
  EXPECT_EQ(reqs[3]["code"], 200);
  // More errors than attempts: Unavailable, quoting the server's message.
  Fake("POST", "/_fake/errors?count=10&code=500");
  std::string image;
  Status st = d->Current(&image);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  // Issue 16: in the agent's terms, without the server's URL (the full text is logged).
  EXPECT_NE(st.message().find("the Kubernetes API is failing (HTTP 500) for get "
                              "deployments.apps \"web\""),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("127.0.0.1"), std::string::npos) << st.message();
}

// Issue 19: an API server that accepts and reads requests but never answers. Each I/O step may
// wait a minute (io_timeout) and there are 4 attempts per call, so without the deploy's deadline
// bounding every call the deploy would hang for minutes; with it, it fails as an infrastructure
// problem shortly after its 2 s rollout timeout. The bound asserted (30 s) is far from both.
TEST_F(FakeApiTest, StalledApiServerFailsTheDeployWithinItsTimeout) {
  StartFake();
  Seed();
  auto opts = Options();
  opts.rollout_timeout = std::chrono::seconds(2);
  opts.client.io_timeout = std::chrono::seconds(60);
  auto d = Deployer("good-token", "web", "app", opts);
  for (bool mid_rollout : {false, true}) {
    SCOPED_TRACE(mid_rollout ? "stalled after the patch" : "stalled from the first call");
    int status = 0;
    if (!mid_rollout) Fake("POST", "/_fake/stall?seconds=120", nullptr, &status);
    bool stalled = !mid_rollout;
    DeployProgressFn progress = [&](const std::string& line) {
      if (!stalled && line.rfind("patched ", 0) == 0) {
        Fake("POST", "/_fake/stall?seconds=120");
        stalled = true;
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    DeployResult r =
        d->Deploy(Request(Image("loop/app", mid_rollout ? kHexC : kHexB)), progress, nullptr);
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    Fake("POST", "/_fake/stall?seconds=0");
    EXPECT_TRUE(stalled);
    EXPECT_EQ(r.state, DeployState::kFailed) << r.message;
    EXPECT_EQ(r.error_kind, "infrastructure") << r.reason << ": " << r.message;
    EXPECT_EQ(r.reason, "Unavailable") << r.message;
    EXPECT_LT(elapsed, std::chrono::seconds(30)) << r.message;
    EXPECT_EQ(r.message.find("127.0.0.1"), std::string::npos) << r.message;
  }
  // The server answers again: the next deploy rolls out.
  DeployResult ok = d->Deploy(Request(Image("loop/app", kHexD)), nullptr, nullptr);
  EXPECT_EQ(ok.state, DeployState::kRolledOut) << ok.message;
}

TEST_F(FakeApiTest, PersistentConflictFails) {
  StartFake();
  Seed();
  Fake("POST", "/_fake/conflicts?count=100");
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Conflict");
  EXPECT_NE(r.message.find("the object has been modified"), std::string::npos) << r.message;
  EXPECT_EQ(PatchRequests(), Options().conflict_attempts);
}

TEST_F(FakeApiTest, InClusterTokenIsReReadAfterRotation) {
  StartFake();
  Seed();
  fs::path sa = dir_ / "serviceaccount";
  WriteFile(sa / "token", "old-token-1\n");
  fs::copy_file(g_pki / "ca.crt", sa / "ca.crt");
  WriteFile(sa / "namespace", "loop");
  tokens_["tokens"]["old-token-1"] = tokens_["tokens"]["good-token"];
  WriteTokens();

  KubernetesDeploy cfg;  // namespace from the service account
  cfg.deployment = "web";
  cfg.container = "app";
  KubernetesDeployerOptions o = Options();
  o.in_cluster = InClusterSource{"127.0.0.1", std::to_string(port_), sa.string()};
  KubernetesDeployer d(cfg, o);
  EXPECT_EQ(d.ns(), "loop");
  DeployResult r = d.Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;

  // Rotation: the fake stops accepting the old token; the file gets the new one with the same
  // size and mtime, so only the 401 can make kiln read it again.
  struct stat st {};
  ASSERT_EQ(::stat((sa / "token").c_str(), &st), 0);
  tokens_["tokens"].erase("old-token-1");
  tokens_["tokens"]["new-token-2"] = tokens_["tokens"]["good-token"];
  WriteTokens();
  WriteFile(sa / "token", "new-token-2\n");
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (sa / "token").c_str(), times, 0), 0);

  r = d.Deploy(Request(Image("loop/app", kHexC), "2"), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  json reqs = Fake("GET", "/_fake/stats")["requests"];
  int unauthorized = 0;
  for (const auto& q : reqs) unauthorized += q["code"] == 401;
  EXPECT_EQ(unauthorized, 1) << reqs.dump();
  std::string image;
  ASSERT_TRUE(d.Current(&image).ok());
  EXPECT_EQ(image, Image("loop/app", kHexC));

  // A token that stays invalid after the re-read is a clear 401 naming the token file.
  WriteFile(sa / "token", "revoked-token\n");
  tokens_["tokens"].erase("new-token-2");
  WriteTokens();
  r = d.Deploy(Request(Image("loop/app", kHexB), "3"), nullptr, nullptr);
  EXPECT_EQ(r.reason, "Unauthorized");
  // Issue 16: the token file's path stays in kiln's log; the agent learns it is not its code.
  EXPECT_NE(r.message.find("rejected kiln's credential (401 Unauthorized)"), std::string::npos)
      << r.message;
  EXPECT_EQ(r.message.find((sa / "token").string()), std::string::npos) << r.message;
  EXPECT_EQ(r.error_kind, "infrastructure");
  ExpectNoSecret(r, "revoked-token");
}

TEST_F(FakeApiTest, WrongCaIsRefused) {
  StartFake();
  Seed();
  KubernetesDeploy cfg;
  cfg.namespace_ = "loop";
  cfg.deployment = "web";
  cfg.container = "app";
  cfg.kubeconfig = Kubeconfig("    token: good-token\n", "wrong-ca.crt");
  KubernetesDeployer d(cfg, Options());
  DeployResult r = d.Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "TLSError");
  EXPECT_NE(r.message.find("TLS handshake failed"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("certificate"), std::string::npos) << r.message;
  ExpectNoSecret(r, "good-token");
  // Nothing reached the API (no request was answered).
  EXPECT_EQ(Fake("GET", "/_fake/stats")["requests"].size(), 0u);
}

TEST_F(FakeApiTest, ClientCertificateFromKubeconfigData) {
  StartFake();
  Seed();
  KubernetesDeploy cfg;
  cfg.deployment = "web";
  cfg.container = "app";  // namespace from the kubeconfig context
  cfg.kubeconfig =
      Kubeconfig("    client-certificate-data: " + Base64(ReadFile(g_pki / "client.crt")) +
                 "\n    client-key-data: " + Base64(ReadFile(g_pki / "client.key")) + "\n");
  KubernetesDeployer d(cfg, Options());
  DeployResult r = d.Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kRolledOut) << r.message;
  EXPECT_EQ(Fake("GET", "/_fake/stats")["requests"][0]["user"], "kiln-client");
}

TEST_F(FakeApiTest, TimeoutAndCancel) {
  StartFake();
  Seed(1);
  KubernetesDeployerOptions o = Options();
  o.rollout_timeout = std::chrono::milliseconds(800);
  auto d = Deployer("good-token", "web", "app", o);
  DeployResult r = d->Deploy(Request(Image("loop/stuck", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Timeout") << r.message;
  EXPECT_NE(r.message.find("did not finish rolling out within 800 ms"), std::string::npos)
      << r.message;
  // Issue 16: the deadline came before unready_timeout_s: the same classified failure.
  EXPECT_EQ(r.error_kind, "deploy_unready") << r.message;
  EXPECT_NE(r.message.find("running but not ready"), std::string::npos) << r.message;
  EXPECT_GE(r.elapsed_ms, 800);

  auto d2 = Deployer();
  CancelToken cancel;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    cancel.Cancel();
  });
  auto start = std::chrono::steady_clock::now();
  r = d2->Deploy(Request(Image("loop/stuck", kHexC), "2"), nullptr, &cancel);
  t.join();
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Cancelled") << r.message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(FakeApiTest, KubeClientInvalidPatchIs422) {
  StartFake();
  Seed();
  KubeConfig kc;
  ASSERT_TRUE(LoadKubeconfig(Kubeconfig("    token: good-token\n"), "", &kc).ok());
  std::unique_ptr<KubeClient> c;
  ASSERT_TRUE(KubeClient::Create(kc, {}, &c).ok());
  json out;
  KubeCallError err;
  Status st = c->PatchDeployment(
      "loop", "web",
      {{"spec",
        {{"template",
          {{"spec", {{"containers", json::array({{{"name", "app"}, {"image", ""}}})}}}}}}}},
      &out, &err);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(err.http_status, 422);
  EXPECT_EQ(err.reason, "Invalid");
  EXPECT_NE(st.message().find("spec.template.spec.containers[0].image: Required value"),
            std::string::npos)
      << st.message();
  // Lists go through too, with the label selector applied.
  ASSERT_TRUE(c->ListPods("loop", "app=web", &out).ok());
  EXPECT_EQ(out["kind"], "PodList");
  EXPECT_EQ(out["items"].size(), 2u);
  ASSERT_TRUE(c->ListPods("loop", "app=other", &out).ok());
  EXPECT_EQ(out["items"].size(), 0u);
  ASSERT_TRUE(c->ListReplicaSets("loop", "app=web", &out).ok());
  EXPECT_EQ(out["items"].size(), 1u);
}

TEST_F(FakeApiTest, UnreachableServerIsUnavailableAfterRetries) {
  // No fake running: connection refused on every attempt.
  server_ = "https://127.0.0.1:16450";
  port_ = 16450;
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/app", kHexB)), nullptr, nullptr);
  EXPECT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unavailable");
  EXPECT_NE(r.message.find("unreachable"), std::string::npos) << r.message;
  EXPECT_EQ(r.error_kind, "infrastructure");  // Issue 16
  EXPECT_NE(r.next_step.find("not your code"), std::string::npos) << r.next_step;
  ExpectNoLeak(r, (dir_ / "kubeconfig").string(), port_);
}

// --- Issue 16: Kubernetes deploy failures say why ---

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Requests the fake answered for `path_part` (e.g. "/log"), as {code, ...}.
std::vector<int> CodesFor(const json& reqs, const std::string& path_part) {
  std::vector<int> codes;
  for (const auto& q : reqs)
    if (q["path"].get<std::string>().find(path_part) != std::string::npos)
      codes.push_back(q["code"].get<int>());
  return codes;
}

TEST_F(FakeApiTest, CrashLoopReportsExitCodeRestartsAndPreviousLog) {
  StartFake();
  Seed(1);
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/crash", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "CrashLoopBackOff") << r.message;
  EXPECT_EQ(r.error_kind, "deploy_crash") << r.message;
  EXPECT_EQ(r.details.exit_code, 1);
  EXPECT_EQ(r.details.reason, "Error");
  ASSERT_TRUE(r.details.restarts.has_value());
  EXPECT_GE(*r.details.restarts, 1);
  EXPECT_EQ(r.details.container, "app");
  EXPECT_EQ(r.details.pod.rfind("web-", 0), 0u) << r.details.pod;
  EXPECT_NE(r.message.find("exited with code 1"), std::string::npos) << r.message;
  // The last (up to 40) lines of the previous container's log, valid UTF-8 (the fake's log
  // has 30 lines and a byte that is not UTF-8).
  ASSERT_EQ(r.details.log_tail.size(), 30u);
  EXPECT_EQ(r.details.log_tail.back(),
            "panic: open /etc/app/config.yaml: no such file or directory");
  EXPECT_EQ(r.details.log_tail.front(), "app: init step 1 ok");
  EXPECT_EQ(r.details.log_tail[28], "listening on :8080 \xef\xbf\xbd");
  for (const auto& l : r.details.log_tail) EXPECT_TRUE(ValidUtf8(l)) << l;
  EXPECT_NE(r.next_step.find("log_tail"), std::string::npos) << r.next_step;
  ExpectNoLeak(r, (dir_ / "kubeconfig").string(), port_);
  // Read with previous=true from the real path, answered 200.
  json reqs = Fake("GET", "/_fake/stats")["requests"];
  EXPECT_EQ(CodesFor(reqs, "/pods/" + r.details.pod + "/log"), std::vector<int>{200})
      << reqs.dump();
}

TEST_F(FakeApiTest, OomKilledNamesTheMemoryLimit) {
  StartFake();
  Seed(1, 600, "web", "", "128Mi");
  auto d = Deployer();
  DeployResult r = d->Deploy(Request(Image("loop/oom", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "OOMKilled") << r.message;
  EXPECT_EQ(r.error_kind, "deploy_crash");
  EXPECT_EQ(r.details.reason, "OOMKilled");
  EXPECT_EQ(r.details.exit_code, 137);
  EXPECT_EQ(r.details.memory_limit, "128Mi");
  EXPECT_NE(r.message.find("OOMKilled, memory limit 128Mi"), std::string::npos) << r.message;
  EXPECT_NE(r.next_step.find("128Mi"), std::string::npos) << r.next_step;
  EXPECT_EQ(r.details.log_tail,
            (std::vector<std::string>{"loading model weights", "allocating 2048 MiB cache"}));
  ExpectNoLeak(r, (dir_ / "kubeconfig").string(), port_);
}

TEST_F(FakeApiTest, ReadinessFailureFailsAfterUnreadyTimeoutWithProbeMessage) {
  StartFake();
  Seed(1);
  KubernetesDeployerOptions o = Options();
  o.unready_timeout = std::chrono::milliseconds(1000);
  auto d = Deployer("good-token", "web", "app", o);
  DeployResult r = d->Deploy(Request(Image("loop/unready", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unready") << r.message;
  EXPECT_EQ(r.error_kind, "deploy_unready");
  ASSERT_TRUE(r.details.unready_ms.has_value());
  EXPECT_GE(*r.details.unready_ms, 1000);
  EXPECT_EQ(r.details.probe_message,
            "Readiness probe failed: Get \"http://<pod IP>:8080/healthz\": dial tcp <pod IP>:8080: "
            "connect: connection refused");
  EXPECT_NE(r.message.find("is running but not ready after"), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find("10.244."), std::string::npos) << r.message;
  EXPECT_NE(r.next_step.find("readiness probe"), std::string::npos) << r.next_step;
  ExpectNoLeak(r, (dir_ / "kubeconfig").string(), port_);
  json reqs = Fake("GET", "/_fake/stats")["requests"];
  EXPECT_FALSE(CodesFor(reqs, "/namespaces/loop/events").empty()) << reqs.dump();
}

TEST_F(FakeApiTest, UnschedulablePodFailsAfterUnreadyTimeout) {
  StartFake();
  Seed(1);
  KubernetesDeployerOptions o = Options();
  o.unready_timeout = std::chrono::milliseconds(500);
  auto d = Deployer("good-token", "web", "app", o);
  DeployResult r = d->Deploy(Request(Image("loop/unschedulable", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.reason, "Unschedulable") << r.message;
  EXPECT_EQ(r.error_kind, "deploy_unschedulable");
  EXPECT_NE(r.message.find("3 Insufficient memory"), std::string::npos) << r.message;
  EXPECT_NE(r.next_step.find("not your code"), std::string::npos);
}

TEST_F(FakeApiTest, CrashWithoutLogPermissionIsStillClassified) {
  StartFake();
  Seed(1);
  auto d = Deployer("no-log-token");
  DeployResult r = d->Deploy(Request(Image("loop/crash", kHexB)), nullptr, nullptr);
  ASSERT_EQ(r.state, DeployState::kFailed);
  EXPECT_EQ(r.error_kind, "deploy_crash");
  EXPECT_EQ(r.details.exit_code, 1);
  EXPECT_TRUE(r.details.log_tail.empty());
  EXPECT_EQ(r.next_step.find("log_tail"), std::string::npos) << r.next_step;
  json reqs = Fake("GET", "/_fake/stats")["requests"];
  EXPECT_EQ(CodesFor(reqs, "/log"), std::vector<int>{403}) << reqs.dump();
}

TEST_F(FakeApiTest, PodLogAndEventsAnswerAsTheApiDoes) {
  StartFake();
  Seed(1);
  KubeConfig kc;
  ASSERT_TRUE(LoadKubeconfig(Kubeconfig("    token: good-token\n"), "", &kc).ok());
  std::unique_ptr<KubeClient> c;
  ASSERT_TRUE(KubeClient::Create(kc, {}, &c).ok());
  json pods;
  ASSERT_TRUE(c->ListPods("loop", "app=web", &pods).ok());
  ASSERT_EQ(pods["items"].size(), 1u);
  const std::string pod = pods["items"][0]["metadata"]["name"];
  std::string log;
  KubeCallError err;
  // A running container: its log; previous=true without a restart: 400 BadRequest.
  ASSERT_TRUE(c->GetPodLog("loop", pod, "app", false, 20, 4096, &log, &err).ok());
  EXPECT_EQ(log, "serving on :8080\n");
  Status st = c->GetPodLog("loop", pod, "app", true, 20, 4096, &log, &err);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(err.http_status, 400);
  EXPECT_EQ(err.reason, "BadRequest");
  EXPECT_NE(err.api_message.find("previous terminated container \"app\""), std::string::npos)
      << err.api_message;
  st = c->GetPodLog("loop", "web-nope", "app", false, 20, 4096, &log, &err);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_EQ(err.http_status, 404);
  EXPECT_EQ(err.resource, "pods/log");
  st = c->GetPodLog("loop", pod, "nope", false, 20, 4096, &log, &err);
  EXPECT_EQ(err.http_status, 400);
  json events;
  ASSERT_TRUE(c->ListEvents("loop", pod, &events, &err).ok());
  EXPECT_EQ(events["kind"], "EventList");
}

}  // namespace
}  // namespace kiln
