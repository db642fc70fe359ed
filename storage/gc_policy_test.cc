#include "storage/gc_policy.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln {
namespace {

constexpr int64_t kHour = int64_t{3600} * 1000;
constexpr int64_t kNow = int64_t{1'800'000'000'000};
constexpr int64_t kMiB = int64_t{1} << 20;

StorageItem Item(StorageKind kind, std::string domain, std::string candidate, std::string id,
                 int64_t bytes, int64_t age_ms, std::vector<std::string> images = {}) {
  StorageItem it;
  it.kind = kind;
  it.domain = std::move(domain);
  it.candidate = std::move(candidate);
  it.id = std::move(id);
  it.bytes = bytes;
  it.last_used_ms = kNow - age_ms;
  it.images = std::move(images);
  return it;
}

std::vector<std::string> Ids(const GcPlan& plan) {
  std::vector<std::string> out;
  for (const auto& d : plan.deletions) out.push_back(d.item.id);
  return out;
}

GcBudgets DomainBudget(const std::string& d, int64_t bytes) {
  GcBudgets b;
  b.domain_max_bytes[d] = bytes;
  b.workspace_idle_ms = 0;
  return b;
}

TEST(GcPolicy, NothingDeletedUnderBudget) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 10 * kMiB, 30 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/1", 10 * kMiB, 30 * kHour)};
  GcPlan plan = PlanCollection(items, {}, DomainBudget("a", 100 * kMiB), kNow);
  EXPECT_TRUE(plan.deletions.empty());
  EXPECT_EQ(plan.total_bytes_after, 20 * kMiB);
  EXPECT_TRUE(plan.domains_over_budget.empty());
}

TEST(GcPolicy, DomainOverBudgetCollectsIdleCandidatesFirstThenLru) {
  GcLeases leases;
  leases.candidate_last_active_ms["a/busyish"] = kNow - 1 * kHour;  // active recently
  leases.candidate_last_active_ms["a/idle"] = kNow - 20 * kHour;    // idle
  std::vector<StorageItem> items = {
      // Recently active candidate, but its storage file is old: effective use is recent.
      Item(StorageKind::kCandidateStorage, "a", "busyish", "a/busyish/storage", 40 * kMiB,
           50 * kHour),
      Item(StorageKind::kCandidateStorage, "a", "idle", "a/idle/storage", 40 * kMiB, 20 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/old", 10 * kMiB, 2 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/new", 10 * kMiB, 1 * kHour / 2)};
  // 100 MiB used, budget 55: the idle candidate (40) goes first, then least recently used:
  // out/old (2 h) before busyish (active 1 h ago, although its files are older).
  GcPlan plan = PlanCollection(items, leases, DomainBudget("a", 55 * kMiB), kNow);
  ASSERT_EQ(Ids(plan), (std::vector<std::string>{"a/idle/storage", "a/out/old"}));
  EXPECT_EQ(plan.domain_bytes_after["a"], 50 * kMiB);
  EXPECT_TRUE(plan.domains_over_budget.empty());
  EXPECT_NE(plan.deletions[0].reason.find("over its storage budget"), std::string::npos);
}

TEST(GcPolicy, StopsAsSoonAsUnderBudget) {
  std::vector<StorageItem> items;
  for (int i = 0; i < 10; ++i) {
    items.push_back(Item(StorageKind::kLayeredOutput, "a", "", "a/out/" + std::to_string(i),
                         10 * kMiB, (10 - i) * kHour));
  }
  GcPlan plan = PlanCollection(items, {}, DomainBudget("a", 75 * kMiB), kNow);
  // Oldest first: 0, 1, 2 (100 -> 70).
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/out/0", "a/out/1", "a/out/2"}));
}

