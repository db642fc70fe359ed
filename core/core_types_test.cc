// The vocabulary's conversions: status names both ways (the journal depends on them) and the
// Diagnostic JSON round trip (journal, tools).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/build_types.h"
#include "core/cancel_token.h"
#include "core/diagnostic.h"

namespace kiln {
namespace {

const BuildStatus kAll[] = {BuildStatus::kQueued,    BuildStatus::kResolving,
                            BuildStatus::kRunning,   BuildStatus::kPushing,
                            BuildStatus::kSucceeded, BuildStatus::kFailed,
                            BuildStatus::kCancelled, BuildStatus::kInterrupted};

TEST(BuildStatusNames, EveryStatusRoundTripsByItsExactName) {
  std::set<std::string> names;
  for (BuildStatus s : kAll) {
    names.insert(BuildStatusName(s));
    EXPECT_EQ(BuildStatusFromName(BuildStatusName(s)), s) << BuildStatusName(s);
  }
  EXPECT_EQ(names.size(), 8u);  // distinct, unlike the wire names
  EXPECT_STREQ(BuildStatusName(BuildStatus::kResolving), "resolving");
  EXPECT_FALSE(BuildStatusFromName("Running"));
  EXPECT_FALSE(BuildStatusFromName(""));
  EXPECT_FALSE(BuildStatusFromName("building"));
}

TEST(BuildStatusNames, WireNamesFoldTheRunningPhases) {
  EXPECT_STREQ(StatusWireName(BuildStatus::kResolving), "running");
  EXPECT_STREQ(StatusWireName(BuildStatus::kPushing), "running");
  EXPECT_STREQ(PhaseName(BuildStatus::kRunning), "building");
  for (BuildStatus s : kAll)
    EXPECT_EQ(IsFinal(s), s == BuildStatus::kSucceeded || s == BuildStatus::kFailed ||
                              s == BuildStatus::kCancelled || s == BuildStatus::kInterrupted);
}

TEST(DiagnosticJson, RoundTripsEveryField) {
  Diagnostic d{"main.go", 3, 7, "error", "undefined: x", "E0308", true};
  Diagnostic plain{"", 0, 0, "error", "ld returned 1 exit status"};
  nlohmann::json a = DiagnosticsToJson({d, plain});
  ASSERT_TRUE(a.is_array());
  EXPECT_EQ(a[0]["code"], "E0308");
  EXPECT_EQ(a[0]["truncated"], true);
  EXPECT_FALSE(a[1].contains("code"));
  EXPECT_FALSE(a[1].contains("truncated"));
  std::vector<Diagnostic> back = DiagnosticsFromJson(a);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0], d);
  EXPECT_EQ(back[1], plain);
}

TEST(DiagnosticJson, MistypedOrMissingFieldsTakeDefaults) {
  nlohmann::json a = nlohmann::json::array(
      {{{"file", 5}, {"line", "x"}, {"message", "m"}}, "not an object", nullptr});
  std::vector<Diagnostic> back = DiagnosticsFromJson(a);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].file, "");
  EXPECT_EQ(back[0].line, 0);
  EXPECT_EQ(back[0].message, "m");
  EXPECT_TRUE(DiagnosticsFromJson(nlohmann::json::object()).empty());
}

TEST(CancelTokenTest, StaysCancelled) {
  CancelToken t;
  EXPECT_FALSE(t.cancelled());
  t.Cancel();
  t.Cancel();
  EXPECT_TRUE(t.cancelled());
  EXPECT_GE(t.fd(), 0);
}

}  // namespace
}  // namespace kiln
