// A real `kiln worker` process over loopback mutual TLS (certificates made here with openssl),
// without buildah or a registry: it advertises its slots; a build request whose build config
// the parser refuses (a root build user) is refused before anything runs; a build whose source
// cannot be fetched fails as infrastructure naming the commit — both answered asynchronously
// from the worker's build threads; a scheduler certificate of another CA is refused; a full
// worker answers busy at once, and a build id asked again joins the running build.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/scoped_actor.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pool/build_wire.h"
#include "pool/remote_builder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int Sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-worker-proc-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string d = dir_.string();
    for (const std::string ca : {"scheduler-ca", "worker-ca", "rogue-ca"})
      ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca +
                   ".key -out " + ca + ".crt -subj /CN=" + ca + " -days 2"),
                0);
    for (const auto& [name, ca] : std::vector<std::pair<std::string, std::string>>{
             {"scheduler", "scheduler-ca"}, {"w", "worker-ca"}, {"rogue", "rogue-ca"}})
      ASSERT_EQ(
          Sh("cd " + d + " && openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " +
             name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " + name + ".csr -CA " +
             ca + ".crt -CAkey " + ca + ".key -CAcreateserial -out " + name + ".crt -days 2"),
          0);
    std::ofstream(dir_ / "token") << "worker-secret-token\n";
    json cfg = {
        {"server", {{"state_dir", d + "/state"}}},
        {"registries", {{"local", {{"url", "http://127.0.0.1:5999"}}}}},
        {"worker",
         {{"name", "w"},
          {"listen", "127.0.0.1:0"},
          {"slots", 2},
          {"port_file", "port"},
          {"git_token_file", "token"},
          {"tls",
           {{"certificate", "w.crt"}, {"key", "w.key"}, {"scheduler_ca", "scheduler-ca.crt"}}}}}};
    std::ofstream(dir_ / "worker.json") << cfg.dump();
    const std::string log = d + "/worker.log";
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::dup2(2, 1);
      const std::string c = d + "/worker.json";
      ::execl(KILN_BINARY, KILN_BINARY, "worker", "--config", c.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(dir_ / "port"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(fs::exists(dir_ / "port")) << "kiln worker did not start";
    std::ifstream(dir_ / "port") >> port_;
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  PoolTlsConfig Tls(const std::string& who) const {
    return {(dir_ / (who + ".crt")).string(), (dir_ / (who + ".key")).string(),
            (dir_ / "worker-ca.crt").string()};
  }
  RemoteBuildAnswer Ask(caf::actor_system& sys, const remote_builder_actor& h,
                        const RemoteBuildRequest& r) {
    caf::scoped_actor self{sys};
    RemoteBuildAnswer a;
    self->request(h, std::chrono::seconds(60), remote_build_atom::value,
                  RemoteBuildRequestToText(r))
        .receive(
            [&](const std::string& text) { EXPECT_TRUE(RemoteBuildAnswerFromText(text, &a).ok()); },
            [&](const caf::error& e) { ADD_FAILURE() << sys.render(e); });
    return a;
  }
  RemoteBuildRequest Build(const std::string& user) {
    RemoteBuildRequest r;
    r.build_id = "b-0000000000000001";
    r.domain = "d";
    r.candidate = "c1";
    r.commit = std::string(40, 'a');
    r.key = "k";
    r.git_url = "http://127.0.0.1:1/git/d.git";  // nothing listens there
    r.image_registry = "local";
    r.image_repository = "loop/app";
    BuildConfig b;
    b.user = "kiln-build";
    r.build = BuildConfigToJson(b);
    r.build["user"] = user;
    return r;
  }

  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(WorkerProcessTest, AdvertisesSlotsRefusesBadRequestsAndReportsFetchFailures) {
  PoolSystemConfig cfg(Tls("scheduler"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  Status st = ConnectRemoteBuilder(sys, "127.0.0.1", static_cast<uint16_t>(port_), &h);
  ASSERT_TRUE(st.ok()) << st.message();

  RemoteBuildRequest info;
  info.op = "info";
  RemoteBuildAnswer a = Ask(sys, h, info);
  EXPECT_EQ(a.op, "info");
  EXPECT_EQ(a.worker, "w");
  EXPECT_EQ(a.info.value("slots", 0), 2);

  a = Ask(sys, h, Build("root"));
  EXPECT_EQ(a.build.status.code(), Status::Code::kInvalidArgument) << a.build.status.message();
  EXPECT_NE(a.build.status.message().find("domains.d.build.user"), std::string::npos)
      << a.build.status.message();

  auto t0 = std::chrono::steady_clock::now();
  a = Ask(sys, h, Build("kiln-build"));
  EXPECT_EQ(a.op, "build");
  EXPECT_EQ(a.build_id, "b-0000000000000001");
  EXPECT_EQ(a.build.status.code(), Status::Code::kUnavailable) << a.build.status.message();
  EXPECT_EQ(a.build.failure_kind, "infrastructure");
  EXPECT_NE(a.build.status.message().find("aaaaaaaaaaaa"), std::string::npos)
      << a.build.status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // The worker's bare repository for the candidate was made; the token is nowhere in what the
  // worker says or logs.
  EXPECT_TRUE(fs::exists(dir_ / "state/worker/domains/d/candidates/c1/repo.git/HEAD"));
  std::ifstream in(dir_ / "worker.log");
  std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(log.find("worker-secret-token"), std::string::npos);
  EXPECT_EQ(a.build.status.message().find("worker-secret-token"), std::string::npos);
  EXPECT_NE(log.find("worker: build b-0000000000000001"), std::string::npos) << log;

  // Issue 20: a restarted scheduler's attach gets the ended build's answer again, and for a
  // build id the worker never ran, "unknown" — without building anything.
  RemoteBuildRequest attach;
  attach.op = "attach";
  attach.build_id = "b-0000000000000001";
  a = Ask(sys, h, attach);
  EXPECT_EQ(a.op, "build");
  EXPECT_EQ(a.build.status.code(), Status::Code::kUnavailable) << a.build.status.message();
  EXPECT_EQ(a.build.failure_kind, "infrastructure");
  attach.build_id = "b-00000000000000ff";
  a = Ask(sys, h, attach);
  EXPECT_EQ(a.op, "build");
  EXPECT_EQ(a.build_id, "b-00000000000000ff");
  EXPECT_EQ(a.build.failure_kind, "unknown_build");
  EXPECT_EQ(a.build.status.code(), Status::Code::kNotFound) << a.build.status.message();
  std::ifstream in2(dir_ / "worker.log");
  log.assign(std::istreambuf_iterator<char>(in2), {});
  EXPECT_NE(log.find("worker: attach b-0000000000000001: it ended, answering again"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("worker: attach b-00000000000000ff: unknown build, nothing started"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("worker: build b-00000000000000ff"), std::string::npos) << log;
}

TEST_F(WorkerProcessTest, FullWorkerAnswersBusyAndARepeatedBuildJoinsTheRunningOne) {
  // A git endpoint that accepts connections (the kernel's backlog) and never answers: every
  // build's fetch hangs there, so builds stay admitted for the whole test.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/git/d.git";

  PoolSystemConfig cfg(Tls("scheduler"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  Status st = ConnectRemoteBuilder(sys, "127.0.0.1", static_cast<uint16_t>(port_), &h);
  ASSERT_TRUE(st.ok()) << st.message();
  auto build = [&](int i) {
    RemoteBuildRequest r = Build("kiln-build");
    r.build_id = "b-hang-" + std::to_string(i);
    r.candidate = "c" + std::to_string(i);
    r.git_url = url;
    return r;
  };
  // slots 2: two builds run, two wait; their answers never come during the test.
  caf::scoped_actor self{sys};
  for (int i = 1; i <= 4; ++i)
    self->send(h, remote_build_atom::value, RemoteBuildRequestToText(build(i)));
  // The fifth is refused at once, as busy (the same sender's messages arrive in order).
  RemoteBuildAnswer a = Ask(sys, h, build(5));
  EXPECT_TRUE(a.busy);
  EXPECT_EQ(a.op, "build");
  EXPECT_EQ(a.build_id, "b-hang-5");
  EXPECT_EQ(a.build.status.code(), Status::Code::kResourceExhausted) << a.build.status.message();
  EXPECT_NE(a.build.status.message().find("worker w busy: 4 builds"), std::string::npos)
      << a.build.status.message();
  // Asked again, a running build id joins it: no new build, no busy answer.
  self->send(h, remote_build_atom::value, RemoteBuildRequestToText(build(1)));
  // Issue 20: a restarted scheduler's attach (no build config at all) joins it too.
  RemoteBuildRequest attach;
  attach.op = "attach";
  attach.build_id = "b-hang-2";
  self->send(h, remote_build_atom::value, RemoteBuildRequestToText(attach));
  RemoteBuildRequest info;
  info.op = "info";
  a = Ask(sys, h, info);  // answered after the repeated request was handled (in order)
  EXPECT_EQ(a.info.value("slots", 0), 2);
  std::ifstream in(dir_ / "worker.log");
  std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("worker: build b-hang-1 asked again: joining the running one"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("worker: build b-hang-5 refused: busy"), std::string::npos) << log;
  EXPECT_NE(log.find("worker: attach b-hang-2: joining the running build"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("worker: build b-hang-5 of"), std::string::npos) << log;
  ::close(lfd);
}

TEST_F(WorkerProcessTest, SchedulerOfAnotherCaIsRefused) {
  PoolSystemConfig cfg(Tls("rogue"));
  caf::actor_system sys(cfg);
  remote_builder_actor h;
  EXPECT_FALSE(ConnectRemoteBuilder(sys, "127.0.0.1", static_cast<uint16_t>(port_), &h).ok());
}

}  // namespace
}  // namespace kiln
