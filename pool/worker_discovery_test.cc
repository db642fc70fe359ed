// Worker discovery: EndpointSliceTracker / StaticWorkers / ApplyMembers as pure code, and
// EndpointSliceWatcher over the real KubeClient against tests/fake_k8s/fake_apiserver.py
// (HTTPS on an ephemeral 127.0.0.1 port, certificates made here with openssl).
#include "pool/worker_discovery.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "net/http_client.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json Endpoint(const std::string& host, const std::string& ip, json conditions = json::object()) {
  return {{"addresses", {ip}},
          {"hostname", host},
          {"conditions", conditions},
          {"targetRef", {{"kind", "Pod"}, {"name", host}, {"namespace", "kiln"}}}};
}

// `endpoints`: an array, or one endpoint object (a one-element braced list is that element).
json Slice(const std::string& name, const json& endpoints, const std::string& rv = "") {
  json eps = json::array();
  if (endpoints.is_object()) {
    eps.push_back(endpoints);
  } else {
    eps = endpoints;
  }
  json s = {
      {"apiVersion", "discovery.k8s.io/v1"},
      {"kind", "EndpointSlice"},
      {"metadata",
       {{"name", name},
        {"namespace", "kiln"},
        {"labels", {{"kubernetes.io/service-name", "kiln-worker"}}}}},
      {"addressType", "IPv4"},
      {"ports", {{{"name", "metrics"}, {"port", 9100}}, {{"name", "kiln-worker"}, {"port", 8710}}}},
      {"endpoints", eps}};
  if (!rv.empty()) s["metadata"]["resourceVersion"] = rv;
  return s;
}

std::vector<std::string> ReadyIds(const std::vector<PoolMember>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) {
    if (m.ready) out.push_back(m.id);
  }
  return out;
}

TEST(EndpointSliceTracker, ListThenEvents) {
  EndpointSliceTracker t("kiln-worker");
  EXPECT_FALSE(t.ApplyList(json{{"items", json::array()}}).ok());  // no resourceVersion
  EXPECT_FALSE(t.listed());
  json list = {{"kind", "EndpointSliceList"},
               {"metadata", {{"resourceVersion", "100"}}},
               {"items",
                {Slice("kiln-worker-a", {Endpoint("w-0", "10.0.0.1", {{"ready", true}}),
                                         Endpoint("w-1", "10.0.0.2", {{"ready", false}})})}}};
  ASSERT_TRUE(t.ApplyList(list).ok());
  EXPECT_EQ(t.resource_version(), "100");
  auto ms = t.Members();
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_EQ(ms[0], (PoolMember{"w-0", "10.0.0.1", 8710, true}));  // the named port
  EXPECT_FALSE(ms[1].ready);

  // A second slice, conditions absent (= ready), then a terminating endpoint, then deletion.
  EXPECT_EQ(t.ApplyEvent(
                {{"type", "ADDED"},
                 {"object", Slice("kiln-worker-b",
                                  {{{"addresses", {"10.0.0.3"}}, {"hostname", "w-2"}}}, "101")}}),
            EndpointSliceTracker::EventResult::kApplied);
  EXPECT_EQ(ReadyIds(t.Members()), (std::vector<std::string>{"w-0", "w-2"}));
  t.ApplyEvent(
      {{"type", "MODIFIED"},
       {"object", Slice("kiln-worker-a",
                        {Endpoint("w-0", "10.0.0.1", {{"ready", false}, {"terminating", true}}),
                         Endpoint("w-1", "10.0.0.2", {{"ready", true}})},
                        "102")}});
  EXPECT_EQ(ReadyIds(t.Members()), (std::vector<std::string>{"w-1", "w-2"}));
  t.ApplyEvent({{"type", "DELETED"}, {"object", Slice("kiln-worker-b", json::array(), "103")}});
  EXPECT_EQ(ReadyIds(t.Members()), (std::vector<std::string>{"w-1"}));
  EXPECT_EQ(t.resource_version(), "103");

  // Bookmarks move the resourceVersion only; 410 asks for a re-list; junk is ignored.
  EXPECT_EQ(
      t.ApplyEvent(
          {{"type", "BOOKMARK"},
           {"object", {{"kind", "EndpointSlice"}, {"metadata", {{"resourceVersion", "150"}}}}}}),
      EndpointSliceTracker::EventResult::kApplied);
  EXPECT_EQ(t.resource_version(), "150");
  EXPECT_EQ(t.Members().size(), 2u);
  EXPECT_EQ(t.ApplyEvent({{"type", "ERROR"},
                          {"object",
                           {{"kind", "Status"},
                            {"code", 410},
                            {"reason", "Expired"},
                            {"message", "too old resource version: 1 (150)"}}}}),
            EndpointSliceTracker::EventResult::kRelist);
  EXPECT_EQ(t.ApplyEvent({{"type", "ERROR"}, {"object", {{"code", 500}}}}),
            EndpointSliceTracker::EventResult::kIgnored);
  EXPECT_EQ(t.ApplyEvent(json{{"type", "ADDED"}}), EndpointSliceTracker::EventResult::kIgnored);
  EXPECT_EQ(t.resource_version(), "150");
}