TEST(GcPolicy, NeverDeletesDeployedOrLatestSuccessfulImage) {
  GcLeases leases;
  leases.protected_images = {"sha256:deployed", "sha256:latest"};
  std::vector<StorageItem> items = {
      Item(StorageKind::kDeployBlob, "a", "", "a/blob/deployed", 50 * kMiB, 100 * kHour,
           {"sha256:deployed"}),
      Item(StorageKind::kKeyEntry, "a", "", "keys/latest", 1, 100 * kHour, {"sha256:latest"}),
      Item(StorageKind::kDeployRootfs, "a", "", "a/rootfs/deployed", 50 * kMiB, 100 * kHour,
           {"sha256:deployed"}),
      Item(StorageKind::kDeployBlob, "a", "", "a/blob/old", 50 * kMiB, 1 * kHour, {"sha256:old"})};
  items[1].dangling = true;  // even a dangling entry of a protected image stays
  GcPlan plan = PlanCollection(items, leases, DomainBudget("a", 1), kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/blob/old"}));
  EXPECT_EQ(plan.domains_over_budget, (std::set<std::string>{"a"}));
  EXPECT_TRUE(GcLeaseReason(items[0], leases).has_value());
}

TEST(GcPolicy, ABlobSharedByAProtectedImageStays) {
  GcLeases leases;
  leases.protected_images = {"sha256:new"};
  // A layer blob used by both the deployed image and an old one.
  auto shared = Item(StorageKind::kDeployBlob, "a", "", "a/blob/base", 10 * kMiB, 50 * kHour,
                     {"sha256:old", "sha256:new"});
  GcPlan plan = PlanCollection({shared}, leases, DomainBudget("a", 1), kNow);
  EXPECT_TRUE(plan.deletions.empty());
}

TEST(GcPolicy, NeverTouchesAnotherDomain) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 90 * kMiB, 1 * kHour),
      Item(StorageKind::kCandidateStorage, "b", "c1", "b/c1/storage", 10 * kMiB, 100 * kHour),
      Item(StorageKind::kLayeredOutput, "b", "", "b/out/1", 10 * kMiB, 100 * kHour)};
  GcLeases leases;
  leases.busy_candidates = {"a/c1"};  // a cannot free anything
  GcBudgets budgets;
  budgets.domain_max_bytes = {{"a", 50 * kMiB}, {"b", 50 * kMiB}};
  budgets.workspace_idle_ms = 0;
  GcPlan plan = PlanCollection(items, leases, budgets, kNow);
  EXPECT_TRUE(plan.deletions.empty());
  EXPECT_EQ(plan.domains_over_budget, (std::set<std::string>{"a"}));
  EXPECT_EQ(plan.domain_bytes_after["b"], 20 * kMiB);
}

TEST(GcPolicy, GlobalBudgetTakesFromTheDomainAboveItsShareOnly) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 60 * kMiB, 1 * kHour),
      Item(StorageKind::kCandidateStorage, "a", "c2", "a/c2/storage", 30 * kMiB, 2 * kHour),
      // b is within its share and holds the oldest item: never touched.
      Item(StorageKind::kCandidateStorage, "b", "c1", "b/c1/storage", 40 * kMiB, 100 * kHour)};
  GcBudgets budgets;
  budgets.global_max_bytes = 100 * kMiB;  // share 50 each
  budgets.workspace_idle_ms = 0;
  GcPlan plan = PlanCollection(items, {}, budgets, kNow);
  // 130 -> a gives its LRU (c2, 30) -> 100: within the global budget.
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/c2/storage"}));
  EXPECT_FALSE(plan.global_over_budget);
  EXPECT_TRUE(plan.domains_over_share.empty());
}

TEST(GcPolicy, GlobalOverWithNothingFreeableNamesTheDomainsAboveShare) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 80 * kMiB, 1 * kHour),
      Item(StorageKind::kCandidateStorage, "b", "c1", "b/c1/storage", 40 * kMiB, 100 * kHour),
      Item(StorageKind::kKeyEntry, "", "", "keys/1", 1 * kMiB, 100 * kHour)};
  GcLeases leases;
  leases.busy_candidates = {"a/c1"};
  GcBudgets budgets;
  budgets.global_max_bytes = 100 * kMiB;
  budgets.workspace_idle_ms = 0;
  GcPlan plan = PlanCollection(items, leases, budgets, kNow);
  // b stays (within its share); the shared key entry goes; a stays above its share.
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"keys/1"}));
  EXPECT_TRUE(plan.global_over_budget);
  ASSERT_EQ(plan.domains_over_share.size(), 1u);
  EXPECT_EQ(plan.domains_over_share.begin()->first, "a");
  EXPECT_EQ(plan.domains_over_share.begin()->second, 50 * kMiB);
}

