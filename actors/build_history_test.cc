// Issue 19, memory that levels off: the domain's bound on build records shared by its
// candidates, and the answers about builds only the journal still has.
#include "actors/build_history.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(BuildHistory, CandidatesShareTheDomainBound) {
  EXPECT_EQ(HistoryPerCandidate(50, 400, 1), 50u);   // the per-candidate bound first
  EXPECT_EQ(HistoryPerCandidate(50, 400, 8), 50u);   // 8 x 50 = 400 fits
  EXPECT_EQ(HistoryPerCandidate(50, 400, 10), 40u);  // 10 x 40 = 400
  EXPECT_EQ(HistoryPerCandidate(50, 400, 256), kMinHistoryPerCandidate);  // the floor
  EXPECT_EQ(HistoryPerCandidate(50, 0, 1000), 50u);                       // no domain bound
  EXPECT_EQ(HistoryPerCandidate(50, 400, 0), 50u);
  // Whatever the number of candidates, the domain keeps at most max(bound, floor x n).
  for (size_t n = 1; n <= 300; ++n)
    EXPECT_LE(HistoryPerCandidate(50, 400, n) * n,
              std::max<size_t>(400, kMinHistoryPerCandidate * n))
        << n;
  EXPECT_EQ(FullLogsPerCandidate(1), kFullLogsPerCandidate);
  EXPECT_EQ(FullLogsPerCandidate(16), 2u);
  EXPECT_EQ(FullLogsPerCandidate(200), 1u);  // the newest build's log is always whole
  for (size_t n = 1; n <= 32; ++n) EXPECT_LE(FullLogsPerCandidate(n) * n, kFullLogsPerDomain);
}

TEST(BuildHistory, BudgetFollowsTheCandidatesThatJoined) {
  DomainHistoryBudget b(50, 100);
  EXPECT_EQ(b.PerCandidate(), 50u);
  for (int i = 0; i < 4; ++i) b.Join();
  EXPECT_EQ(b.candidates(), 4u);
  EXPECT_EQ(b.PerCandidate(), 25u);
  EXPECT_EQ(b.FullLogs(), kFullLogsPerCandidate);
}

BuildRecord Failed() {
  BuildRecord b;
  b.id = "b-00000000000000aa";
  b.domain = "d";
  b.candidate = "c1";
  b.commit = std::string(40, 'c');
  b.status = BuildStatus::kFailed;
  b.error = "compile error: main.go:3:1: undefined: x";
  b.error_kind = "compile_error";
  b.started_at_ms = 7;
  Diagnostic diag;
  diag.file = "main.go";
  diag.line = 3;
  diag.message = "undefined: x";
  b.diagnostics = {diag};
  return b;
}

TEST(BuildHistory, JournalRecordIsOnlyTheAskingDomains) {
  BuildRecord b = Failed();
  EXPECT_TRUE(JournalRecordOf(b, "d"));
  EXPECT_FALSE(JournalRecordOf(b, "other"));
  EXPECT_FALSE(JournalRecordOf(std::nullopt, "d"));
}

TEST(BuildHistory, ResultAndLogOfAnEvictedBuildComeFromItsRecord) {
  BuildRecord b = Failed();
  ToolResult r = JournalResult(b, "https://kiln/git/d.git");
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["build_id"], b.id);
  EXPECT_EQ(r.structured["status"], "failed");
  EXPECT_EQ(r.structured["from_journal"], true);
  EXPECT_NE(r.structured.dump().find("undefined: x"), std::string::npos) << r.structured.dump();

  ToolResult log = JournalLog(b, 0, 1 << 20, 0);
  EXPECT_FALSE(log.is_error);
  const std::string text = log.structured["text"];
  EXPECT_EQ(text.rfind("kiln: compile error: main.go:3:1: undefined: x\n", 0), 0u) << text;
  EXPECT_NE(text.find("no longer kept"), std::string::npos);
  EXPECT_EQ(log.structured["complete"], true);
  ToolResult tail = JournalLog(b, 0, 0, 20);
  EXPECT_EQ(tail.structured["text"].get<std::string>().size(), 20u);

  BuildRecord ok = Failed();
  ok.status = BuildStatus::kSucceeded;
  ok.error.clear();
  ok.digest = "sha256:" + std::string(64, 'a');
  ok.image_ref = "reg/app@" + ok.digest;
  ToolResult dep = JournalLookup(ok, "c1", "");
  EXPECT_FALSE(dep.is_error);
  EXPECT_EQ(dep.structured["digest"], ok.digest);
  EXPECT_EQ(dep.structured["order"], 7000000);
  EXPECT_TRUE(JournalLookup(ok, "c2", "").is_error);  // another candidate's build
  EXPECT_TRUE(JournalLookup(b, "c1", "").is_error);   // not a success
  EXPECT_EQ(JournalCancel(b).structured["note"], "build had already finished");
}

}  // namespace
}  // namespace kiln
