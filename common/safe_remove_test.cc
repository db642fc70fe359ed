// Unit tests of common/safe_remove.h: planted symlinks are removed as links, never followed.
#include "common/safe_remove.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kiln {
namespace {
namespace fs = std::filesystem;

class SafeRemoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-saferm-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    outside_ = dir_ + "/outside";
    fs::create_directories(outside_ + "/sub");
    std::ofstream(outside_ + "/keep") << "keep";
    std::ofstream(outside_ + "/sub/keep2") << "keep2";
    std::ofstream(dir_ + "/outside-file") << "file";
  }
  void TearDown() override { fs::remove_all(dir_); }
  void ExpectOutsideIntact() {
    EXPECT_TRUE(fs::exists(outside_ + "/keep"));
    EXPECT_TRUE(fs::exists(outside_ + "/sub/keep2"));
    EXPECT_TRUE(fs::exists(dir_ + "/outside-file"));
  }
  std::string dir_, outside_;
};

TEST_F(SafeRemoveTest, SymlinksAtSeveralDepthsAreNotFollowed) {
  const std::string t = dir_ + "/tree";
  fs::create_directories(t + "/a/b/c/d");
  std::ofstream(t + "/a/b/c/d/f") << "x";
  std::ofstream(t + "/top") << "x";
  fs::create_directory_symlink(outside_, t + "/link0");
  fs::create_directory_symlink(outside_, t + "/a/link1");
  fs::create_directory_symlink(outside_ + "/sub", t + "/a/b/link2");
  fs::create_directory_symlink(outside_, t + "/a/b/c/d/link4");
  fs::create_symlink(dir_ + "/outside-file", t + "/a/b/c/filelink");
  fs::create_symlink("../../../../outside", t + "/a/b/c/rel");
  ASSERT_TRUE(RemoveTreeNoFollow(t).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(t)));
  ExpectOutsideIntact();
}

TEST_F(SafeRemoveTest, TopLevelSymlinkRemovesOnlyTheLink) {
  const std::string link = dir_ + "/toplink";
  fs::create_directory_symlink(outside_, link);
  ASSERT_TRUE(RemoveTreeNoFollow(link).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(link)));
  ExpectOutsideIntact();
}

TEST_F(SafeRemoveTest, BeneathRefusesASymlinkedIntermediateDirectory) {
  // root/bases -> outside; removing bases/sub must not remove outside/sub.
  const std::string root = dir_ + "/root";
  fs::create_directories(root);
  fs::create_directory_symlink(outside_, root + "/bases");
  Status st = RemoveTreeBeneath(root, "bases/sub");
  EXPECT_FALSE(st.ok());
  ExpectOutsideIntact();
  // A real directory beneath the root is removed.
  fs::create_directories(root + "/real/x/y");
  fs::create_directory_symlink(outside_, root + "/real/x/l");
  EXPECT_TRUE(RemoveTreeBeneath(root, "real/x").ok());
  EXPECT_FALSE(fs::exists(root + "/real/x"));
  EXPECT_TRUE(fs::exists(root + "/real"));
  ExpectOutsideIntact();
  EXPECT_FALSE(RemoveTreeBeneath(root, "../outside").ok());
  ExpectOutsideIntact();
}

TEST_F(SafeRemoveTest, MissingIsOkAndDepthIsBounded) {
  EXPECT_TRUE(RemoveTreeNoFollow(dir_ + "/nope").ok());
  std::string deep = dir_ + "/deep";
  std::string p = deep;
  for (int i = 0; i < 10; ++i) p += "/d";
  fs::create_directories(p);
  Status st = RemoveTreeNoFollow(deep, 5);
  EXPECT_EQ(st.code(), Status::Code::kResourceExhausted);
  EXPECT_TRUE(RemoveTreeNoFollow(deep).ok());
  EXPECT_FALSE(fs::exists(deep));
}

}  // namespace
}  // namespace kiln