// Issue 19, a strict budget: with headroom, collection starts below the budget (at its mark)
// and collects down to the mark, so the next interval's writes fit under the budget itself.
TEST(GcPolicy, HeadroomCollectsDownToTheMarkBeforeTheBudgetIsReached) {
  EXPECT_EQ(CollectionMark(100 * kMiB, 20), 80 * kMiB);
  EXPECT_EQ(CollectionMark(100 * kMiB, 0), 100 * kMiB);
  EXPECT_EQ(CollectionMark(100 * kMiB, 500), 10 * kMiB);  // clamped to 90 %
  EXPECT_EQ(CollectionMark(999, 10), 900);                // no overflow, rounds the mark up
  std::vector<StorageItem> items = {
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/1", 30 * kMiB, 3 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/2", 30 * kMiB, 2 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/3", 30 * kMiB, 1 * kHour)};
  GcBudgets budgets = DomainBudget("a", 100 * kMiB);
  // 90 MiB is under the budget: nothing without headroom.
  EXPECT_TRUE(PlanCollection(items, {}, budgets, kNow).deletions.empty());
  budgets.headroom_pct = 20;  // mark 80 MiB: the oldest output goes, down to 60
  GcPlan plan = PlanCollection(items, {}, budgets, kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/out/1"}));
  EXPECT_EQ(plan.domain_bytes_after["a"], 60 * kMiB);
  EXPECT_TRUE(plan.domains_over_budget.empty());
  // Between the mark and the budget with nothing collectable: no refusal (under the budget).
  GcLeases leases;
  leases.leased_ids = {"a/out/1", "a/out/2", "a/out/3"};
  plan = PlanCollection(items, leases, budgets, kNow);
  EXPECT_TRUE(plan.deletions.empty());
  EXPECT_TRUE(plan.domains_over_budget.empty());
  // The global budget has its mark too; a domain within its share's mark is not touched.
  std::vector<StorageItem> two = {
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/1", 50 * kMiB, 3 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/2", 20 * kMiB, 1 * kHour),
      Item(StorageKind::kLayeredOutput, "b", "", "b/out/1", 30 * kMiB, 9 * kHour)};
  GcBudgets global;
  global.global_max_bytes = 120 * kMiB;  // mark 96; shares 60, marks 48
  global.headroom_pct = 20;
  global.workspace_idle_ms = 0;
  plan = PlanCollection(two, {}, global, kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/out/1"}));
  EXPECT_FALSE(plan.global_over_budget);
}

// Issue 19: a busy domain's compiler cache grows with every build and a build of the domain is
// always running: once nothing else collectable is left, its oldest files are trimmed by what
// the domain is over its mark (never deleted whole, never another domain's, never when under).
TEST(GcPolicy, BusyDomainsBuildCacheIsTrimmedWhenNothingElseIsLeft) {
  GcLeases leases;
  leases.busy_candidates = {"a/c1"};
  std::vector<StorageItem> items = {
      Item(StorageKind::kBuildCache, "a", "", "a/cache/layered/go-build", 80 * kMiB, 1 * kHour),
      // buildah's directory (temporary files of running builds) is never trimmed.
      Item(StorageKind::kBuildCache, "a", "", "a/cache/rootless", 95 * kMiB, 1 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/1", 10 * kMiB, 2 * kHour),
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 10 * kMiB, 1 * kHour),
      Item(StorageKind::kBuildCache, "b", "", "b/cache/layered/go-build", 90 * kMiB, 9 * kHour)};
  GcBudgets budgets = DomainBudget("a", 100 * kMiB);
  budgets.domain_max_bytes["b"] = 100 * kMiB;
  budgets.headroom_pct = 20;  // a: 105 MiB, mark 80; b: 90 MiB, idle, over its mark 80
  items[0].trimmable = true;
  items[4].trimmable = true;
  GcPlan plan = PlanCollection(items, leases, budgets, kNow);
  // The output goes first (185 left), then the compiler cache's oldest files: all it has (80)
  // since buildah's directory cannot give; the domain stays over its budget (refused).
  ASSERT_EQ(plan.trims.size(), 1u);
  EXPECT_EQ(plan.trims[0].item.id, "a/cache/layered/go-build");
  EXPECT_EQ(plan.trims[0].bytes, 80 * kMiB);
  EXPECT_EQ(plan.domain_bytes_after["a"], 105 * kMiB);
  EXPECT_EQ(plan.domains_over_budget, (std::set<std::string>{"a"}));
  // With 5 MiB in buildah's directory: 15 MiB of the compiler cache bring it to the mark.
  std::vector<StorageItem> small = items;
  small[1].bytes = 5 * kMiB;
  plan = PlanCollection(small, leases, budgets, kNow);
  ASSERT_EQ(plan.trims.size(), 1u);
  EXPECT_EQ(plan.trims[0].bytes, 15 * kMiB);
  EXPECT_EQ(plan.domain_bytes_after["a"], 80 * kMiB);
  EXPECT_TRUE(plan.domains_over_budget.empty());
  // b has no running build: its cache is deleted whole (an ordinary deletion), not trimmed.
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/out/1", "b/cache/layered/go-build"}));
  // Under the mark: nothing trimmed.
  budgets.domain_max_bytes["a"] = 300 * kMiB;
  EXPECT_TRUE(PlanCollection(items, leases, budgets, kNow).trims.empty());
  // A cache leased explicitly (or holding a protected image) is not trimmed either.
  budgets.domain_max_bytes["a"] = 100 * kMiB;
  leases.leased_ids = {"a/cache/layered/go-build", "a/cache/rootless"};
  EXPECT_TRUE(PlanCollection(items, leases, budgets, kNow).trims.empty());
}

TEST(GcPolicy, RunningBuildLeasesStorageWorkspaceAndDomainCaches) {
  GcLeases leases;
  leases.busy_candidates = {"a/c1"};
  std::vector<StorageItem> items = {
      Item(StorageKind::kCandidateStorage, "a", "c1", "a/c1/storage", 50 * kMiB, 100 * kHour),
      Item(StorageKind::kWorkspace, "a", "c1", "a/c1/src", 50 * kMiB, 100 * kHour),
      Item(StorageKind::kBuildCache, "a", "", "a/cache/rootless", 50 * kMiB, 100 * kHour),
      Item(StorageKind::kCandidateStorage, "a", "c2", "a/c2/storage", 50 * kMiB, 1 * kHour)};
  GcBudgets budgets = DomainBudget("a", 1);
  budgets.workspace_idle_ms = 1 * kHour;
  GcPlan plan = PlanCollection(items, leases, budgets, kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/c2/storage"}));
  EXPECT_EQ(*GcLeaseReason(items[0], leases), "a build of the candidate is running");
  EXPECT_EQ(*GcLeaseReason(items[2], leases), "a build of the domain is running");
  // A candidate of another domain with the same name is not leased.
  auto other = Item(StorageKind::kCandidateStorage, "ab", "c1", "ab/c1/storage", 1, 0);
  EXPECT_FALSE(GcLeaseReason(other, leases).has_value());
}

TEST(GcPolicy, DeployInProgressLeasesBlobsAndRootfs) {
  GcLeases leases;
  leases.deploying_domains = {"a"};
  std::vector<StorageItem> items = {
      Item(StorageKind::kDeployBlob, "a", "", "a/blob/1", 50 * kMiB, 100 * kHour, {"sha256:x"}),
      Item(StorageKind::kDeployRootfs, "a", "", "a/rootfs/1", 50 * kMiB, 100 * kHour),
      Item(StorageKind::kDeployRootfs, "b", "", "b/rootfs/1", 50 * kMiB, 100 * kHour)};
  GcPlan plan = PlanCollection(items, leases, DomainBudget("a", 1), kNow);
  // b's unused rootfs goes by the age rule (no budget needed); a's stay.
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"b/rootfs/1"}));
}

