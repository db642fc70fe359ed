// Unit tests of BuildahBuilder's pure helpers (base-image discovery, shell quoting) and of the
// OCI layout reader's refusal of symlinks and path tricks. No buildah, no registry.
#include "builder/buildah_builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "builder/containerfile_images.h"
#include "builder/oci_layout_pusher.h"
#include "config/base_image_policy.h"

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
      "COPY --from=reg:5000/extra/y@sha256:" +
      std::string(64, 'a') +
      " /y /y\n"
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

std::vector<std::string> Images(const std::string& cf,
                                std::map<std::string, std::string> args = {}) {
  std::vector<std::string> out;
  for (const auto& i : ContainerfileImages(cf, args)) out.push_back(i.image);
  return out;
}

using Strings = std::vector<std::string>;

TEST(ContainerfileImages, StageNamesAndNumbersAreNotImages) {
  EXPECT_EQ(Images("FROM r:1/a AS Build\nFROM build\nCOPY --from=BUILD /x /x\nCOPY --from=1 /y /y\n"
                   "RUN --mount=type=bind,from=build,target=/t true\nFROM scratch\n"),
            Strings{"r:1/a"});
  // A stage is only a stage after its FROM ... AS: a later name is checked as an image.
  EXPECT_EQ(Images("FROM r:1/a\nCOPY --from=later /x /x\nFROM r:1/b AS later\n"),
            (Strings{"r:1/a", "later", "r:1/b"}));
}

TEST(ContainerfileImages, FlagsContinuationsCommentsAndDirectives) {
  EXPECT_EQ(Images("FROM --platform=linux/amd64 r:1/a:1 AS x\n"
                   "COPY --chown=1:1 \\  \n"
                   "# a comment inside the continuation\n"
                   "\n"
                   "     --from=r:1/b:2 /a /a\n"
                   "RUN --network=none --mount=\"type=bind,FROM=r:1/c,target=/c\" true\n"
                   "  # FROM r:1/commented\n"),
            (Strings{"r:1/a:1", "r:1/b:2", "r:1/c"}));
  // `# escape=`` makes the backtick the continuation character.
  EXPECT_EQ(Images("# escape=`\nFROM r:1/a\nCOPY `\n  --from=r:1/e /a /a\n"),
            (Strings{"r:1/a", "r:1/e"}));
}

TEST(ContainerfileImages, HeredocBodiesAreNotInstructions) {
  EXPECT_EQ(Images("FROM r:1/a\nRUN <<EOF\nFROM r:1/not-an-image\nfrom os import path\nEOF\n"
                   "RUN <<-'END' cat > /x\n\tCOPY --from=r:1/nope /a /b\n\tEND\nFROM r:1/b\n"),
            (Strings{"r:1/a", "r:1/b"}));
}

TEST(ContainerfileImages, ArgSubstitution) {
  const std::string cf =
      "ARG REG=r:1\nARG TAG\nARG BASE=${REG}/base\n"
      "FROM ${BASE}:${TAG:-1}\n"
      "FROM $REG/x:${UNSET}\n"
      "ARG REG\nARG LOCAL=loc\n"
      "COPY --from=${REG}/${LOCAL}:2 /a /a\n"
      "RUN --mount=type=bind,from=$REG/m${SUFFIX-def},target=/m true\n";
  EXPECT_EQ(Images(cf), (Strings{"r:1/base:1", "r:1/x:${UNSET}", "r:1/loc:2", "r:1/mdef"}));
  // Build args override defaults (and resolve names without an ARG).
  EXPECT_EQ(Images(cf, {{"TAG", "9"}, {"REG", "q:2"}, {"UNSET", "u"}, {"SUFFIX", "s"}}),
            (Strings{"q:2/base:9", "q:2/x:u", "q:2/loc:2", "q:2/ms"}));
  // ARG TAG without a default and no build arg: unresolved, the `$` stays (and is refused).
  auto images = Images("ARG TAG\nFROM r:1/a:$TAG\n");
  ASSERT_EQ(images.size(), 1u);
  EXPECT_NE(images[0].find('$'), std::string::npos);
  BaseImagePolicy p("d", "r:1", "loop/d", std::nullopt, {});
  EXPECT_FALSE(p.Check(images[0]).ok());
  // A stage reached through an ARG is still a stage.
  EXPECT_EQ(Images("ARG S=build\nFROM r:1/a AS build\nFROM ${S}\n"), Strings{"r:1/a"});
}

TEST(ContainerfileImages, CrossDomainImageBehindAnArgIsRefused) {
  // The policy sees the image after substitution, whichever instruction names it.
  BaseImagePolicy p("ranker", "r:1", "loop/ranker", std::nullopt, {{"epp", "loop/epp"}});
  for (const std::string& cf : std::vector<std::string>{
           "ARG X=r:1/loop/epp:main\nFROM $X\n",
           "FROM r:1/ok\nCOPY --from=r:1/loop/epp /app /app\n",
           "FROM r:1/ok\nRUN --mount=type=bind,from=r:1/loop/epp:main,target=/e base64 /e/app\n"}) {
    bool refused = false;
    for (const auto& img : Images(cf, {{"KILN_REGISTRY", "r:1"}}))
      if (!p.Check(img).ok()) refused = true;
    EXPECT_TRUE(refused) << cf;
  }
}

TEST(BuildahBuilderSecretPaths, EveryDomainsSecretsAreHidden) {
  char tmpl[] = "/tmp/kiln-secrets-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  fs::create_directories(dir + "/kube");
  fs::create_directories(dir + "/tls");
  for (const char* f : {"/auth-a.json", "/auth-b.json", "/kube/config", "/kube/client.key",
                        "/kube/notes.txt", "/tls/ca.crt", "/tls/registry-key.pem"})
    std::ofstream(dir + f) << "x";
  auto site = std::make_shared<Config>();
  site->registries["a"] =
      RegistryConfig{"a", "http://127.0.0.1:5000", dir + "/auth-a.json", std::nullopt};
  site->registries["b"] =
      RegistryConfig{"b", "https://r.example.com", dir + "/auth-b.json", dir + "/tls/ca.crt"};
  DomainConfig epp;
  epp.deploy.kubernetes.emplace();
  epp.deploy.kubernetes->kubeconfig = dir + "/kube/config";
  site->domains["epp"] = epp;
  site->domains["ranker"] = DomainConfig{};
  BuildJob job;
  job.domain = "ranker";
  job.registry = site->registries["a"];
  std::vector<std::string> files, dirs;
  BuildahBuilder::SecretPaths(site.get(), job, &files, &dirs);
  std::set<std::string> got(files.begin(), files.end());
  EXPECT_EQ(got,
            (std::set<std::string>{dir + "/auth-a.json", dir + "/auth-b.json", dir + "/kube/config",
                                   dir + "/kube/client.key", dir + "/tls/registry-key.pem"}));
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), "/run/secrets"), dirs.end());
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), "/var/run/secrets"), dirs.end());
  // Without the whole config: at least the job's own credential.
  BuildahBuilder::SecretPaths(nullptr, job, &files, &dirs);
  EXPECT_NE(std::find(files.begin(), files.end(), dir + "/auth-a.json"), files.end());
  fs::remove_all(dir);
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
