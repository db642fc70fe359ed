#include "deploy/rootfs_extractor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "builder/layer_writer.h"
#include "deploy/tar_reader.h"
#include "deploy/testing_tar.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing_tar::TarBuilder;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Extract : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-extract-XXXXXX";
    base_ = mkdtemp(tmpl);
    root_ = base_ / "root";
    outside_ = base_ / "outside";
    fs::create_directories(root_);
    fs::create_directories(outside_);
  }
  void TearDown() override { fs::remove_all(base_); }
  Status Apply(const std::string& blob) { return ApplyLayer(root_.string(), blob, &stats_); }
  // Nothing but root/ and an empty outside/ in the base directory.
  void ExpectNothingOutside() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"outside", "root"}));
    EXPECT_TRUE(fs::is_empty(outside_));
    EXPECT_FALSE(fs::exists("/escape-kiln-test"));
  }

  fs::path base_, root_, outside_;
  ExtractStats stats_;
};

TEST_F(Extract, GzipAndPlainLayersWithModes) {
  ASSERT_TRUE(
      Apply(TarBuilder().Dir("bin").File("bin/app", "#!x", 04755).File("etc/conf", "a").Gzip())
          .ok());
  ASSERT_TRUE(Apply(TarBuilder().File("etc/conf", "b").Tar()).ok());
  EXPECT_EQ(ReadFile(root_ / "bin/app"), "#!x");
  EXPECT_EQ(ReadFile(root_ / "etc/conf"), "b");
  struct stat sb;
  ASSERT_EQ(stat((root_ / "bin/app").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0755u);  // setuid dropped
  EXPECT_EQ(stats_.neutralized, 0u);
}

TEST_F(Extract, LayerWriterOutputRoundTrips) {
  fs::path ws = base_ / "ws";
  fs::create_directories(ws / "www");
  std::ofstream(ws / "www/version") << "v1";
  std::ofstream(ws / "www/healthz") << "ok";
  LayerBlob blob;
  ASSERT_TRUE(WriteLayer(ws.string(), {{"www", "/srv/www"}}, 1, &blob).ok());
  ASSERT_TRUE(Apply(blob.data).ok());
  EXPECT_EQ(ReadFile(root_ / "srv/www/version"), "v1");
  EXPECT_EQ(ReadFile(root_ / "srv/www/healthz"), "ok");
  fs::remove_all(ws);
}

TEST_F(Extract, WhiteoutsRemoveLowerEntries) {
  ASSERT_TRUE(Apply(TarBuilder()
                        .File("a/keep", "1")
                        .File("a/gone", "2")
                        .File("d/old1", "3")
                        .File("d/sub/old2", "4")
                        .Tar())
                  .ok());
  ASSERT_TRUE(Apply(TarBuilder()
                        .File("a/.wh.gone", "")
                        .File("d/new", "5")
                        .File("d/.wh..wh..opq", "")
                        .File("d/x/y", "6")
                        .Tar())
                  .ok());
  EXPECT_TRUE(fs::exists(root_ / "a/keep"));
  EXPECT_FALSE(fs::exists(root_ / "a/gone"));
  EXPECT_FALSE(fs::exists(root_ / "a/.wh.gone"));
  EXPECT_FALSE(fs::exists(root_ / "d/old1"));
  EXPECT_FALSE(fs::exists(root_ / "d/sub"));
  EXPECT_EQ(ReadFile(root_ / "d/new"), "5");  // the layer's own entries survive its opaque marker
  EXPECT_EQ(ReadFile(root_ / "d/x/y"), "6");
  EXPECT_FALSE(fs::exists(root_ / "d/.wh..wh..opq"));
}

TEST_F(Extract, DotDotAndAbsoluteNamesStayInside) {
  ASSERT_TRUE(Apply(TarBuilder()
                        .File("../escape", "x")
                        .File("../../outside/f", "y")
                        .File("/escape-kiln-test", "z")
                        .File("a/../../../b", "w")
                        .Tar())
                  .ok());
  ExpectNothingOutside();
  EXPECT_EQ(ReadFile(root_ / "escape"), "x");
  EXPECT_EQ(ReadFile(root_ / "escape-kiln-test"), "z");
  EXPECT_EQ(ReadFile(root_ / "outside/f"), "y");
  EXPECT_EQ(ReadFile(root_ / "b"), "w");
  EXPECT_EQ(stats_.neutralized, 4u);
}

TEST_F(Extract, WritesThroughSymlinksStayInside) {
  std::string abs_outside = outside_.string();
  ASSERT_TRUE(Apply(TarBuilder()
                        .Symlink("abs", abs_outside)           // absolute link to a host dir
                        .Symlink("rel", "../outside")          // relative link out of the root
                        .Symlink("deep", "../../../../../..")  // climbs above everything
                        .Tar())
                  .ok());
  // Later layer writes "through" them.
  ASSERT_TRUE(Apply(TarBuilder()
                        .File("abs/pwned", "1")
                        .File("rel/pwned", "2")
                        .File("deep/tmp/pwned", "3")
                        .Dir("abs/newdir")
                        .Symlink("rel/link", "/etc/passwd")
                        .Tar())
                  .ok());
  ExpectNothingOutside();
  // The links resolve as if the root were "/".
  EXPECT_EQ(ReadFile(root_ / fs::path(abs_outside).relative_path() / "pwned"), "1");
  EXPECT_EQ(ReadFile(root_ / "outside/pwned"), "2");
  EXPECT_EQ(ReadFile(root_ / "tmp/pwned"), "3");
  EXPECT_TRUE(fs::is_symlink(root_ / "abs"));
}

TEST_F(Extract, WhiteoutThroughSymlinkCannotDeleteOutside) {
  std::ofstream(outside_ / "precious") << "keep";
  ASSERT_TRUE(Apply(TarBuilder().Symlink("o", outside_.string()).Tar()).ok());
  ASSERT_TRUE(Apply(TarBuilder().File("o/.wh.precious", "").File("o/.wh..wh..opq", "").Tar()).ok());
  EXPECT_EQ(ReadFile(outside_ / "precious"), "keep");
}

TEST_F(Extract, HardLinksOutsideAreNeutralized) {
  std::ofstream(outside_ / "secret") << "s";
  Status st = Apply(TarBuilder().Hardlink("h", "../outside/secret").Tar());
  // "../outside/secret" is cleaned to "outside/secret" inside the root, which does not exist.
  EXPECT_FALSE(st.ok());
  ASSERT_TRUE(Apply(TarBuilder().File("real", "r").Hardlink("h2", "real").Tar()).ok());
  EXPECT_EQ(ReadFile(root_ / "h2"), "r");
  struct stat a, b;
  ASSERT_EQ(stat((outside_ / "secret").c_str(), &a), 0);
  EXPECT_EQ(a.st_nlink, 1u);
  ASSERT_EQ(stat((root_ / "h2").c_str(), &b), 0);
  EXPECT_EQ(b.st_nlink, 2u);
}

TEST_F(Extract, DevicesAndFifosAreSkipped) {
  ASSERT_TRUE(Apply(TarBuilder()
                        .Device("dev/sda", '4')
                        .Device("dev/mem", '3')
                        .Device("fifo", '6')
                        .File("ok", "1")
                        .Tar())
                  .ok());
  EXPECT_FALSE(fs::exists(root_ / "dev/sda"));
  EXPECT_FALSE(fs::exists(root_ / "dev/mem"));
  EXPECT_FALSE(fs::exists(root_ / "fifo"));
  EXPECT_TRUE(fs::exists(root_ / "ok"));
  EXPECT_EQ(stats_.skipped, 3u);
}

TEST_F(Extract, PaxLongNames) {
  std::string longname = "d/" + std::string(150, 'n') + "/file";
  ASSERT_TRUE(Apply(TarBuilder().PaxFile(longname, "long").Tar()).ok());
  EXPECT_EQ(ReadFile(root_ / longname), "long");
}

TEST_F(Extract, MountPointsBecomeRealDirectories) {
  ASSERT_TRUE(Apply(TarBuilder()
                        .Symlink("proc", outside_.string())
                        .Symlink("tmp", "/")
                        .File("dev", "x")
                        .Tar())
                  .ok());
  ASSERT_TRUE(PrepareMountPoints(root_.string()).ok());
  for (const char* d : {"proc", "dev", "tmp"}) {
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(root_ / d))) << d;
  }
  ExpectNothingOutside();
}

