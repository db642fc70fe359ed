// The remote builder transport over real loopback TLS (caf::openssl), certificates made here
// with openssl: a request reaches a worker's published builder and its answer comes back; a
// scheduler or a worker holding a certificate of another CA is refused.
#include "pool/remote_builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path g_pki;

int Sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }

// CA `ca` (made if missing) signs certificate `name`.
void Issue(const std::string& ca, const std::string& name) {
  const std::string d = g_pki.string();
  if (!fs::exists(g_pki / (ca + ".crt"))) {
    ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca +
                 ".key -out " + ca + ".crt -subj /CN=" + ca + " -days 2"),
              0);
  }
  ASSERT_EQ(Sh("cd " + d + " && openssl req -newkey rsa:2048 -nodes -keyout " + name +
               ".key -out " + name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " +
               name + ".csr -CA " + ca + ".crt -CAkey " + ca + ".key -CAcreateserial -out " +
               name + ".crt -days 2"),
            0);
}

class Pki : public ::testing::Environment {
 public:
  void SetUp() override {
    g_pki = fs::temp_directory_path() / ("kiln-pool-pki-" + std::to_string(::getpid()));
    fs::remove_all(g_pki);
    fs::create_directories(g_pki);
    Issue("scheduler-ca", "scheduler");
    Issue("worker-ca", "worker");
    Issue("rogue-ca", "rogue");
  }
  void TearDown() override { fs::remove_all(g_pki); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Pki);

PoolTlsConfig Tls(const std::string& who, const std::string& peer_ca) {
  return {(g_pki / (who + ".crt")).string(), (g_pki / (who + ".key")).string(),
          (g_pki / (peer_ca + ".crt")).string()};
}

remote_builder_actor::behavior_type EchoBuilder(remote_builder_actor::pointer self,
                                                std::string name) {
  return {[=](remote_build_atom, const std::string& req) {
    return "{\"worker\":\"" + name + "\",\"request\":" + req + "}";
  }};
}

// A worker: its own actor system, a published builder. `identity` signs its certificate.
struct Worker {
  explicit Worker(const std::string& identity)
      : cfg(Tls(identity, "scheduler-ca")), sys(cfg) {
    builder = sys.spawn(EchoBuilder, identity);
    status = PublishRemoteBuilder(builder, 0, &port);
  }
  // The published builder must end before its system does (the system waits for it).
  ~Worker() { caf::anon_send_exit(builder, caf::exit_reason::user_shutdown); }
  PoolSystemConfig cfg;
  caf::actor_system sys;
  remote_builder_actor builder;
  uint16_t port = 0;
  Status status;
};

std::string Ask(caf::actor_system& sys, const remote_builder_actor& h, const std::string& req) {
  caf::scoped_actor self{sys};
  std::string out;
  self->request(h, std::chrono::seconds(10), remote_build_atom::value, req)
      .receive([&](const std::string& r) { out = r; },
               [&](const caf::error& e) { out = "error: " + sys.render(e); });
  return out;
}

TEST(RemoteBuilder, RequestAndAnswerOverMutualTls) {
  Worker w("worker");
  ASSERT_TRUE(w.status.ok()) << w.status.message();
  ASSERT_NE(w.port, 0);
  PoolSystemConfig cfg(Tls("scheduler", "worker-ca"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  Status st = ConnectRemoteBuilder(sys, "127.0.0.1", w.port, &h);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(Ask(sys, h, "{\"candidate\":\"d/c\"}"),
            "{\"worker\":\"worker\",\"request\":{\"candidate\":\"d/c\"}}");
}

TEST(RemoteBuilder, SchedulerWithAnotherCasCertificateIsRefused) {
  Worker w("worker");
  ASSERT_TRUE(w.status.ok()) << w.status.message();
  PoolSystemConfig cfg(Tls("rogue", "worker-ca"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  Status st = ConnectRemoteBuilder(sys, "127.0.0.1", w.port, &h);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("refused the connection or its certificate"), std::string::npos)
      << st.message();
}

TEST(RemoteBuilder, SchedulerWithoutCertificateIsRefused) {
  Worker w("worker");
  ASSERT_TRUE(w.status.ok()) << w.status.message();
  PoolSystemConfig cfg(PoolTlsConfig{});  // no certificate at all
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  EXPECT_FALSE(ConnectRemoteBuilder(sys, "127.0.0.1", w.port, &h).ok());
}

TEST(RemoteBuilder, WorkerWithAnotherCasCertificateIsRefused) {
  Worker w("rogue");  // the scheduler only trusts worker-ca
  ASSERT_TRUE(w.status.ok()) << w.status.message();
  PoolSystemConfig cfg(Tls("scheduler", "worker-ca"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  EXPECT_FALSE(ConnectRemoteBuilder(sys, "127.0.0.1", w.port, &h).ok());
}

}  // namespace
}  // namespace kiln
