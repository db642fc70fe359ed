#include "actors/build_failure.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

FailureFacts Facts(std::string stage, Status st, bool agent_fault = false) {
  FailureFacts f;
  f.stage = std::move(stage);
  f.status = std::move(st);
  f.agent_fault = agent_fault;
  f.candidate = "fast";
  return f;
}

TEST(BuildFailure, CompileErrorNamesTheFirstDiagnostic) {
  FailureFacts f = Facts("build", Status::FailedPrecondition("build failed (exit 1)"), true);
  f.diagnostics = {{"internal/scorer/scorer.go", 12, 5, "error", "undefined: w.AdapterPenalty"},
                   {"internal/scorer/scorer.go", 20, 1, "error", "x declared and not used"}};
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "compile");
  EXPECT_EQ(
      v.error,
      "the build failed with 2 diagnostics; the first: internal/scorer/scorer.go:12:5: undefined: "
      "w.AdapterPenalty");
  EXPECT_NE(v.next_step.find("fix the code"), std::string::npos);
}

TEST(BuildFailure, GoTestFailureIsATestKind) {
  FailureFacts f = Facts("build", Status::FailedPrecondition("build failed (exit 1)"), true);
  f.diagnostics = {
      {"internal/picker/picker_test.go", 14, 0, "error", "--- FAIL: TestPick: got 1 want 2"}};
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "test");
  EXPECT_EQ(
      v.error.rfind(
          "tests failed with 1 diagnostic; the first: internal/picker/picker_test.go:14: ", 0),
      0u)
      << v.error;
}

TEST(BuildFailure, AgentFaultWithoutDiagnosticsKeepsTheBuildersMessage) {
  FailureView v = DescribeFailure(
      Facts("build",
            Status::FailedPrecondition(
                "base image '127.0.0.1:5000/loop/epp:main' is not allowed for domain ranker"),
            true));
  EXPECT_EQ(v.error_kind, "base_image");
  EXPECT_EQ(v.error, "base image '127.0.0.1:5000/loop/epp:main' is not allowed for domain ranker");
  v = DescribeFailure(Facts(
      "build", Status::InvalidArgument("Containerfile 'Containerfile' not found in the source"),
      true));
  EXPECT_EQ(v.error_kind, "containerfile");
  v = DescribeFailure(
      Facts("build", Status::FailedPrecondition("outputs: out/app does not exist"), true));
  EXPECT_EQ(v.error_kind, "output_missing");
  v = DescribeFailure(
      Facts("build", Status::FailedPrecondition("build command failed (exit 2)"), true));
  EXPECT_EQ(v.error_kind, "compile");
  EXPECT_EQ(v.error, "build command failed (exit 2)");
}

TEST(BuildFailure, AFailedNonRunStepSaysWhatTheBuilderSaid) {
  FailureFacts f = Facts("build", Status::FailedPrecondition("step 2/5 (RUNN ) failed"), true);
  f.hint = "containerfile";
  f.diagnostics = {{"", 0, 0, "error",
                    "building at STEP \"RUNN \": Build error: Unknown instruction: \"RUNN\""}};
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "containerfile");
  EXPECT_EQ(v.error,
            "step 2/5 (RUNN ) failed: building at STEP \"RUNN \": Build error: Unknown "
            "instruction: \"RUNN\"");
}

TEST(BuildFailure, BuilderHintWins) {
  FailureFacts f =
      Facts("build", Status::FailedPrecondition("step 3/5 RUN make failed (exit 2)"), true);
  f.hint = "containerfile";
  EXPECT_EQ(DescribeFailure(f).error_kind, "containerfile");
}

TEST(BuildFailure, InfrastructureIsNotTheAgentsFaultAndHidesHostDetails) {
  FailureFacts f = Facts(
      "checkout", Status::Internal("cannot create workspace /var/lib/kiln/domains/epp/c/src: EIO"));
  f.hidden = {"/var/lib/kiln"};
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "infrastructure");
  EXPECT_EQ(v.error, "kiln could not check out the commit: cannot create workspace <kiln>: EIO");
  EXPECT_EQ(v.next_step.rfind("not your code", 0), 0u);
  v = DescribeFailure(
      Facts("push",
            Status::Unavailable("registry is unreachable: GET http://10.0.0.7:5000/v2/ refused")));
  EXPECT_EQ(
      v.error,
      "kiln could not push the image: registry is unreachable: GET <internal address> refused");
}

TEST(BuildFailure, ResolveFailuresPointAtThePush) {
  FailureView v = DescribeFailure(
      Facts("resolve", Status::NotFound("branch 'fast' not found in domain repository")));
  EXPECT_EQ(v.error_kind, "not_pushed");
  EXPECT_NE(v.next_step.find("HEAD:refs/heads/fast"), std::string::npos);
  FailureFacts f =
      Facts("resolve", Status::NotFound("branch 'fast' not found in domain repository"));
  f.remote = "https://kiln.example.com/git/epp.git";
  f.status = Status::NotFound(
      "branch 'fast' not found in domain repository; push it first: git push "
      "<kiln>/git/<domain>.git "
      "HEAD:refs/heads/fast");
  EXPECT_EQ(DescribeFailure(f).error, "branch 'fast' not found in domain repository");
  EXPECT_EQ(
      DescribeFailure(f).next_step,
      "push the branch to kiln first: git -c http.extraHeader=\"Authorization: Bearer <your "
      "token>\" push "
      "https://kiln.example.com/git/epp.git HEAD:refs/heads/fast, then call build_candidate again");
  v = DescribeFailure(Facts("resolve", Status::InvalidArgument("ref must be a branch, not HEAD")));
  EXPECT_EQ(v.error_kind, "invalid_argument");
}

