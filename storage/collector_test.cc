#include "storage/collector.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "storage/inventory.h"
#include "storage/lease_table.h"
#include "storage/state_leases.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMiB = int64_t{1} << 20;

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "kiln-gc-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir_ = t;
    auto c = std::make_shared<Config>();
    c->server.state_dir = dir_;
    for (const char* d : {"a", "b"}) {
      DomainConfig dc;
      dc.name = d;
      dc.image.repository = std::string("loop/") + d;
      c->domains[d] = dc;
    }
    config_ = c;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `bytes` of data at `rel` (parents created) and sets its mtime `age_s` in the past.
  void File(const std::string& rel, int64_t bytes, int age_s = 0) {
    fs::path p = fs::path(dir_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << std::string(static_cast<size_t>(bytes), 'x');
    if (age_s) Age(rel, age_s);
  }
  void Age(const std::string& rel, int age_s) {
    struct timeval tv[2];
    gettimeofday(&tv[0], nullptr);
    tv[0].tv_sec -= age_s;
    tv[1] = tv[0];
    ASSERT_EQ(lutimes((fs::path(dir_) / rel).c_str(), tv), 0);
  }
  bool Exists(const std::string& rel) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(fs::path(dir_) / rel, ec));
  }
  int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::shared_ptr<Config> Mutable() { return std::const_pointer_cast<Config>(config_); }

  std::string dir_;
  std::shared_ptr<const Config> config_;
};

TEST(StorageLeaseTable, HoldsAndUsesBlockCollectionOfTheirCandidateOnly) {
  StorageLeaseTable t;
  t.Hold("a", "c1", "b-1");
  EXPECT_FALSE(t.TryBeginCollect("a/c1"));
  EXPECT_FALSE(t.TryBeginCollect("a/*"));  // the domain's shared caches
  EXPECT_TRUE(t.TryBeginCollect("a/c2"));
  t.EndCollect("a/c2");
  EXPECT_TRUE(t.TryBeginCollect("b/*"));
  t.EndCollect("b/*");
  t.Drop("a", "c1", "b-1");
  t.Drop("a", "c1", "b-1");  // idempotent
  {
    auto use = t.Acquire("a", "c1");
    EXPECT_FALSE(t.TryBeginCollect("a/c1"));
    EXPECT_EQ(t.Busy(), (std::set<std::string>{"a/c1"}));
  }
  EXPECT_TRUE(t.Busy().empty());
  EXPECT_TRUE(t.TryBeginCollect("a/c1"));
  EXPECT_FALSE(t.TryBeginCollect("a/c1"));  // already collecting
  t.EndCollect("a/c1");
}

TEST(StorageLeaseTable, AUseWaitsForACollectionInProgress) {
  StorageLeaseTable t;
  ASSERT_TRUE(t.TryBeginCollect("a/*"));
  std::atomic<bool> acquired{false};
  std::thread user([&] {
    auto use = t.Acquire("a", "c1");
    acquired = true;
  });
  // The collection still owns the domain: nobody may begin a second one.
  EXPECT_FALSE(t.TryBeginCollect("a/*"));
  t.EndCollect("a/*");
  user.join();
  EXPECT_TRUE(acquired);
}

TEST_F(CollectorTest, InventoryFindsEveryKindAndSizesIt) {
  File("domains/a/candidates/c1/storage/rootless/layer", 2 * kMiB);
  File("domains/a/candidates/c1/src/main.go", 10);
  File("domains/a/cache/outputs/x.layer", kMiB);
  File("domains/a/cache/layered/gocache/f", kMiB);
  File("domains/a/deploy/blobs/sha256/abc", kMiB);
  File("domains/a/deploy/rootfs/1-abc/bin", 10);
  File("domains/a/repo.git/HEAD", 10);
  File("domains/zzz/candidates/c1/storage/x", kMiB);  // not a configured domain
  File("state/journal-1.log", 100);
  std::string key(64, 'a');
  File("keys/" + key + ".json", 0);
  std::ofstream(fs::path(dir_) / "keys" / (key + ".json"))
      << R"({"key":")" << key << R"(","image_ref":"r:5000/loop/b@sha256:11","digest":"sha256:11"})";
  std::set<std::string> leased;
  auto items = ScanInventory(dir_, *config_, &leased);
  std::map<std::string, StorageItem> by_id;
  for (const auto& it : items) by_id[it.id] = it;
  ASSERT_TRUE(by_id.count("domains/a/candidates/c1/storage"));
  EXPECT_GE(by_id["domains/a/candidates/c1/storage"].bytes, 2 * kMiB);
  EXPECT_EQ(by_id["domains/a/candidates/c1/storage"].candidate, "c1");
  EXPECT_EQ(by_id["domains/a/candidates/c1/src"].kind, StorageKind::kWorkspace);
  EXPECT_EQ(by_id["domains/a/cache/outputs/x.layer"].kind, StorageKind::kLayeredOutput);
  EXPECT_EQ(by_id["domains/a/cache/layered/gocache"].kind, StorageKind::kBuildCache);
  EXPECT_EQ(by_id["domains/a/deploy/blobs/sha256/abc"].kind, StorageKind::kDeployBlob);
  EXPECT_EQ(by_id["domains/a/repo.git"].kind, StorageKind::kGitRepo);
  EXPECT_EQ(by_id["state"].kind, StorageKind::kJournal);
  EXPECT_EQ(by_id["keys/" + key + ".json"].domain, "b");
  EXPECT_EQ(by_id["keys/" + key + ".json"].images, (std::vector<std::string>{"sha256:11"}));
  EXPECT_EQ(leased, (std::set<std::string>{"domains/a/deploy/rootfs/1-abc"}));
  for (const auto& it : items) EXPECT_EQ(it.id.find("zzz"), std::string::npos) << it.id;
}

