// Crash test for StateStore: forks a child that records builds as fast as it can and reports
// every acknowledged record through a pipe, SIGKILLs it at random points (>= 20) and at every
// step of a compaction (through a FaultFileSystem hook that kills the child right before the
// chosen file operation), then reloads and checks: no acknowledged record lost, no id handed
// out twice, no corruption, no build left running.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "state/fault_file_system.h"
#include "state/state_store.h"
#include "state/test_util.h"

namespace kiln {
namespace {

constexpr uint64_t kThreshold = 16 << 10;  // small: compactions happen every few dozen records

void WriteLine(int fd, const std::string& line) {
  std::string l = line + "\n";
  size_t off = 0;
  while (off < l.size()) {
    ssize_t n = ::write(fd, l.data() + off, l.size() - off);
    if (n <= 0) _exit(5);
    off += static_cast<size_t>(n);
  }
}

// The child: records builds until killed. kill_at > 0: SIGKILL itself right before the
// kill_at-th file operation of its first compaction.
[[noreturn]] void Child(const std::string& dir, int fd, uint64_t seed, int kill_at) {
  FaultFileSystem fs(FileSystem::Default());
  StateStoreOptions o;
  o.fs = &fs;
  o.compact_threshold_bytes = kThreshold;
  o.max_builds_per_candidate = 1 << 20;  // keep everything: the parent checks every build
  StateStore store(o);
  LoadSummary summary;
  if (!store.Load(dir, &summary).ok()) _exit(3);
  int in_compaction = 0;
  if (kill_at > 0) {
    fs.set_hook([&](FaultFileSystem::Op op) {
      if (op == FaultFileSystem::Op::kOpen) in_compaction = std::max(in_compaction, 1);
      if (in_compaction && in_compaction++ == kill_at) ::raise(SIGKILL);
    });
  }
  WriteLine(fd, "L");
  std::mt19937_64 rng(seed);
  for (;;) {
    BuildRecord b;
    b.domain = "d" + std::to_string(rng() % 2);
    b.candidate = "c" + std::to_string(rng() % 5);
    b.commit = std::string(40, 'a');
    b.build_key = std::string(63, '0') + std::to_string(rng() % 10);
    b.status = BuildStatus::kRunning;
    if (!store.RecordBuildStarted(&b).ok()) _exit(4);
    WriteLine(fd, "S " + b.id);
    if (rng() % 4 == 0) continue;  // left running
    BuildFinish f;
    f.id = b.id;
    f.status = rng() % 2 ? BuildStatus::kSucceeded : BuildStatus::kFailed;
    f.digest = "sha256:" + std::string(64, 'b');
    f.image_ref = "r/x@" + f.digest;
    f.diagnostics = {{"main.go", 1, 2, "error", std::string(rng() % 300, 'm')}};
    if (!store.RecordBuildFinished(f).ok()) _exit(4);
    WriteLine(fd, "F " + b.id + " " + (f.status == BuildStatus::kSucceeded ? "ok" : "failed"));
  }
}

struct Acks {
  std::map<BuildId, std::string> builds;  // id -> "" (started) / "ok" / "failed"
  size_t lines = 0;
};

// Reads acknowledgements until `deadline` (or EOF); returns false on EOF.
bool ReadAcks(int fd, std::string* buf, Acks* acks, std::set<BuildId>* all_ids,
              std::chrono::steady_clock::time_point deadline, bool* loaded) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char tmp[4096];
    ssize_t n = ::read(fd, tmp, sizeof tmp);
    if (n <= 0) return false;
    buf->append(tmp, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf->find('\n')) != std::string::npos) {
      std::istringstream line(buf->substr(0, nl));
      buf->erase(0, nl + 1);
      std::string kind, id, status;
      line >> kind >> id >> status;
      ++acks->lines;
      if (kind == "L") {
        *loaded = true;
      } else if (kind == "S") {
        EXPECT_TRUE(all_ids->insert(id).second) << "id handed out twice: " << id;
        acks->builds[id] = "";
      } else if (kind == "F") {
        acks->builds[id] = status;
      }
    }
  }
}

