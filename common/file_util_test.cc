#include "common/file_util.h"

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-file-util-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string dir_;
};

TEST_F(FileUtilTest, WritesContentAndModeAndLeavesNoTemporary) {
  std::string path = dir_ + "/hook";
  ASSERT_TRUE(WriteFileAtomic(path, "#!/bin/sh\n", 0755).ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second\n", 0755).ok());
  EXPECT_EQ(Read(path), "second\n");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  size_t entries = 0;
  for (auto& e : fs::directory_iterator(dir_)) entries += 1, (void)e;
  EXPECT_EQ(entries, 1u);
}

TEST_F(FileUtilTest, OrphanTemporariesOfADeadWriterAreRemovedOthersStay) {
  // A writer that is gone: a child that has exited and been reaped.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(dead, &status, 0), dead);
  const std::string orphan = "k.json.tmp-" + std::to_string(dead) + "-7";
  const std::string mine = "k.json.tmp-" + std::to_string(::getpid()) + "-8";
  const std::string live = "k.json.tmp-1-9";  // init: alive
  for (const std::string& n : {orphan, mine, live, std::string("k.json"),
                               std::string("notes.tmp-") + std::to_string(dead)})
    std::ofstream(dir_ + "/" + n) << "x";
  fs::create_directory(dir_ + "/d.tmp-" + std::to_string(dead) + "-1");  // not a file: stays
  EXPECT_EQ(RemoveOrphanTempFiles(dir_), 1u);
  EXPECT_FALSE(fs::exists(dir_ + "/" + orphan));
  for (const std::string& n : {mine, live, std::string("k.json")})
    EXPECT_TRUE(fs::exists(dir_ + "/" + n)) << n;
  EXPECT_TRUE(fs::exists(dir_ + "/notes.tmp-" + std::to_string(dead)));  // not <pid>-<n>
  EXPECT_EQ(RemoveOrphanTempFiles(dir_ + "/missing"), 0u);
  // The one parser of WriteFileAtomic's names (the storage inventory uses it too).
  EXPECT_EQ(AtomicTempWriter("k.json.tmp-123-4"), 123);
  EXPECT_EQ(AtomicTempWriter("k.json.tmp-123"), 0);
  EXPECT_EQ(AtomicTempWriter(".tmp-123-4"), 0);
  EXPECT_EQ(AtomicTempWriter("k.json"), 0);
}

TEST_F(FileUtilTest, ReplacesASymlinkInsteadOfWritingThroughIt) {
  std::string victim = dir_ + "/victim";
  ASSERT_TRUE(WriteFileAtomic(victim, "keep\n").ok());
  std::string link = dir_ + "/state";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(link, "new\n", 0644, Durability::kAtomicOnly).ok());
  EXPECT_EQ(Read(victim), "keep\n");
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_EQ(Read(link), "new\n");
}

TEST_F(FileUtilTest, MissingDirectoryIsAnErrorNamingThePath) {
  Status s = WriteFileAtomic(dir_ + "/missing/file", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing/file"), std::string::npos);
}

TEST_F(FileUtilTest, ReadFileReadsEveryByteAndLeavesTheOutputAloneOnFailure) {
  const std::string bytes("a\0b\xff\n", 5);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/f", bytes).ok());
  std::string out = "old";
  ASSERT_TRUE(ReadFile(dir_ + "/f", &out));
  EXPECT_EQ(out, bytes);
  out = "old";
  EXPECT_FALSE(ReadFile(dir_ + "/missing", &out));
  EXPECT_EQ(out, "old");
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/empty", "").ok());
  ASSERT_TRUE(ReadFile(dir_ + "/empty", &out));
  EXPECT_EQ(out, "");
}

TEST_F(FileUtilTest, ExclusiveLockExcludesASecondHolder) {
  std::string path = dir_ + "/repo.lock";
  {
    FileLock first(path, LOCK_EX);
    ASSERT_TRUE(first.held()) << first.error();
    FileLock second(path, LOCK_EX | LOCK_NB);
    EXPECT_FALSE(second.held());
    EXPECT_EQ(second.error(), "busy");
    FileLock shared(path, LOCK_SH | LOCK_NB);
    EXPECT_FALSE(shared.held());
  }
  FileLock after(path, LOCK_EX | LOCK_NB);
  EXPECT_TRUE(after.held());
}

TEST_F(FileUtilTest, SharedLocksCoexist) {
  std::string path = dir_ + "/repo.lock";
  FileLock a(path, LOCK_SH);
  FileLock b(path, LOCK_SH | LOCK_NB);
  EXPECT_TRUE(a.held());
  EXPECT_TRUE(b.held());
}

TEST_F(FileUtilTest, LockRefusesASymlink) {
  std::string link = dir_ + "/checkout.lock";
  ASSERT_EQ(::symlink("/etc/passwd", link.c_str()), 0);
  FileLock lock(link, LOCK_EX | LOCK_NB);
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(lock.error().empty());
}

}  // namespace
}  // namespace kiln
