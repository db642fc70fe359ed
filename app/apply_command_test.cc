#include "app/apply_command.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ApplyCommandTest, ExitCodes) {
  auto ok = InterpretApplyResponse(
      200,
      R"({"status":"rolled_out","changed":true,"image":{"ref":"r/x@sha256:ab","digest":"sha256:ab"},"candidate":"c1","build_id":"b-1","deploy_id":"d-1"})");
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_NE(ok.message.find("deployed r/x@sha256:ab"), std::string::npos);
  auto same = InterpretApplyResponse(200, R"({"status":"rolled_out","changed":false,"image":"i"})");
  EXPECT_EQ(same.exit_code, 0);
  EXPECT_NE(same.message.find("already deployed"), std::string::npos);
  auto none = InterpretApplyResponse(200, R"({"status":"nothing_built","message":"no candidate"})");
  EXPECT_EQ(none.exit_code, 2);
  auto failed = InterpretApplyResponse(
      200, R"({"status":"failed","reason":"ImagePullBackOff","message":"pull access denied"})");
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_NE(failed.message.find("ImagePullBackOff: pull access denied"), std::string::npos);
  EXPECT_EQ(InterpretApplyResponse(401, R"({"error":"bad token"})").exit_code, 1);
  EXPECT_NE(InterpretApplyResponse(403, R"({"error":"needs an operator token"})")
                .message.find("operator"),
            std::string::npos);
  EXPECT_EQ(InterpretApplyResponse(200, "not json").exit_code, 1);
  EXPECT_EQ(InterpretApplyResponse(200, R"({"error":"argument 'candidate' ..."})").exit_code, 1);
  EXPECT_EQ(InterpretApplyResponse(500, "").exit_code, 1);
}

}  // namespace
}  // namespace kiln