TEST(GcPolicy, ExplicitLeaseKeepsAnItem) {
  GcLeases leases;
  leases.leased_ids = {"a/rootfs/running"};
  auto it = Item(StorageKind::kDeployRootfs, "a", "", "a/rootfs/running", 1, 100 * kHour);
  EXPECT_TRUE(PlanCollection({it}, leases, DomainBudget("a", 0), kNow).deletions.empty());
}

TEST(GcPolicy, GitRepositoryAndJournalAreNeverDeleted) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kGitRepo, "a", "", "a/repo.git", 500 * kMiB, 100 * kHour),
      Item(StorageKind::kJournal, "", "", "state", 500 * kMiB, 100 * kHour)};
  GcBudgets budgets = DomainBudget("a", 1);
  budgets.global_max_bytes = 1;
  GcPlan plan = PlanCollection(items, {}, budgets, kNow);
  EXPECT_TRUE(plan.deletions.empty());
  EXPECT_TRUE(plan.global_over_budget);
  EXPECT_EQ(plan.domains_over_budget, (std::set<std::string>{"a"}));
}

TEST(GcPolicy, AgeRulesApplyWithoutBudget) {
  GcLeases leases;
  leases.candidate_last_active_ms["a/old"] = kNow - 48 * kHour;
  leases.candidate_last_active_ms["a/fresh"] = kNow - 1 * kHour;
  std::vector<StorageItem> items = {
      Item(StorageKind::kWorkspace, "a", "old", "a/old/src", 1, 48 * kHour),
      Item(StorageKind::kWorkspace, "a", "fresh", "a/fresh/src", 1, 48 * kHour),
      Item(StorageKind::kKeyEntry, "", "", "keys/gone", 1, 1, {"sha256:gone"}),
      Item(StorageKind::kKeyEntry, "", "", "keys/present", 1, 100 * kHour, {"sha256:p"}),
      Item(StorageKind::kCandidateStorage, "a", "old", "a/old/storage", 1, 48 * kHour)};
  items[2].dangling = true;
  GcBudgets budgets;  // no byte budget at all
  budgets.workspace_idle_ms = 24 * kHour;
  GcPlan plan = PlanCollection(items, leases, budgets, kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/old/src", "keys/gone"}));
  EXPECT_FALSE(plan.global_over_budget);
}

TEST(GcPolicy, WorkspaceIdleZeroDisablesTheAgeRule) {
  auto ws = Item(StorageKind::kWorkspace, "a", "old", "a/old/src", 1, 1000 * kHour);
  GcBudgets budgets;
  budgets.workspace_idle_ms = 0;
  EXPECT_TRUE(PlanCollection({ws}, {}, budgets, kNow).deletions.empty());
}

TEST(GcPolicy, OrderIsDeterministicForEqualAges) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/b", 10, kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/a", 10, kHour)};
  GcPlan plan = PlanCollection(items, {}, DomainBudget("a", 10), kNow);
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a/out/a"}));
}