TEST(StaticWorkers, ParsesAndRefuses) {
  std::vector<PoolMember> ms;
  ASSERT_TRUE(StaticWorkers({"10.0.0.5:8710", "[fd00::1]:8711", "build-2.lan:9000"}, &ms).ok());
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms[1], (PoolMember{"[fd00::1]:8711", "fd00::1", 8711, true}));
  EXPECT_EQ(ms[2].host, "build-2.lan");
  for (const std::string bad :
       {"10.0.0.5", "10.0.0.5:", ":8710", "10.0.0.5:0", "h:70000", "h:8a", "fd00::1:8710"}) {
    Status st = StaticWorkers({bad}, &ms);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("scheduler.workers[0]"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(StaticWorkers({"a:1", "a:1"}, &ms).ok());
  ASSERT_TRUE(StaticWorkers({}, &ms).ok());
  EXPECT_TRUE(ms.empty());
}

TEST(ApplyMembers, JoinsLeavesAndReadiness) {
  Placement p;
  auto removed =
      ApplyMembers({{"a", "h", 1, true}, {"b", "h", 1, true}, {"c", "h", 1, false}}, 2, 0, &p);
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(p.WorkerIds(), (std::vector<std::string>{"a", "b"}));  // c never was ready
  ApplyMembers({{"a", "h", 1, false}, {"b", "h", 1, true}, {"c", "h", 1, true}}, 2, 1, &p);
  EXPECT_EQ(p.ready_workers(), 2u);
  EXPECT_EQ(p.FreeSlots("a"), 0u);  // not ready: takes nothing
  removed = ApplyMembers({{"c", "h", 1, true}}, 2, 2, &p);
  EXPECT_EQ(removed, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.WorkerIds(), (std::vector<std::string>{"c"}));
}

int Sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }

// The fake API server on an ephemeral port, with a CA and server certificate made here.
class FakeSlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-slices-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 " + ec +
                 " -keyout ca.key -out ca.crt -subj /CN=slices-ca -days 2 && "
                 "echo subjectAltName=IP:127.0.0.1 > san && openssl req " +
                 ec +
                 " -keyout server.key -out server.csr -subj /CN=kube-apiserver && "
                 "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                 "-out server.crt -days 2 -extfile san"),
              0);
    std::ofstream(dir_ / "tokens.json")
        << json{{"tokens",
                 {{"watcher",
                   {{"user", "system:serviceaccount:kiln:kiln"},
                    {"allow", {{"endpointslices.discovery.k8s.io", {"list", "watch"}}}}}},
                  {"list-only",
                   {{"user", "system:serviceaccount:kiln:kiln"},
                    {"allow", {{"endpointslices.discovery.k8s.io", {"list"}}}}}}}}}
               .dump();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      std::string port_file = (dir_ / "port").string(), cert = (dir_ / "server.crt").string(),
                  key = (dir_ / "server.key").string(), tokens = (dir_ / "tokens.json").string();
      ::execlp("python3", "python3", KILN_FAKE_APISERVER, "--port", "0", "--port-file",
               port_file.c_str(), "--cert", cert.c_str(), "--key", key.c_str(), "--tokens",
               tokens.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 750 && !fs::exists(dir_ / "port"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(fs::exists(dir_ / "port")) << "fake API server did not start";
    std::ifstream(dir_ / "port") >> port_;
    TlsOptions t;
    t.ca_file = (dir_ / "ca.crt").string();
    ASSERT_TRUE(TlsContext::Create(t, &tls_).ok());
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  std::unique_ptr<KubeClient> Client(const std::string& token) {
    KubeConfig cfg;
    cfg.server = "https://127.0.0.1:" + std::to_string(port_);
    cfg.tls.ca_file = (dir_ / "ca.crt").string();
    cfg.token = TokenSource::Fixed(token);
    cfg.namespace_ = "kiln";
    cfg.source = "test";
    std::unique_ptr<KubeClient> c;
    KubeClientOptions o;
    o.attempts = 1;
    EXPECT_TRUE(KubeClient::Create(cfg, o, &c).ok());
    return c;
  }

  void Control(const std::string& method, const std::string& target, const json& body = nullptr) {
    HttpOrigin o{true, "127.0.0.1", std::to_string(port_)};
    HttpClientRequest req;
    req.method = method;
    req.target = target;
    if (!body.is_null()) req.body = body.dump();
    HttpClientResponse resp;
    ASSERT_TRUE(HttpRoundTrip(o, tls_.get(), req, std::chrono::seconds(10), &resp).ok());
    ASSERT_EQ(resp.status, 200) << resp.body;
  }

  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::shared_ptr<const TlsContext> tls_;
};

// Add, not ready, remove, 410 re-list, through the real client and the fake's watch stream.
TEST_F(FakeSlicesTest, WatchSeesAddNotReadyRemoveAndRelistsOn410) {
  auto client = Client("watcher");
  KubeSliceApi api(client.get(), "kiln", "kiln-worker", /*watch_timeout_s=*/2);
  std::vector<std::vector<PoolMember>> seen;
  EndpointSliceWatcher w(&api, "kiln-worker",
                         [&](const std::vector<PoolMember>& m) { seen.push_back(m); });
  // A slice of another Service is never seen.
  json other = Slice("other", {Endpoint("x-0", "10.9.9.9")});
  other["metadata"]["labels"]["kubernetes.io/service-name"] = "other";
  Control("POST", "/_fake/endpointslices", other);
  Control("POST", "/_fake/endpointslices",
          Slice("kiln-worker-a", {Endpoint("w-0", "10.0.0.1", {{"ready", true}})}));
  ASSERT_TRUE(w.Poll().ok());  // list
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(ReadyIds(seen.back()), (std::vector<std::string>{"w-0"}));
  EXPECT_EQ(w.lists(), 1u);

  // Added and not-ready changes arrive through the watch.
  Control("POST", "/_fake/endpointslices",
          Slice("kiln-worker-a", {Endpoint("w-0", "10.0.0.1", {{"ready", true}}),
                                  Endpoint("w-1", "10.0.0.2", {{"ready", true}})}));
  Control("POST", "/_fake/endpointslices",
          Slice("kiln-worker-a", {Endpoint("w-0", "10.0.0.1", {{"ready", false}}),
                                  Endpoint("w-1", "10.0.0.2", {{"ready", true}})}));
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(ReadyIds(w.Members()), (std::vector<std::string>{"w-1"}));
  EXPECT_EQ(w.Members().size(), 2u);
  EXPECT_EQ(w.lists(), 1u);
  const std::string rv_after_events = w.resource_version();

  // Nothing happens: bookmarks move the resourceVersion, no change is reported.
  size_t reports = seen.size();
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(seen.size(), reports);
  EXPECT_GE(std::stoll(w.resource_version()), std::stoll(rv_after_events));

  // Removal.
  Control("DELETE", "/_fake/endpointslices/kiln/kiln-worker-a");
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_TRUE(w.Members().empty());

  // The history is compacted while a new slice appears: the watch gets 410, the watcher
  // lists again and sees the slice.
  Control("POST", "/_fake/endpointslices", Slice("kiln-worker-b", {Endpoint("w-2", "10.0.0.3")}));
  Control("POST", "/_fake/compact");
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(w.lists(), 2u);
  EXPECT_EQ(ReadyIds(w.Members()), (std::vector<std::string>{"w-2"}));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(ReadyIds(seen.back()), (std::vector<std::string>{"w-2"}));
}

TEST_F(FakeSlicesTest, MissingWatchPermissionIsAClearErrorAndKeepsMembers) {
  auto client = Client("list-only");
  KubeSliceApi api(client.get(), "kiln", "kiln-worker", 1);
  EndpointSliceWatcher w(&api, "kiln-worker", nullptr);
  Control("POST", "/_fake/endpointslices", Slice("kiln-worker-a", {Endpoint("w-0", "10.0.0.1")}));
  ASSERT_TRUE(w.Poll().ok());
  Status st = w.Poll();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("grant verb \"watch\" on \"endpointslices\""), std::string::npos)
      << st.message();
  EXPECT_EQ(ReadyIds(w.Members()), (std::vector<std::string>{"w-0"}));
}

}  // namespace
}  // namespace kiln