// Issue 19: kill -9 during a cache write leaves its temporary file; the next collection removes
// it whatever the budget. A temporary file whose writer is alive is neither counted nor touched.
TEST_F(CollectorTest, TemporaryFilesOfGoneProcessesAreCollectedLiveOnesAreNot) {
  const std::string me = std::to_string(::getpid());
  const std::string gone = "1073741000";  // above any pid_max: no such process
  File("domains/a/cache/outputs/.tmp-" + gone + "-s3", kMiB);
  File("domains/a/cache/outputs/.tmp-" + me + "-s4", kMiB);
  File("domains/a/cache/outputs/done.layer", kMiB);
  File("domains/a/deploy/blobs/sha256/" + std::string(64, 'c') + ".tmp" + gone, kMiB);
  File("domains/a/deploy/blobs/sha256/" + std::string(64, 'd') + ".tmp" + me, kMiB);
  auto items = ScanInventory(dir_, *config_, nullptr);
  std::set<std::string> ids;
  for (const auto& it : items) ids.insert(it.id);
  EXPECT_FALSE(ids.count("domains/a/cache/outputs/.tmp-" + me + "-s4"));
  EXPECT_TRUE(ids.count("domains/a/cache/outputs/.tmp-" + gone + "-s3"));
  StorageCollector collector(config_, dir_, nullptr, nullptr);
  GcRunReport r = collector.RunOnce({}, /*dry_run=*/false, NowMs());  // no budget: age rules only
  auto exists = [&](const std::string& rel) { return fs::exists(fs::path(dir_) / rel); };
  EXPECT_FALSE(exists("domains/a/cache/outputs/.tmp-" + gone + "-s3"));
  EXPECT_FALSE(exists("domains/a/deploy/blobs/sha256/" + std::string(64, 'c') + ".tmp" + gone));
  EXPECT_TRUE(exists("domains/a/cache/outputs/.tmp-" + me + "-s4"));
  EXPECT_TRUE(exists("domains/a/deploy/blobs/sha256/" + std::string(64, 'd') + ".tmp" + me));
  EXPECT_TRUE(exists("domains/a/cache/outputs/done.layer"));
  EXPECT_EQ(r.deleted, 2u);
}

TEST_F(CollectorTest, DiskUsageNeverFollowsSymlinks) {
  File("outside/big", 4 * kMiB);
  File("domains/a/candidates/c1/storage/small", 10);
  fs::create_symlink(fs::path(dir_) / "outside",
                     fs::path(dir_) / "domains/a/candidates/c1/storage/link");
  EXPECT_LT(DiskUsage(dir_ + "/domains/a/candidates/c1/storage"), kMiB);
}

