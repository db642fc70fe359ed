// Measures StateStore::Load with 10,000 build records (started + finished, two diagnostics
// each), once replayed from the journal and once from a snapshot. Target: < 1 s each.
// Prints the numbers (a benchmark: no timing is asserted). With KILN_LOAD_BENCH_STATE_DIR=DIR
// the fixture is also left in DIR/state (4 domains "domain0".."domain3" of 20 candidates), for
// bench/restart_bench.sh.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "state/state_store.h"
#include "state/test_util.h"

namespace kiln {
namespace {

constexpr int kBuilds = 10000;

double CpuSeconds() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Returns the wall time of one Load; *cpu gets its CPU time (a fairer number on a busy box).
double LoadSeconds(const std::string& dir, LoadSummary* sum, double* cpu) {
  auto t0 = std::chrono::steady_clock::now();
  double c0 = CpuSeconds();
  StateStoreOptions o;
  o.max_builds_per_candidate = kBuilds;           // keep them all
  o.compact_threshold_bytes = uint64_t{1} << 40;  // measure the load, not a compaction
  StateStore store(o);
  Status s = store.Load(dir, sum);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(store.build_count(), static_cast<size_t>(kBuilds));
  *cpu = CpuSeconds() - c0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(StateLoadBench, TenThousandBuilds) {
  testing_state::TempDir dir;
  uint64_t journal_bytes = 0;
  {
    StateStoreOptions o;
    o.sync = false;  // writing the fixture; the load is what is measured
    o.compact_threshold_bytes = uint64_t{1} << 40;
    o.max_builds_per_candidate = kBuilds;
    StateStore store(o);
    LoadSummary sum;
    ASSERT_TRUE(store.Load(dir.path(), &sum).ok());
    for (int i = 0; i < kBuilds; ++i) {
      BuildRecord b;
      b.domain = "domain" + std::to_string(i % 4);
      b.candidate = "cand" + std::to_string(i % 20);
      b.commit = "0123456789abcdef0123456789abcdef01234567";
      b.build_key = std::string(60, 'f') + std::to_string(1000 + i % 9000);
      b.status = BuildStatus::kRunning;
      ASSERT_TRUE(store.RecordBuildStarted(&b).ok());
      BuildFinish f;
      f.id = b.id;
      f.status = i % 3 ? BuildStatus::kSucceeded : BuildStatus::kFailed;
      f.digest = "sha256:" + std::string(64, 'c');
      f.image_ref = "127.0.0.1:5000/loop/app@" + f.digest;
      f.diagnostics = {{"cmd/server/main.go", 42, 7, "error", "undefined: handler"},
                       {"internal/x/y.go", 9, 1, "warning", "unused variable 'z'"}};
      f.timings = {100, 20000, 3000, 23100, {}};
      ASSERT_TRUE(store.RecordBuildFinished(f).ok());
    }
    journal_bytes = store.journal_bytes();
  }
  LoadSummary from_journal;
  double journal_cpu = 0;
  double journal_s = LoadSeconds(dir.path(), &from_journal, &journal_cpu);
  EXPECT_EQ(from_journal.journal_records, 2u * kBuilds);
  {
    StateStoreOptions o;
    o.max_builds_per_candidate = kBuilds;
    StateStore store(o);
    LoadSummary sum;
    ASSERT_TRUE(store.Load(dir.path(), &sum).ok());
    ASSERT_TRUE(store.Compact().ok());
  }
  LoadSummary from_snapshot;
  double snapshot_cpu = 0;
  double snapshot_s = LoadSeconds(dir.path(), &from_snapshot, &snapshot_cpu);
  EXPECT_GE(from_snapshot.generation, 1u);
  EXPECT_EQ(from_snapshot.journal_records, 0u);
  std::printf(
      "load of %d builds: journal (%d records, %.1f MB) %.3f s wall / %.3f s cpu; "
      "snapshot %.3f s wall / %.3f s cpu\n",
      kBuilds, 2 * kBuilds, journal_bytes / 1e6, journal_s, journal_cpu, snapshot_s, snapshot_cpu);
  if (const char* keep = std::getenv("KILN_LOAD_BENCH_STATE_DIR")) {
    namespace fs = std::filesystem;
    fs::create_directories(fs::path(keep) / "state");
    for (const auto& e : fs::directory_iterator(dir.path())) {
      if (e.path().filename() != "LOCK")
        fs::copy_file(e.path(), fs::path(keep) / "state" / e.path().filename(),
                      fs::copy_options::overwrite_existing);
    }
    std::printf("fixture left in %s/state\n", keep);
  }
}

}  // namespace
}  // namespace kiln