TEST_F(Extract, CorruptAndUnsupportedLayers) {
  std::string tar = TarBuilder().File("a", "1").Tar();
  std::string bad = tar;
  bad[0] = 'X';  // checksum no longer matches
  EXPECT_EQ(Apply(bad).code(), Status::Code::kInvalidArgument);
  std::string gz = TarBuilder().File("a", std::string(100000, 'q')).Gzip();
  EXPECT_FALSE(Apply(gz.substr(0, gz.size() / 2)).ok());  // truncated
  EXPECT_EQ(Apply(std::string("\x28\xb5\x2f\xfd rest", 9)).code(),
            Status::Code::kInvalidArgument);  // zstd
}

TEST_F(Extract, LimitsAreEnforced) {
  ExtractLimits small;
  small.max_total_bytes = 10;
  EXPECT_EQ(ApplyLayer(root_.string(), TarBuilder().File("big", std::string(11, 'x')).Tar(),
                       &stats_, small)
                .code(),
            Status::Code::kInvalidArgument);
  ExtractLimits few;
  few.max_entries = 2;
  ExtractStats s2;
  EXPECT_EQ(ApplyLayer(root_.string(), TarBuilder().File("a", "").File("b", "").File("c", "").Tar(),
                       &s2, few)
                .code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_F(Extract, WorkingDirIsCreatedInsideTheRoot) {
  ASSERT_TRUE(Apply(TarBuilder().Symlink("srv", outside_.string()).Tar()).ok());
  ASSERT_TRUE(EnsureDirectoryInRoot(root_.string(), "/app/data").ok());
  EXPECT_TRUE(fs::is_directory(root_ / "app/data"));
  ASSERT_TRUE(EnsureDirectoryInRoot(root_.string(), "/srv/www").ok());  // through the link, inside
  EXPECT_TRUE(fs::is_directory(root_ / fs::path(outside_).relative_path() / "www"));
  ASSERT_TRUE(EnsureDirectoryInRoot(root_.string(), "/").ok());
  ASSERT_TRUE(Apply(TarBuilder().File("file", "x").Tar()).ok());
  EXPECT_FALSE(EnsureDirectoryInRoot(root_.string(), "/file/sub").ok());
  ExpectNothingOutside();
}

}  // namespace
}  // namespace kiln