TEST_F(CollectorTest, DomainOverBudgetCollectsItsIdleCandidateAndKeepsTheBusyOne) {
  File("domains/a/candidates/c1/storage/l", 3 * kMiB, 100);
  File("domains/a/candidates/c2/storage/l", 3 * kMiB, 7200);
  File("domains/b/candidates/c1/storage/l", 3 * kMiB, 99999);  // other domain, older
  Age("domains/a/candidates/c1/storage", 100);
  Age("domains/a/candidates/c2/storage", 7200);
  Age("domains/b/candidates/c1/storage", 99999);
  Mutable()->domains["a"].storage.max_gb = 4.0 / 1024;  // 4 MiB
  auto leases = std::make_shared<StorageLeaseTable>();
  auto gate = std::make_shared<StorageGate>();
  StorageCollector collector(config_, dir_, leases, gate);

  GcRunReport dry = collector.RunOnce({}, /*dry_run=*/true, NowMs());
  ASSERT_EQ(dry.plan.deletions.size(), 1u);
  EXPECT_EQ(dry.plan.deletions[0].item.id, "domains/a/candidates/c2/storage");
  EXPECT_TRUE(Exists("domains/a/candidates/c2/storage"));  // dry run: nothing deleted

  GcRunReport r = collector.RunOnce({}, false, NowMs());
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_FALSE(Exists("domains/a/candidates/c2/storage"));
  EXPECT_TRUE(Exists("domains/a/candidates/c1/storage/l"));
  EXPECT_TRUE(Exists("domains/b/candidates/c1/storage/l"));
  EXPECT_EQ(gate->Refusal("a"), "");
  EXPECT_NE(
      collector.RenderMetrics().find("kiln_storage_bytes{domain=\"a\",kind=\"candidate_storage\"}"),
      std::string::npos);

  // Now c1 is building: it cannot go, so the domain stays over budget and builds are refused.
  Mutable()->domains["a"].storage.max_gb = 1.0 / 1024;  // 1 MiB
  leases->Hold("a", "c1", "b-7");
  r = collector.RunOnce({}, false, NowMs());
  EXPECT_EQ(r.deleted, 0u);
  EXPECT_TRUE(Exists("domains/a/candidates/c1/storage/l"));
  std::string why = gate->Refusal("a");
  EXPECT_NE(why.find("domains.a.storage.max_gb"), std::string::npos) << why;
  EXPECT_EQ(why.find(dir_), std::string::npos) << "no host path: " << why;
  EXPECT_EQ(gate->Refusal("b"), "");
  EXPECT_NE(collector.RenderMetrics().find("kiln_storage_over_budget{domain=\"a\"} 1"),
            std::string::npos);

  // The build ends: its storage may go, the domain builds again.
  leases->Drop("a", "c1", "b-7");
  r = collector.RunOnce({}, false, NowMs());
  EXPECT_FALSE(Exists("domains/a/candidates/c1/storage"));
  EXPECT_EQ(gate->Refusal("a"), "");
}

TEST_F(CollectorTest, IdleWorkspaceGoesWithItsMarkerAndIndex) {
  File("domains/a/candidates/old/src/main.go", 10, 3 * 86400);
  File("domains/a/candidates/old/index", 10, 3 * 86400);
  File("domains/a/candidates/old/checked-out", 10, 3 * 86400);
  Age("domains/a/candidates/old/src", 3 * 86400);
  File("domains/a/candidates/new/src/main.go", 10);
  StorageCollector collector(config_, dir_, nullptr, nullptr);
  GcRunReport r = collector.RunOnce({}, false, NowMs());
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_FALSE(Exists("domains/a/candidates/old/src"));
  EXPECT_FALSE(Exists("domains/a/candidates/old/index"));
  EXPECT_FALSE(Exists("domains/a/candidates/old/checked-out"));
  EXPECT_TRUE(Exists("domains/a/candidates/new/src/main.go"));
}

TEST_F(CollectorTest, ProtectedKeyEntryAndRootfsStayUnderAnyBudget) {
  std::string key(64, 'b');
  File("keys/" + key + ".json", 0, 99999);
  std::ofstream(fs::path(dir_) / "keys" / (key + ".json"))
      << R"({"key":")" << key << R"(","image_ref":"r:5000/loop/a@sha256:22","digest":"sha256:22"})";
  File("domains/a/deploy/rootfs/1-22/bin/app", 2 * kMiB, 99999);
  File("domains/a/deploy/blobs/sha256/old", 2 * kMiB, 99999);
  Mutable()->domains["a"].storage.max_gb = 1.0 / (1024 * 1024);  // 1 KiB
  GcLeases leases;
  leases.protected_images = {"sha256:22"};
  StorageCollector collector(config_, dir_, nullptr, nullptr);
  GcRunReport r = collector.RunOnce(leases, false, NowMs());
  EXPECT_TRUE(Exists("keys/" + key + ".json"));
  EXPECT_TRUE(Exists("domains/a/deploy/rootfs/1-22/bin/app"));
  EXPECT_FALSE(Exists("domains/a/deploy/blobs/sha256/old"));
  EXPECT_EQ(r.plan.domains_over_budget, (std::set<std::string>{"a"}));
}

