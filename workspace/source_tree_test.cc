#include "workspace/source_tree.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "workspace/git_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

std::string Hash(const std::string& dir) {
  std::string hex;
  Status s = SourceTree::HashDirectory(dir, &hex);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return hex;
}

void MakeTree(const std::string& root) {
  WriteFile(root + "/main.go", "package main\n");
  WriteFile(root + "/pkg/a.go", "package pkg\n");
  WriteFile(root + "/pkg/sub/b.go", "package sub\n");
  WriteFile(root + "/build.sh", "#!/bin/sh\n", /*exec=*/true);
  fs::create_symlink("pkg/a.go", root + "/link");
}

TEST(SourceTreeTest, SameContentSameHashIndependentOfMetadata) {
  TempDir a, b;
  MakeTree(a.path());
  MakeTree(b.path());
  std::string h = Hash(a.path());
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, Hash(b.path()));
  // mtime and non-exec permission bits do not matter.
  struct timeval times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimes((b.path() + "/main.go").c_str(), times), 0);
  ASSERT_EQ(::chmod((b.path() + "/main.go").c_str(), 0600), 0);
  EXPECT_EQ(h, Hash(b.path()));
}

TEST(SourceTreeTest, EveryContentChangeChangesHash) {
  TempDir a;
  MakeTree(a.path());
  std::string base = Hash(a.path());

  WriteFile(a.path() + "/pkg/a.go", "package pkh\n");  // one byte
  std::string one_byte = Hash(a.path());
  EXPECT_NE(one_byte, base);
  WriteFile(a.path() + "/pkg/a.go", "package pkg\n");
  EXPECT_EQ(Hash(a.path()), base);

  ASSERT_EQ(::chmod((a.path() + "/main.go").c_str(), 0755), 0);  // exec bit
  EXPECT_NE(Hash(a.path()), base);
  ASSERT_EQ(::chmod((a.path() + "/main.go").c_str(), 0644), 0);
  EXPECT_EQ(Hash(a.path()), base);

  fs::remove(a.path() + "/link");  // symlink target
  fs::create_symlink("pkg/sub/b.go", a.path() + "/link");
  EXPECT_NE(Hash(a.path()), base);
  fs::remove(a.path() + "/link");
  fs::create_symlink("pkg/a.go", a.path() + "/link");
  EXPECT_EQ(Hash(a.path()), base);

  fs::rename(a.path() + "/pkg/sub/b.go", a.path() + "/pkg/sub/c.go");  // rename
  EXPECT_NE(Hash(a.path()), base);
  fs::rename(a.path() + "/pkg/sub/c.go", a.path() + "/pkg/sub/b.go");

  fs::create_directory(a.path() + "/empty");  // empty directory
  EXPECT_NE(Hash(a.path()), base);
  fs::remove(a.path() + "/empty");

  // Moving content between files (same concatenation) changes the hash.
  WriteFile(a.path() + "/main.go", "package main\npackage pkg\n");
  WriteFile(a.path() + "/pkg/a.go", "");
  EXPECT_NE(Hash(a.path()), base);
}

TEST(SourceTreeTest, IgnoresGitDirectories) {
  TempDir a, b;
  MakeTree(a.path());
  MakeTree(b.path());
  WriteFile(b.path() + "/.git/HEAD", "ref: refs/heads/main\n");
  WriteFile(b.path() + "/.git/objects/ab/cdef", "blob");
  WriteFile(b.path() + "/pkg/.git", "gitdir: ../.git/modules/pkg\n");  // submodule gitfile
  EXPECT_EQ(Hash(a.path()), Hash(b.path()));
  WriteFile(b.path() + "/.gitignore", "*.o\n");  // other dotfiles count
  EXPECT_NE(Hash(a.path()), Hash(b.path()));
}

TEST(SourceTreeTest, RejectsSpecialFilesAndMissingDir) {
  TempDir a;
  MakeTree(a.path());
  ASSERT_EQ(::mkfifo((a.path() + "/pkg/fifo").c_str(), 0644), 0);
  std::string hex;
  Status s = SourceTree::HashDirectory(a.path(), &hex);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("pkg/fifo"), std::string::npos) << s.message();
  EXPECT_EQ(SourceTree::HashDirectory(a.path() + "/nope", &hex).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(SourceTree::HashDirectory(a.path() + "/main.go", &hex).code(),
            Status::Code::kInvalidArgument);
}

TEST(SourceTreeTest, DoesNotFollowSymlinkedDirectories) {
  TempDir a, outside;
  MakeTree(a.path());
  fs::create_symlink(outside.path(), a.path() + "/out");
  std::string before = Hash(a.path());
  WriteFile(outside.path() + "/secret", "x");
  EXPECT_EQ(Hash(a.path()), before);
}

TEST(SourceTreeTest, Timing200Files) {
  TempDir a;
  for (int i = 0; i < 200; ++i) {
    std::string body;
    for (int l = 0; l < 130; ++l)
      body += "func f" + std::to_string(i) + "_" + std::to_string(l) + "() int { return " +
              std::to_string(l) + " }\n";
    WriteFile(a.path() + "/pkg" + std::to_string(i % 10) + "/file" + std::to_string(i) + ".go",
              body);
  }
  Hash(a.path());  // warm the page cache
  auto t0 = std::chrono::steady_clock::now();
  std::string h = Hash(a.path());
  double ms =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count() /
      1000.0;
  std::cout << "[timing] HashDirectory of 200 files / 26k lines: " << ms << " ms\n";
  EXPECT_LT(ms, 250);  // target < 50 ms; margin for a loaded 2-core machine
}

}  // namespace
}  // namespace kiln
