// The remote builder transport over real loopback TLS (caf::openssl), certificates made here
// with openssl: a request reaches a worker's published builder and its answer comes back; a
// scheduler or a worker holding a certificate of another CA is refused; a worker process killed
// with a request in flight shows up as a down message (the scheduler's cue to retry the build).
#include "pool/remote_builder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pool/tls_probe.h"

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
  ASSERT_EQ(
      Sh("cd " + d + " && openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " +
         name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " + name + ".csr -CA " + ca +
         ".crt -CAkey " + ca + ".key -CAcreateserial -out " + name + ".crt -days 2"),
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
  explicit Worker(const std::string& identity) : cfg(Tls(identity, "scheduler-ca")), sys(cfg) {
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

// ProbeWorkerTls (issue 20) names each cause in the operator's terms, never a path, and leaves
// the scheduler's CAF connections alone.
TEST(RemoteBuilder, TlsProbeNamesEachCause) {
  Worker good("worker"), rogue("rogue");
  ASSERT_TRUE(good.status.ok() && rogue.status.ok());
  const PoolTlsConfig sched = Tls("scheduler", "worker-ca");
  EXPECT_TRUE(ProbeWorkerTls(sched, "127.0.0.1", good.port).ok());

  Status st = ProbeWorkerTls(sched, "127.0.0.1", rogue.port);
  EXPECT_NE(st.message().find("its certificate is not signed by the CA in "
                              "scheduler.worker_tls.worker_ca"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find(g_pki.string()), std::string::npos) << st.message();

  st = ProbeWorkerTls(Tls("rogue", "worker-ca"), "127.0.0.1", good.port);
  EXPECT_NE(st.message().find("it refused this scheduler's certificate"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("worker.tls.scheduler_ca"), std::string::npos) << st.message();

  uint16_t closed = 0;
  {
    Worker gone("worker");
    closed = gone.port;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its acceptor closes
  st = ProbeWorkerTls(sched, "127.0.0.1", closed);
  EXPECT_NE(st.message().find("nothing accepts connections there"), std::string::npos)
      << st.message();

  // After the refusals, a scheduler's CAF connection to the good worker still works.
  PoolSystemConfig cfg(sched);
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  ASSERT_TRUE(ConnectRemoteBuilder(sys, "127.0.0.1", good.port, &h).ok());
  EXPECT_EQ(Ask(sys, h, "{}"), "{\"worker\":\"worker\",\"request\":{}}");
}

// A worker process (remote_builder_peer) killed with -9 while a build request is open.
TEST(RemoteBuilder, KilledWorkerIsSeenDownAndItsRequestFails) {
  const fs::path port_file = g_pki / "peer.port";
  fs::remove(port_file);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execl(KILN_REMOTE_PEER, KILN_REMOTE_PEER, g_pki.c_str(), port_file.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !fs::exists(port_file); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(port_file)) << "remote_builder_peer did not start";
  int port = 0;
  std::ifstream(port_file) >> port;

  PoolSystemConfig cfg(Tls("scheduler", "worker-ca"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  Status st = ConnectRemoteBuilder(sys, "127.0.0.1", static_cast<uint16_t>(port), &h);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(Ask(sys, h, "\"ping\""), "\"ping\"");

  // A build request in flight (sent, not awaited: CAF 0.17 does not fail a request whose
  // remote node went down; it would only time out, so the scheduler must act on the down
  // message itself).
  caf::scoped_actor self{sys};
  self->monitor(h);
  self->send(h, remote_build_atom::value, std::string("\"hang\""));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  bool down = false, answered = false;
  for (int i = 0; i < 2 && !down; ++i) {
    self->receive([&](const caf::down_msg& m) { down = m.source == h.address(); },
                  [&](const std::string&) { answered = true; },
                  caf::after(std::chrono::seconds(30)) >> [] {});
  }
  EXPECT_FALSE(answered);
  EXPECT_TRUE(down) << "no down message for the killed worker's builder";
}

}  // namespace
}  // namespace kiln