// Issue 19: a local-target blob of the deployed (or a latest) image stays under any budget; the
// blobs and records of images no longer deployed go, shared layers as long as one user is kept.
TEST_F(CollectorTest, DeployBlobsOfTheDeployedImageStayOthersGo) {
  const std::string dep(64, 'd'), old(64, 'e');
  const std::string base(64, '1'), dep_top(64, '2'), old_top(64, '3');
  for (const auto& b : {base, dep_top, old_top})
    File("domains/a/deploy/blobs/sha256/" + b, 1 * kMiB, 99999);
  File("domains/a/deploy/images/" + dep + ".json", 0, 99999);
  File("domains/a/deploy/images/" + old + ".json", 0, 99999);
  std::ofstream(fs::path(dir_) / "domains/a/deploy/images" / (dep + ".json"))
      << R"({"image":"sha256:)" << dep << R"(","layers":["sha256:)" << base << R"(","sha256:)"
      << dep_top << R"("]})";
  std::ofstream(fs::path(dir_) / "domains/a/deploy/images" / (old + ".json"))
      << R"({"image":"sha256:)" << old << R"(","layers":["sha256:)" << base << R"(","sha256:)"
      << old_top << R"("]})";
  Mutable()->domains["a"].storage.max_gb = 1.0 / (1024 * 1024);  // 1 KiB: take all it may
  GcLeases leases;
  leases.protected_images = {"sha256:" + dep};
  StorageCollector collector(config_, dir_, nullptr, nullptr);
  GcRunReport r = collector.RunOnce(leases, false, NowMs());
  EXPECT_TRUE(Exists("domains/a/deploy/blobs/sha256/" + base)) << "shared with the deployed image";
  EXPECT_TRUE(Exists("domains/a/deploy/blobs/sha256/" + dep_top));
  EXPECT_TRUE(Exists("domains/a/deploy/images/" + dep + ".json"));
  EXPECT_FALSE(Exists("domains/a/deploy/blobs/sha256/" + old_top));
  EXPECT_FALSE(Exists("domains/a/deploy/images/" + old + ".json"));
  EXPECT_EQ(r.plan.domains_over_budget, (std::set<std::string>{"a"}));
  // Once nothing protects it, the deployed image's blobs go too.
  r = collector.RunOnce({}, false, NowMs());
  EXPECT_FALSE(Exists("domains/a/deploy/blobs/sha256/" + base));
  EXPECT_FALSE(Exists("domains/a/deploy/blobs/sha256/" + dep_top));
}

// Issue 19: a busy domain's build cache loses its oldest files only, never the files a running
// build wrote in the last minute, and is not removed whole.
TEST_F(CollectorTest, BusyDomainsBuildCacheLosesItsOldestFiles) {
  File("domains/a/cache/layered/go-build/00/old-a", 2 * kMiB, 7200);
  File("domains/a/cache/layered/go-build/01/old-b", 2 * kMiB, 3600);
  File("domains/a/cache/layered/go-build/02/fresh", 2 * kMiB);
  Mutable()->domains["a"].storage.max_gb = 3.0 / 1024;  // 3 MiB, mark 2.4 MiB
  auto leases = std::make_shared<StorageLeaseTable>();
  leases->Hold("a", "c1", "b-1");  // a build of the domain runs
  StorageCollector collector(config_, dir_, leases, nullptr);
  GcRunReport r = collector.RunOnce({}, false, NowMs());
  ASSERT_EQ(r.plan.trims.size(), 1u);
  EXPECT_FALSE(Exists("domains/a/cache/layered/go-build/00/old-a"));
  EXPECT_FALSE(Exists("domains/a/cache/layered/go-build/01/old-b"));
  EXPECT_TRUE(Exists("domains/a/cache/layered/go-build/02/fresh"));
  EXPECT_TRUE(Exists("domains/a/cache/layered/go-build/00"));
  EXPECT_GE(r.freed_bytes, 4 * kMiB);
}

TEST_F(CollectorTest, BudgetsFromConfigConvertsGiB) {
  Mutable()->storage.max_gb = 2;
  Mutable()->domains["a"].storage.max_gb = 0.5;
  GcBudgets b = BudgetsFromConfig(*config_);
  EXPECT_EQ(b.global_max_bytes, int64_t{2} << 30);
  EXPECT_EQ(b.domain_max_bytes.at("a"), int64_t{1} << 29);
  EXPECT_FALSE(b.domain_max_bytes.count("b"));
  EXPECT_EQ(b.workspace_idle_ms, int64_t{86400} * 1000);
}

TEST(StateLeases, DigestOfImage) {
  EXPECT_EQ(DigestOfImage("h:5000/loop/a@sha256:ab"), "sha256:ab");
  EXPECT_EQ(DigestOfImage("h:5000/loop/a:tag"), "");
}

}  // namespace
}  // namespace kiln