TEST(GcPolicy, BytesBeforeAndAfterAddUp) {
  std::vector<StorageItem> items = {
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/1", 30, 2 * kHour),
      Item(StorageKind::kLayeredOutput, "a", "", "a/out/2", 30, 1 * kHour),
      Item(StorageKind::kKeyEntry, "", "", "keys/1", 5, kHour)};
  GcPlan plan = PlanCollection(items, {}, DomainBudget("a", 40), kNow);
  EXPECT_EQ(plan.total_bytes_before, 65);
  EXPECT_EQ(plan.total_bytes_after, 35);
  EXPECT_EQ(plan.domain_bytes_before["a"], 60);
  EXPECT_EQ(plan.domain_bytes_after["a"], 30);
  EXPECT_EQ(plan.domain_bytes_after[""], 5);
}

TEST(GcPolicy, OverBudgetMessageNamesTheBudgetAndNextStep) {
  std::string m = OverBudgetMessage("epp", 3 * (int64_t{1} << 30), int64_t{2} << 30,
                                    "domains.epp.storage.max_gb");
  EXPECT_NE(m.find("domains.epp.storage.max_gb = 2 GB"), std::string::npos) << m;
  EXPECT_NE(m.find("3072.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("Next step"), std::string::npos);
  EXPECT_EQ(m.find('/'), std::string::npos) << "no host path: " << m;
}

TEST(GcPolicy, KindNamesAreStable) {
  EXPECT_STREQ(StorageKindName(StorageKind::kCandidateStorage), "candidate_storage");
  EXPECT_STREQ(StorageKindName(StorageKind::kDeployBlob), "deploy_blob");
  EXPECT_STREQ(StorageKindName(StorageKind::kJournal), "journal");
}

}  // namespace
}  // namespace kiln