// Runs one child; kill_at == 0: the parent SIGKILLs it `run_ms` after it loaded.
void RunRound(const std::string& dir, uint64_t seed, int kill_at, int run_ms, Acks* acks,
              std::set<BuildId>* all_ids) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    Child(dir, fds[1], seed, kill_at);
  }
  ::close(fds[1]);
  std::string buf;
  bool loaded = false;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto give_up = now() + std::chrono::seconds(60);
  bool open = true;
  while (open && !loaded && now() < give_up) {
    open = ReadAcks(fds[0], &buf, acks, all_ids, now() + std::chrono::milliseconds(50), &loaded);
  }
  if (open) {
    auto until = kill_at > 0 ? give_up : now() + std::chrono::milliseconds(run_ms);
    ReadAcks(fds[0], &buf, acks, all_ids, until, &loaded);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ReadAcks(fds[0], &buf, acks, all_ids, now() + std::chrono::seconds(5), &loaded);
  ::close(fds[0]);
  EXPECT_TRUE(loaded) << "child did not load (status " << status << ")";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
}

// Reloads and checks every acknowledged record of every round so far.
void Verify(const std::string& dir, const Acks& acks, size_t rounds, uint64_t* generation) {
  StateStore store(StateStoreOptions{});
  LoadSummary sum;
  Status s = store.Load(dir, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(sum.corruptions.empty()) << sum.corruptions.front();
  EXPECT_TRUE(store.ActiveBuilds().empty());
  uint64_t max_seq = 0;
  for (const auto& [id, status] : acks.builds) {
    auto b = store.Build(id);
    ASSERT_TRUE(b) << "acknowledged build lost: " << id;
    if (status == "ok") {
      EXPECT_EQ(b->status, BuildStatus::kSucceeded) << id;
    } else if (status == "failed") {
      EXPECT_EQ(b->status, BuildStatus::kFailed) << id;
    } else {
      EXPECT_TRUE(b->status == BuildStatus::kInterrupted || b->status == BuildStatus::kSucceeded ||
                  b->status == BuildStatus::kFailed)
          << id;
    }
    max_seq = std::max<uint64_t>(max_seq, std::stoull(id.substr(2), nullptr, 16));
  }
  // At most one build per round was recorded without its acknowledgement reaching us.
  EXPECT_LE(store.build_count(), acks.builds.size() + rounds);
  EXPECT_GT(store.next_build_seq(), max_seq);
  *generation = store.generation();
}

TEST(StateCrash, SigkillAtRandomPointsAndDuringCompaction) {
  testing_state::TempDir dir;
  Acks acks;
  std::set<BuildId> all_ids;
  std::mt19937 rng(20240611);
  const int kRandomRounds = 24;
  const int kCompactionSteps = 11;  // every file operation of a compaction, and the one after
  uint64_t generation = 0, first_generation = 0;
  size_t rounds = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kRandomRounds + kCompactionSteps; ++r) {
    bool targeted = r >= kRandomRounds;
    int kill_at = targeted ? r - kRandomRounds + 1 : 0;
    int run_ms = 5 + static_cast<int>(rng() % 120);
    RunRound(dir.path(), rng(), kill_at, run_ms, &acks, &all_ids);
    ++rounds;
    if (::testing::Test::HasFatalFailure()) return;
    Verify(dir.path(), acks, rounds, &generation);
    if (r == 0) first_generation = generation;
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "crash test: %zu SIGKILLs (%d during compaction steps), %zu acknowledged builds, "
      "%zu ack lines, generation %llu -> %llu, %.1f s\n",
      rounds, kCompactionSteps, acks.builds.size(), acks.lines,
      static_cast<unsigned long long>(first_generation),
      static_cast<unsigned long long>(generation), secs);
  EXPECT_GT(generation, first_generation) << "no compaction happened";
}

}  // namespace
}  // namespace kiln
