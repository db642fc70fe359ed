#include "common/names.h"

#include <gtest/gtest.h>

namespace kiln {

TEST(Names, AcceptsOrdinaryNames) {
  EXPECT_TRUE(ValidateName("c1").ok());
  EXPECT_TRUE(ValidateName("fast-path_2.v3").ok());
}

TEST(Names, RejectsHostileNames) {
  for (const char* bad : {"", "..", "../etc", "a/b", ".hidden", "-flag", "a..b", "x.lock", "x.",
                          "sp ace", "semi;colon", "new\nline", "\x01"}) {
    Status s = ValidateName(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  }
  EXPECT_FALSE(ValidateName(std::string(64, 'a')).ok());
  EXPECT_TRUE(ValidateName(std::string(63, 'a')).ok());
}

TEST(Names, Refs) {
  EXPECT_TRUE(ValidateRef("main").ok());
  EXPECT_TRUE(ValidateRef("feature/x").ok());
  EXPECT_TRUE(ValidateRef("refs/heads/c1").ok());
  EXPECT_FALSE(ValidateRef("refs/tags/v1").ok());
  EXPECT_FALSE(ValidateRef("refs/heads/").ok());
  EXPECT_FALSE(ValidateRef("a//b").ok());
  EXPECT_FALSE(ValidateRef("a/../b").ok());
  EXPECT_FALSE(ValidateRef("HEAD@{1}").ok());
  EXPECT_FALSE(ValidateRef("--upload-pack=x").ok());
  EXPECT_FALSE(ValidateRef(std::string(201, 'a')).ok());
}

TEST(Names, Commits) {
  EXPECT_TRUE(ValidateCommit("abcd").ok());
  EXPECT_TRUE(ValidateCommit(std::string(40, 'f')).ok());
  EXPECT_FALSE(ValidateCommit("abc").ok());
  EXPECT_FALSE(ValidateCommit("ABCD").ok());
  EXPECT_FALSE(ValidateCommit("--all").ok());
  EXPECT_FALSE(ValidateCommit(std::string(41, 'a')).ok());
}

TEST(Names, NormalizedPaths) {
  EXPECT_TRUE(IsNormalizedRelativePath("out/app"));
  for (const char* bad : {"", "/abs", "a//b", "a/", "./a", "a/../b", ".."})
    EXPECT_FALSE(IsNormalizedRelativePath(bad)) << bad;
  EXPECT_FALSE(IsNormalizedRelativePath(std::string("a\0b", 3)));
  EXPECT_TRUE(IsNormalizedAbsolutePath("/"));
  EXPECT_TRUE(IsNormalizedAbsolutePath("/usr/lib"));
  for (const char* bad : {"", "usr", "/usr/", "//usr", "/a/../b", "/."})
    EXPECT_FALSE(IsNormalizedAbsolutePath(bad)) << bad;
}

}  // namespace kiln
