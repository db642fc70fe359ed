// Unit tests of BuildahBuilder's pure helpers (base-image discovery, shell quoting) and of the
// OCI layout reader's refusal of symlinks and path tricks. No buildah, no registry.
#include "builder/buildah_builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "builder/oci_layout_pusher.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

TEST(BuildahBuilderBaseImages, FindsFromCopyFromAndMountFromWithArgs) {
  const std::string cf =
      "# comment\n"
      "ARG KILN_REGISTRY\n"
      "ARG TAG=1.19\n"
      "FROM ${KILN_REGISTRY}/kiln/go-builder:${TAG} AS build\n"
      "RUN --mount=type=cache,target=/c --mount=type=bind,from=reg:5000/tools/x:2,target=/t \\\n"
      "    go build ./...\n"
      "FROM build AS test\n"
      "FROM scratch\n"
      "COPY --from=build /out /out\n"
      "COPY --from=reg:5000/extra/y@sha256:" + std::string(64, 'a') + " /y /y\n"
      "COPY --from=0 /z /z\n"
      "from $KILN_REGISTRY/kiln/busybox:1\n";
  auto images = BuildahBuilder::BaseImages(cf, {{"KILN_REGISTRY", "reg:5000"}});
  ASSERT_EQ(images.size(), 4u);
  EXPECT_EQ(images[0], "reg:5000/kiln/go-builder:1.19");
  EXPECT_EQ(images[1], "reg:5000/tools/x:2");
  EXPECT_EQ(images[2], "reg:5000/extra/y@sha256:" + std::string(64, 'a'));
  EXPECT_EQ(images[3], "reg:5000/kiln/busybox:1");
  // A build arg overrides the ARG default.
  images = BuildahBuilder::BaseImages("ARG TAG=1\nFROM r:1/a:${TAG}\n", {{"TAG", "2"}});
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0], "r:1/a:2");
}

TEST(BuildahBuilderShellQuote, QuotesEverything) {
  EXPECT_EQ(BuildahBuilder::ShellQuote("a b"), "'a b'");
  EXPECT_EQ(BuildahBuilder::ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(BuildahBuilder::ShellQuote("$(rm -rf /)`x`"), "'$(rm -rf /)`x`'");
}

TEST(OciLayoutReader, RefusesSymlinksAndTraversal) {
  char tmpl[] = "/tmp/kiln-oci-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  fs::create_directories(dir + "/blobs/sha256");
  std::ofstream(dir + "/secret") << "secret";
  std::ofstream(dir + "/blobs/sha256/ok") << "data";
  fs::create_symlink(dir + "/secret", dir + "/blobs/sha256/link");
  fs::create_directory_symlink(dir + "/blobs", dir + "/dirlink");
  std::string data;
  EXPECT_TRUE(ReadFileBeneath(dir, "blobs/sha256/ok", 100, &data).ok());
  EXPECT_EQ(data, "data");
  EXPECT_FALSE(ReadFileBeneath(dir, "blobs/sha256/link", 100, &data).ok());
  EXPECT_FALSE(ReadFileBeneath(dir, "dirlink/sha256/ok", 100, &data).ok());
  EXPECT_FALSE(ReadFileBeneath(dir, "blobs/../secret", 100, &data).ok());
  EXPECT_EQ(ReadFileBeneath(dir, "blobs/sha256/ok", 2, &data).code(),
            Status::Code::kResourceExhausted);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