TEST(BuildFailure, TimeoutsCancelsAndSupersedes) {
  EXPECT_EQ(DescribeFailure(Facts("build", Status::DeadlineExceeded("build timed out after 600 s")))
                .error_kind,
            "timeout");
  EXPECT_EQ(
      DescribeFailure(Facts("build", Status::Cancelled("cancelled by cancel_build"))).error_kind,
      "cancelled");
  FailureView v =
      DescribeFailure(Facts("build", Status::Cancelled("superseded by build b-000012")));
  EXPECT_EQ(v.error_kind, "superseded");
  EXPECT_EQ(v.error, "superseded by build b-000012");
}

TEST(BuildFailure, EveryFieldIsAlwaysSet) {
  for (Status st : {Status::Internal(""), Status::Unavailable(""), Status::Cancelled(""),
                    Status::DeadlineExceeded(""), Status::FailedPrecondition("")}) {
    for (bool agent : {false, true}) {
      FailureView v = DescribeFailure(Facts("build", st, agent));
      EXPECT_FALSE(v.error.empty());
      EXPECT_FALSE(v.error_kind.empty());
      EXPECT_FALSE(v.next_step.empty());
    }
  }
}

// Issue 16: a failing step names its instruction and exit code; host failures are not the agent's.
TEST(BuildFailure, FailingStepLeadsTheError) {
  FailureFacts f = Facts(
      "build", Status::FailedPrecondition("step 3/5 (RUN go test ./...) failed with exit code 1"),
      true);
  f.diagnostics = {{"pkg/calc/calc_test.go", 7, 0, "error", "--- FAIL: TestAdd: got 0 want 2"}};
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "test");
  EXPECT_EQ(v.error,
            "step 3/5 (RUN go test ./...) failed with exit code 1: tests failed with 1 diagnostic; "
            "the first: "
            "pkg/calc/calc_test.go:7: --- FAIL: TestAdd: got 0 want 2");
  f.diagnostics.clear();
  v = DescribeFailure(f);
  EXPECT_EQ(v.error, "step 3/5 (RUN go test ./...) failed with exit code 1");
}

TEST(BuildFailure, HostFailuresDuringABuildAreInfrastructure) {
  FailureFacts f = Facts(
      "build", Status::FailedPrecondition("step 4/5 (RUN go build ./...) failed with exit code 1"),
      true);
  f.diagnostics = {
      {"", 0, 0, "error", "write /tmp/go-build123/b001/exe/a.out: no space left on device"}};
  f.log_tail = "STEP 4/5: RUN go build ./...\ngo: write /tmp/x: no space left on device\n";
  FailureView v = DescribeFailure(f);
  EXPECT_EQ(v.error_kind, "infrastructure");
  EXPECT_EQ(v.error,
            "kiln's build host ran out of disk space (no space left on device) during the build "
            "(step 4/5 (RUN go "
            "build ./...) failed with exit code 1)");
  EXPECT_EQ(v.next_step.rfind("not your code", 0), 0u);
  EXPECT_EQ(HostFailureIn("cp: cannot create regular file: Read-only file system"),
            "a file system of kiln's build host is read-only (read-only file system)");
  EXPECT_EQ(HostFailureIn("open x: disk quota exceeded"),
            "kiln's build host ran out of disk quota (disk quota exceeded)");
  EXPECT_NE(HostFailureIn("Close_Fd sealing memfd copy: Device or resource busy\n"
                          "subprocess exited with status 1"),
            "");
  EXPECT_EQ(HostFailureIn("main.go:3:1: syntax error"), "");
  // Running out of memory under the sandbox's limit is the agent's program, not the host.
  EXPECT_EQ(HostFailureIn("fork: Cannot allocate memory"), "");
  f.log_tail = "main.go:3:1: syntax error\n";
  f.diagnostics = {{"main.go", 3, 1, "error", "syntax error"}};
  EXPECT_EQ(DescribeFailure(f).error_kind, "compile");
}

TEST(BuildFailure, ScrubReplacesWholePathsLongestFirst) {
  EXPECT_EQ(
      ScrubHostDetails("open /srv/kiln/state/x/y.json: denied", {"/srv/kiln", "/srv/kiln/state"}),
      "open <kiln>: denied");
  EXPECT_EQ(ScrubHostDetails("see https://10.1.2.3:6443/api/v1, then", {}),
            "see <internal address>, then");
  EXPECT_EQ(ScrubHostDetails("nothing here", {""}), "nothing here");
}

}  // namespace
}  // namespace kiln
