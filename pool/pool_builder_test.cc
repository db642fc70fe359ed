// PoolBuilder against three stand-in worker processes (pool_builder_peer) over real loopback
// mutual TLS, certificates made here with openssl: builds go to the candidate's rendezvous
// worker and come back to it; the push goes to the worker that built; a worker killed with -9
// while a build is open fails that attempt on its down message, is journaled once, and the
// build is retried on another worker where it runs to its answer; a second loss is not retried
// again; a connection dropped to a worker that is alive is re-attached, not retried.
#include "pool/pool_builder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "net/http_client.h"
#include "pool/pool_discovery.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

int Sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The worker_lost records of a pool journal (it also holds every dispatch, issue 20).
std::vector<nlohmann::json> Losses(const fs::path& p) {
  std::stringstream ss(Read(p));
  std::vector<nlohmann::json> recs;
  for (std::string line; std::getline(ss, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["event"] == "worker_lost") recs.push_back(j);
  }
  return recs;
}

// A TCP relay on 127.0.0.1 to a worker's port: what passes through it is the scheduler's TLS
// untouched. Cut() closes the connections it carries (the scheduler sees its connection to a
// live worker drop) and keeps accepting new ones.
class Relay {
 public:
  explicit Relay(int target_port) : target_(target_port) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(lfd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(lfd_, 8) != 0 ||
        ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::pipe(wake_) != 0)
      std::abort();
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Relay() {
    stop_ = true;
    Wake();
    thread_.join();
    ::close(lfd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  int port() const { return port_; }
  void Cut() {
    cut_ = true;
    Wake();
  }
  int accepted() const { return accepted_; }

 private:
  void Wake() {
    char c = 'x';
    if (::write(wake_[1], &c, 1) != 1) std::abort();
  }
  void Loop() {
    std::vector<std::pair<int, int>> pairs;  // (from the scheduler, to the worker)
    auto close_pair = [](std::pair<int, int>& p) {
      ::shutdown(p.first, SHUT_RDWR);
      ::close(p.first);
      ::close(p.second);
    };
    while (!stop_) {
      std::vector<pollfd> fds = {{lfd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (auto& [a, b] : pairs) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[1].revents) {
        char buf[16];
        (void)!::read(wake_[0], buf, sizeof buf);
        if (cut_.exchange(false)) {
          for (auto& p : pairs) close_pair(p);
          pairs.clear();
          continue;
        }
      }
      if (fds[0].revents & POLLIN) {
        int c = ::accept(lfd_, nullptr, nullptr);
        int w = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(target_));
        if (c >= 0 && ::connect(w, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
          pairs.emplace_back(c, w);
          ++accepted_;
        } else {
          if (c >= 0) ::close(c);
          ::close(w);
        }
        continue;  // fds no longer matches pairs
      }
      for (size_t i = 0; i < pairs.size(); ++i) {
        for (int dir = 0; dir < 2; ++dir) {
          if (!(fds[2 + 2 * i + dir].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          int from = dir == 0 ? pairs[i].first : pairs[i].second;
          int to = dir == 0 ? pairs[i].second : pairs[i].first;
          char buf[16384];
          ssize_t n = ::read(from, buf, sizeof buf);
          bool ok = n > 0;
          for (ssize_t off = 0; ok && off < n;) {
            ssize_t m = ::write(to, buf + off, static_cast<size_t>(n - off));
            ok = m > 0;
            off += m;
          }
          if (!ok) {
            close_pair(pairs[i]);
            pairs[i] = {-1, -1};
            break;
          }
        }
      }
      pairs.erase(std::remove(pairs.begin(), pairs.end(), std::pair<int, int>{-1, -1}),
                  pairs.end());
    }
    for (auto& p : pairs) close_pair(p);
  }

  const int target_;
  int lfd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false}, cut_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

class PoolBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-pool-builder-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string d = dir_.string();
    for (const std::string ca : {"scheduler-ca", "worker-ca"})
      ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca +
                   ".key -out " + ca + ".crt -subj /CN=" + ca + " -days 2"),
                0);
    for (const auto& [name, ca] :
         std::vector<std::pair<std::string, std::string>>{{"scheduler", "scheduler-ca"},
                                                          {"w1", "worker-ca"},
                                                          {"w2", "worker-ca"},
                                                          {"w3", "worker-ca"}})
      ASSERT_EQ(
          Sh("cd " + d + " && openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " +
             name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " + name + ".csr -CA " +
             ca + ".crt -CAkey " + ca + ".key -CAcreateserial -out " + name + ".crt -days 2"),
          0);
    for (const std::string w : {"w1", "w2", "w3"}) Start(w);
    PoolBuilderOptions o;
    for (const auto& [w, port] : ports_) {
      const std::string a = "127.0.0.1:" + std::to_string(port);
      o.workers.push_back(a);
      name_of_[a] = w;
    }
    o.tls = {d + "/scheduler.crt", d + "/scheduler.key", d + "/worker-ca.crt"};
    o.git_url = [](const std::string& dom) { return "http://127.0.0.1:1/git/" + dom + ".git"; };
    o.journal_file = d + "/pool-journal.jsonl";
    pool_ = std::make_unique<PoolBuilder>(o);
  }
  void TearDown() override {
    pool_.reset();
    for (auto& [w, pid] : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  void Start(const std::string& w) {
    const fs::path pf = dir_ / (w + ".port");
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::execl(KILN_POOL_PEER, KILN_POOL_PEER, dir_.c_str(), w.c_str(), pf.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(pf); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(fs::exists(pf)) << "pool_builder_peer " << w << " did not start";
    int port = 0;
    std::ifstream(pf) >> port;
    ports_[w] = port;
    pids_[w] = pid;
  }
  void Kill(const std::string& w) {
    ::kill(pids_[w], SIGKILL);
    ::waitpid(pids_[w], nullptr, 0);
    pids_.erase(w);
  }
  BuildJob Job(const std::string& cand, const std::string& id) {
    BuildJob j;
    j.build_id = id;
    j.domain = "d";
    j.candidate = cand;
    j.commit = std::string(40, 'a');
    j.key = "key-" + id;
    j.registry.name = "local";
    j.repository = "loop/app";
    j.build.timeout_s = 30;
    return j;
  }
  // The stand-in worker's name of the worker that ran `build_id` last.
  std::string Ran(const std::string& build_id) { return name_of_[pool_->WorkerOf(build_id)]; }
  // Requests of op `op` for `build_id` that worker `w` received.
  int Requests(const std::string& w, const std::string& op, const std::string& build_id) {
    std::stringstream ss(Read(dir_ / (w + ".requests")));
    int n = 0;
    for (std::string line; std::getline(ss, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("op", "") == op && j.value("build_id", "") == build_id) ++n;
    }
    return n;
  }

  fs::path dir_;
  std::map<std::string, int> ports_;
  std::map<std::string, pid_t> pids_;
  std::map<std::string, std::string> name_of_;  // "127.0.0.1:port" -> w1..w3
  std::unique_ptr<PoolBuilder> pool_;
};

TEST_F(PoolBuilderTest, AffinitySpreadsCandidatesAndBringsThemBack) {
  std::map<std::string, std::string> first;
  std::set<std::string> used;
  std::string log;
  for (int i = 0; i < 12; ++i) {
    const std::string c = "c" + std::to_string(i);
    BuildResult r = pool_->Build(
        Job(c, "b" + std::to_string(i)), [&](std::string_view s) { log.append(s); }, nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    first[c] = Ran("b" + std::to_string(i));
    EXPECT_EQ(r.image_id, first[c] + ":b" + std::to_string(i));  // the worker's own answer
    used.insert(first[c]);
  }
  EXPECT_GE(used.size(), 2u) << "12 candidates all on one worker";
  EXPECT_NE(log.find("built on "), std::string::npos) << "the worker's log reaches the build log";
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    const std::string c = "c" + std::to_string(i), id = "r" + std::to_string(i);
    std::string out;
    auto t0 = std::chrono::steady_clock::now();
    BuildResult r = pool_->Build(
        Job(c, id), [&](std::string_view s) { out.append(s); }, nullptr);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(Ran(id), first[c]) << c << " did not go back to its worker";
    EXPECT_NE(out.find("(warm)"), std::string::npos) << out;
  }
  // Dispatch round trip over loopback mutual TLS (placement, request, the stand-in worker's
  // immediate answer), connected workers: reported, not asserted (a shared 2-core machine).
  std::sort(ms.begin(), ms.end());
  std::printf(
      "[ measure  ] pool dispatch round trip over loopback TLS: median %.2f ms, max %.2f ms "
      "(n=%zu)\n",
      ms[ms.size() / 2], ms.back(), ms.size());
  // The push of a build goes to the worker that holds its image.
  BuildResult built;
  built.image_id = "img";
  PushResult p = pool_->Push(
      Job("c3", "r3"), built, [](std::string_view) {}, nullptr);
  ASSERT_TRUE(p.status.ok()) << p.status.message();
  EXPECT_EQ(p.digest, "sha256:" + first["c3"]);
  EXPECT_EQ(Requests(first["c3"], "push", "r3"), 1);
}

TEST_F(PoolBuilderTest, KilledWorkerMidBuildIsRetriedOnceOnAnother) {
  // "hang1" hangs on whichever worker it lands on; kill that worker while the build is open.
  BuildResult res;
  std::string log;
  std::thread t([&] {
    res = pool_->Build(
        Job("hang1", "bh"), [&](std::string_view s) { log.append(s); }, nullptr);
  });
  std::string victim;
  for (int i = 0; i < 500 && victim.empty(); ++i) {
    for (const std::string w : {"w1", "w2", "w3"})
      if (fs::exists(dir_ / (w + ".requests")) && Requests(w, "build", "bh") == 1) victim = w;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(victim.empty()) << "no worker got the build";
  auto t0 = std::chrono::steady_clock::now();
  Kill(victim);
  // The retry lands on another worker, where "hang1" hangs again: kill that one too. The build
  // must then fail (one retry only), promptly, on the down message — not by a timeout.
  std::string second;
  for (int i = 0; i < 500 && second.empty(); ++i) {
    for (const std::string w : {"w1", "w2", "w3"})
      if (w != victim && fs::exists(dir_ / (w + ".requests")) && Requests(w, "build", "bh") == 1)
        second = w;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(second.empty()) << "the build was not retried on another worker; log: " << log;
  Kill(second);
  t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 20) << "a lost worker must fail the attempt on its down message";
  EXPECT_EQ(res.status.code(), Status::Code::kUnavailable) << res.status.message();
  EXPECT_EQ(res.failure_kind, "infrastructure");
  int builds = 0;
  for (const std::string w : {"w1", "w2", "w3"})
    if (fs::exists(dir_ / (w + ".requests"))) builds += Requests(w, "build", "bh");
  EXPECT_EQ(builds, 2) << "one attempt and exactly one retry";
  EXPECT_NE(log.find("lost mid-build; retrying on another worker"), std::string::npos) << log;
  // Journal: two losses of this build, the first retried, the second not.
  std::vector<nlohmann::json> recs = Losses(dir_ / "pool-journal.jsonl");
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0]["event"], "worker_lost");
  EXPECT_EQ(recs[0]["build_id"], "bh");
  EXPECT_EQ(name_of_[recs[0]["worker"].get<std::string>()], victim);
  EXPECT_TRUE(recs[0]["retry"].get<bool>());
  EXPECT_EQ(name_of_[recs[1]["worker"].get<std::string>()], second);
  EXPECT_FALSE(recs[1]["retry"].get<bool>());

  // The one worker left still builds (a build that does not hang), even for a candidate whose
  // preferred worker is gone.
  for (int i = 0; i < 4; ++i) {
    BuildResult r = pool_->Build(
        Job("c" + std::to_string(i), "after" + std::to_string(i)), [](std::string_view) {},
        nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_NE(Ran("after" + std::to_string(i)), victim);
    EXPECT_NE(Ran("after" + std::to_string(i)), second);
  }
}

TEST_F(PoolBuilderTest, BuildRetriedAfterAKillSucceedsOnTheLiveWorker) {
  // The worker running "hang2" is killed; the retry on a live worker must run to its answer
  // (released by the test only once the retry is there). Regression: the scheduler reported
  // the live worker lost a few ms after the retry was sent (CAF 0.17's OpenSSL session left
  // the dead connection's error in the I/O thread's OpenSSL error queue, and the next read on
  // any other connection took it for its own; docs/architecture.md, "Lost worker").
  // Every worker connected first, as in a scheduler that has been running (a fresh connection's
  // TLS handshake would hide the bug).
  ASSERT_TRUE(pool_->Check().ok());
  BuildResult res;
  std::string log;
  std::thread t([&] {
    res = pool_->Build(
        Job("hang2", "bk"), [&](std::string_view s) { log.append(s); }, nullptr);
  });
  std::string victim;
  for (int i = 0; i < 500 && victim.empty(); ++i) {
    for (const std::string w : {"w1", "w2", "w3"})
      if (fs::exists(dir_ / (w + ".requests")) && Requests(w, "build", "bk") == 1) victim = w;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(victim.empty()) << "no worker got the build";
  Kill(victim);
  std::string second;
  for (int i = 0; i < 500 && second.empty(); ++i) {
    for (const std::string w : {"w1", "w2", "w3"})
      if (w != victim && fs::exists(dir_ / (w + ".requests")) && Requests(w, "build", "bk") >= 1)
        second = w;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(second.empty()) << "the build was not retried on another worker; log: " << log;
  std::ofstream(dir_ / (second + ".release")) << "go\n";
  t.join();
  ASSERT_TRUE(res.status.ok()) << res.status.message() << "\nlog: " << log;
  EXPECT_EQ(res.image_id, second + ":bk");
  EXPECT_EQ(Ran("bk"), second);
  int workers_with_it = 0;
  for (const std::string w : {"w1", "w2", "w3"})
    if (fs::exists(dir_ / (w + ".requests")) && Requests(w, "build", "bk") > 0) ++workers_with_it;
  EXPECT_EQ(workers_with_it, 2) << "the killed worker and exactly one other";
  std::vector<nlohmann::json> recs = Losses(dir_ / "pool-journal.jsonl");
  ASSERT_EQ(recs.size(), 1u) << "one loss only: the live worker was not reported lost";
  EXPECT_EQ(name_of_[recs[0]["worker"].get<std::string>()], victim);
  EXPECT_TRUE(recs[0]["retry"].get<bool>());
  // The live worker keeps building, over the same pool, without being lost again.
  BuildResult again = pool_->Build(
      Job("c0", "after-kill"), [](std::string_view) {}, nullptr);
  EXPECT_TRUE(again.status.ok()) << again.status.message();
}

// Issue 20: the pool journal holds every dispatch; it stays bounded (compacted to the last
// 4096 dispatches, worker losses kept) and a restarted scheduler finds the recent ones.
TEST_F(PoolBuilderTest, PoolJournalOfManyDispatchesIsCompactedAndStillResumable) {
  const fs::path file = dir_ / "big-journal.jsonl";
  {
    std::ofstream out(file);
    out << nlohmann::json{{"event", "worker_lost"}, {"build_id", "lost-1"}}.dump() << "\n";
    for (int i = 0; i < 9000; ++i)
      out << nlohmann::json{{"event", "dispatched"},
                            {"build_id", "b" + std::to_string(i)},
                            {"commit", std::string(40, 'c')},
                            {"key", "k" + std::to_string(i)},
                            {"worker", "127.0.0.1:1"}}
                 .dump()
          << "\n";
  }
  PoolBuilderOptions o;
  o.journal_file = file.string();
  PoolBuilder pool(o);
  std::string commit, key;
  EXPECT_TRUE(pool.Resumable("b8999", &commit, &key));
  EXPECT_EQ(key, "k8999");
  EXPECT_TRUE(pool.Resumable("b4904", &commit, &key));  // the 4096th from the end
  EXPECT_FALSE(pool.Resumable("b4903", &commit, &key));
  std::stringstream ss(Read(file));
  size_t lines = 0;
  for (std::string line; std::getline(ss, line);) ++lines;
  EXPECT_EQ(lines, 4096u + 1);
  EXPECT_EQ(Losses(file).size(), 1u);
}

TEST_F(PoolBuilderTest, DroppedConnectionToALiveWorkerReattachesWithoutARetry) {
  // A pool whose one worker (w1) is reached through a relay. The relay drops the connection
  // while the build is open: the scheduler sees the worker's actor go down, but the worker
  // answers on a new connection, so this is not a lost worker — the same request goes to it
  // again (it joins the build it runs for that id), nothing is journaled, no other worker.
  Relay relay(ports_["w1"]);
  PoolBuilderOptions o;
  const std::string d = dir_.string();
  o.workers = {"127.0.0.1:" + std::to_string(relay.port())};
  o.tls = {d + "/scheduler.crt", d + "/scheduler.key", d + "/worker-ca.crt"};
  o.git_url = [](const std::string& dom) { return "http://127.0.0.1:1/git/" + dom + ".git"; };
  o.journal_file = d + "/relay-journal.jsonl";
  PoolBuilder pool(o);
  BuildResult res;
  std::string log;
  std::thread t([&] {
    res = pool.Build(
        Job("hang3", "bd"), [&](std::string_view s) { log.append(s); }, nullptr);
  });
  for (int i = 0; i < 500 && !(fs::exists(dir_ / "w1.requests") && Requests("w1", "build", "bd"));
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(Requests("w1", "build", "bd"), 1) << "w1 did not get the build";
  const int conns = relay.accepted();
  relay.Cut();
  for (int i = 0; i < 500 && Requests("w1", "build", "bd") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Requests("w1", "build", "bd"), 2) << "the request was not sent again; log: " << log;
  EXPECT_GT(relay.accepted(), conns) << "no new connection after the drop";
  std::ofstream(dir_ / "w1.release") << "go\n";
  t.join();
  ASSERT_TRUE(res.status.ok()) << res.status.message() << "\nlog: " << log;
  EXPECT_EQ(res.image_id, "w1:bd");
  EXPECT_NE(log.find("re-attached to the build"), std::string::npos) << log;
  EXPECT_EQ(log.find("lost mid-build"), std::string::npos) << log;
  EXPECT_TRUE(Losses(dir_ / "relay-journal.jsonl").empty()) << Read(dir_ / "relay-journal.jsonl");
  // Issue 20: the dispatch itself is journaled once (a restarted scheduler asks after it).
  std::unique_ptr<PoolBuilder> restarted;
  {
    PoolBuilderOptions ro;
    ro.journal_file = (dir_ / "relay-journal.jsonl").string();
    restarted = std::make_unique<PoolBuilder>(ro);
  }
  std::string commit, key;
  EXPECT_TRUE(restarted->Resumable("bd", &commit, &key));
  EXPECT_EQ(key, "key-bd");
  EXPECT_EQ(commit, std::string(40, 'a'));
  EXPECT_FALSE(restarted->Resumable("never-dispatched", &commit, &key));
  for (const std::string w : {"w2", "w3"})
    EXPECT_EQ(fs::exists(dir_ / (w + ".requests")) ? Requests(w, "build", "bd") : 0, 0) << w;
}

TEST_F(PoolBuilderTest, WorkerKilledBetweenBuildsIsReplacedAndItsImageNeverPushedElsewhere) {
  // The candidate's worker dies after its build: the next build of the candidate finds it
  // down and runs on another worker; the old build's image cannot be pushed from anywhere.
  BuildResult r0 = pool_->Build(
      Job("plain", "p0"), [](std::string_view) {}, nullptr);
  ASSERT_TRUE(r0.status.ok());
  const std::string home = Ran("p0");
  Kill(home);
  BuildResult r1 = pool_->Build(
      Job("plain", "p1"), [](std::string_view) {}, nullptr);
  ASSERT_TRUE(r1.status.ok()) << r1.status.message();
  EXPECT_NE(Ran("p1"), home);
  // No push of p0 is possible any more: its image was on the lost worker (never pushed twice,
  // never from elsewhere).
  BuildResult built;
  built.image_id = r0.image_id;
  PushResult p = pool_->Push(
      Job("plain", "p0"), built, [](std::string_view) {}, nullptr);
  EXPECT_EQ(p.status.code(), Status::Code::kUnavailable);
}

// Discovery wired into dispatch: the same stand-in workers, found through the worker
// Service's EndpointSlices served by tests/fake_k8s/fake_apiserver.py (HTTPS, certificates
// made here), one slice per worker (each has its own port).
class PoolDiscoveryTest : public PoolBuilderTest {
 protected:
  void SetUp() override {
    PoolBuilderTest::SetUp();
    if (HasFatalFailure()) return;
    const std::string d = dir_.string();
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ASSERT_EQ(Sh("cd " + d + " && openssl req -x509 " + ec +
                 " -keyout api-ca.key -out api-ca.crt -subj /CN=slices-ca -days 2 && "
                 "echo subjectAltName=IP:127.0.0.1 > san && openssl req " +
                 ec +
                 " -keyout api.key -out api.csr -subj /CN=kube-apiserver && "
                 "openssl x509 -req -in api.csr -CA api-ca.crt -CAkey api-ca.key "
                 "-CAcreateserial -out api.crt -days 2 -extfile san"),
              0);
    std::ofstream(dir_ / "tokens.json")
        << nlohmann::json{{"tokens",
                           {{"watcher",
                             {{"user", "system:serviceaccount:kiln:kiln"},
                              {"allow",
                               {{"endpointslices.discovery.k8s.io", {"list", "watch"}}}}}}}}}
               .dump();
    api_pid_ = ::fork();
    ASSERT_GE(api_pid_, 0);
    if (api_pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      std::string port_file = (dir_ / "api.port").string(), cert = (dir_ / "api.crt").string(),
                  key = (dir_ / "api.key").string(), tokens = (dir_ / "tokens.json").string();
      ::execlp("python3", "python3", KILN_FAKE_APISERVER, "--port", "0", "--port-file",
               port_file.c_str(), "--cert", cert.c_str(), "--key", key.c_str(), "--tokens",
               tokens.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 750 && !fs::exists(dir_ / "api.port"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(fs::exists(dir_ / "api.port")) << "fake API server did not start";
    std::ifstream(dir_ / "api.port") >> api_port_;
    TlsOptions t;
    t.ca_file = (dir_ / "api-ca.crt").string();
    ASSERT_TRUE(TlsContext::Create(t, &tls_).ok());
  }
  void TearDown() override {
    if (api_pid_ > 0) {
      ::kill(api_pid_, SIGTERM);
      ::waitpid(api_pid_, nullptr, 0);
    }
    PoolBuilderTest::TearDown();
  }
  std::unique_ptr<KubeClient> Client() {
    KubeConfig cfg;
    cfg.server = "https://127.0.0.1:" + std::to_string(api_port_);
    cfg.tls.ca_file = (dir_ / "api-ca.crt").string();
    cfg.token = TokenSource::Fixed("watcher");
    cfg.namespace_ = "kiln";
    cfg.source = "test";
    std::unique_ptr<KubeClient> c;
    KubeClientOptions o;
    o.attempts = 1;
    EXPECT_TRUE(KubeClient::Create(cfg, o, &c).ok());
    return c;
  }
  void Control(const std::string& method, const std::string& target,
               const nlohmann::json& body = nullptr) {
    HttpOrigin o{true, "127.0.0.1", std::to_string(api_port_)};
    HttpClientRequest req;
    req.method = method;
    req.target = target;
    if (!body.is_null()) req.body = body.dump();
    HttpClientResponse resp;
    ASSERT_TRUE(HttpRoundTrip(o, tls_.get(), req, std::chrono::seconds(10), &resp).ok());
    ASSERT_EQ(resp.status, 200) << resp.body;
  }
  // Worker `w`'s slice: one endpoint (its hostname is the worker's id) at its port.
  void PutSlice(const std::string& w, bool ready) {
    Control("POST", "/_fake/endpointslices",
            {{"apiVersion", "discovery.k8s.io/v1"},
             {"kind", "EndpointSlice"},
             {"metadata",
              {{"name", "kiln-worker-" + w},
               {"namespace", "kiln"},
               {"labels", {{"kubernetes.io/service-name", "kiln-worker"}}}}},
             {"addressType", "IPv4"},
             {"ports", {{{"name", "kiln-worker"}, {"port", ports_[w]}}}},
             {"endpoints",
              {{{"addresses", {"127.0.0.1"}},
                {"hostname", w},
                {"conditions", {{"ready", ready}}},
                {"targetRef", {{"kind", "Pod"}, {"name", w}, {"namespace", "kiln"}}}}}}});
  }
  // Waits (bounded) until the pool's members are `ready` / `not_ready` exactly.
  void WaitMembers(const PoolBuilder& pool, std::set<std::string> ready,
                   std::set<std::string> not_ready = {}) {
    std::set<std::string> r, n;
    for (int i = 0; i < 1500; ++i) {
      r.clear();
      n.clear();
      for (const PoolMember& m : pool.Members()) (m.ready ? r : n).insert(m.id);
      if (r == ready && n == not_ready) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "members never became as expected";
  }
  PoolBuilderOptions Options() {
    const std::string d = dir_.string();
    PoolBuilderOptions o;
    o.tls = {d + "/scheduler.crt", d + "/scheduler.key", d + "/worker-ca.crt"};
    o.git_url = [](const std::string& dom) { return "http://127.0.0.1:1/git/" + dom + ".git"; };
    return o;
  }
  std::string BuildOn(PoolBuilder& pool, const std::string& cand, const std::string& id) {
    BuildResult r = pool.Build(
        Job(cand, id), [](std::string_view) {}, nullptr);
    EXPECT_TRUE(r.status.ok()) << r.status.message();
    return pool.WorkerOf(id);
  }

  pid_t api_pid_ = -1;
  int api_port_ = 0;
  std::shared_ptr<const TlsContext> tls_;
};

TEST_F(PoolDiscoveryTest, WorkersFromEndpointSlicesJoinTurnNotReadyAndLeave) {
  auto client = Client();
  KubeSliceApi api(client.get(), "kiln", "kiln-worker", /*watch_timeout_s=*/1);
  PoolBuilder pool(Options());  // no static workers: the slices decide
  PutSlice("w1", true);
  PutSlice("w2", true);
  PoolDiscovery discovery(&api, "kiln-worker", &pool);
  WaitMembers(pool, {"w1", "w2"});

  std::map<std::string, std::string> first;
  std::set<std::string> used;
  for (int i = 0; i < 12; ++i) {
    const std::string c = "c" + std::to_string(i);
    first[c] = BuildOn(pool, c, "a" + std::to_string(i));
    used.insert(first[c]);
  }
  EXPECT_EQ(used, (std::set<std::string>{"w1", "w2"}));

  // w3 joins (issue 20): the candidates built before stay on their worker, which holds them
  // warm; new candidates spread over all three, some to w3.
  PutSlice("w3", true);
  WaitMembers(pool, {"w1", "w2", "w3"});
  for (int i = 0; i < 12; ++i) {
    const std::string c = "c" + std::to_string(i);
    EXPECT_EQ(BuildOn(pool, c, "b" + std::to_string(i)), first[c]) << c << " moved";
  }
  int on_w3 = 0;
  for (int i = 0; i < 12; ++i)
    on_w3 += BuildOn(pool, "new" + std::to_string(i), "f" + std::to_string(i)) == "w3" ? 1 : 0;
  EXPECT_GT(on_w3, 0) << "the joining worker took no new candidate";
  EXPECT_LT(on_w3, 12);

  // w1 not ready: no build goes there; its candidates go to their next worker.
  PutSlice("w1", false);
  WaitMembers(pool, {"w2", "w3"}, {"w1"});
  for (int i = 0; i < 12; ++i)
    EXPECT_NE(BuildOn(pool, "c" + std::to_string(i), "n" + std::to_string(i)), "w1");

  // w2's slice is deleted: it leaves the pool.
  Control("DELETE", "/_fake/endpointslices/kiln/kiln-worker-w2");
  WaitMembers(pool, {"w3"}, {"w1"});
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(BuildOn(pool, "c" + std::to_string(i), "d" + std::to_string(i)), "w3");
  // w1 ready again: re-admitted, its candidates come back to it.
  PutSlice("w1", true);
  WaitMembers(pool, {"w1", "w3"});
  int back = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string c = "c" + std::to_string(i);
    if (first[c] == "w1" && BuildOn(pool, c, "e" + std::to_string(i)) == "w1") ++back;
  }
  EXPECT_GT(back, 0);
  EXPECT_EQ(discovery.errors(), 0u);
  EXPECT_GE(discovery.lists(), 1u);
}

// scheduler.worker_service as kiln serve starts it: a kubeconfig for the fake API server, the
// pool filled from the Service's slices, a build dispatched to a discovered worker.
TEST_F(PoolDiscoveryTest, ConfiguredServicePoolDispatchesToDiscoveredWorkers) {
  std::ofstream(dir_ / "kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
         "contexts:\n- name: t\n  context: {cluster: fake, user: kiln, namespace: kiln}\n"
         "clusters:\n- name: fake\n  cluster:\n    server: https://127.0.0.1:"
      << api_port_ << "\n    certificate-authority: " << (dir_ / "api-ca.crt").string()
      << "\nusers:\n- name: kiln\n  user:\n    token: watcher\n";
  SchedulerConfig sched;
  sched.worker_service = "kiln-worker";
  sched.worker_service_kubeconfig = (dir_ / "kubeconfig").string();
  PutSlice("w2", true);
  std::shared_ptr<PoolBuilder> pool;
  std::shared_ptr<void> keep;
  Status st = StartServicePool(sched, Options(), &pool, &keep);
  ASSERT_TRUE(st.ok()) << st.message();
  WaitMembers(*pool, {"w2"});
  EXPECT_EQ(BuildOn(*pool, "c1", "s1"), "w2");
  keep.reset();  // stops the discovery thread before the pool goes
  pool.reset();

  // Without a kubeconfig and outside a cluster: a clear error naming the key.
  SchedulerConfig in_cluster;
  in_cluster.worker_service = "kiln-worker";
  InClusterSource nowhere;  // no KUBERNETES_SERVICE_HOST/PORT
  st = StartServicePool(in_cluster, Options(), &pool, &keep, &nowhere);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("scheduler.worker_service: "), std::string::npos) << st.message();
  EXPECT_EQ(pool, nullptr);
}

}  // namespace
}  // namespace kiln
