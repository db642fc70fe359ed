// Unit tests of the base-image policy (config/base_image_policy.h) and of the check-config
// domain-isolation checks. Pure: no registry, no files.
#include "config/base_image_policy.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

const std::string kHost = "127.0.0.1:5000";
const std::string kDigest = "sha256:" + std::string(64, 'a');

Config TwoDomains() {
  Config c;
  c.registries["local"] =
      RegistryConfig{"local", "http://127.0.0.1:5000/", std::nullopt, std::nullopt};
  c.registries["other"] =
      RegistryConfig{"other", "https://reg.example.com", std::nullopt, std::nullopt};
  for (const auto& [name, repo] :
       std::map<std::string, std::string>{{"epp", "loop/epp"}, {"ranker", "loop/ranker"}}) {
    DomainConfig d;
    d.name = name;
    d.image.registry = "local";
    d.image.repository = repo;
    c.domains[name] = d;
  }
  DomainConfig far;
  far.name = "far";
  far.image.registry = "other";
  far.image.repository = "loop/far";
  c.domains["far"] = far;
  return c;
}

TEST(BaseImagePolicy, CrossDomainFromIsRefusedWithTheRule) {
  Config c = TwoDomains();
  BaseImagePolicy p = BaseImagePolicy::ForDomain(c, "ranker");
  Status st = p.Check(kHost + "/loop/epp:main");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("base image '127.0.0.1:5000/loop/epp:main' is not allowed for "
                              "domain ranker: it is domain epp's image repository"),
            std::string::npos)
      << st.message();
  // Anything under it, by digest, in other spellings of the same name.
  EXPECT_FALSE(p.Check(kHost + "/loop/epp/cache:1").ok());
  EXPECT_FALSE(p.Check(kHost + "/loop/epp@" + kDigest).ok());
  EXPECT_FALSE(p.Check(kHost + "/LOOP/Epp:main").ok());
  EXPECT_FALSE(p.Check(kHost + "/loop/epp:main@" + kDigest).ok());
  // A name that only shares a prefix is not epp's.
  EXPECT_TRUE(p.Check(kHost + "/loop/epp2:main").ok());
  // A domain on another registry host is no concern of this registry.
  EXPECT_TRUE(p.Check(kHost + "/loop/far:1").ok());
}

TEST(BaseImagePolicy, OwnRepositoryAndOtherRepositoriesAllowedByDefault) {
  BaseImagePolicy p = BaseImagePolicy::ForDomain(TwoDomains(), "ranker");
  EXPECT_TRUE(p.Check(kHost + "/loop/ranker:c1").ok());
  EXPECT_TRUE(p.Check(kHost + "/loop/ranker@" + kDigest).ok());
  EXPECT_TRUE(p.Check(kHost + "/kiln/go-builder:1.21").ok());
  EXPECT_TRUE(p.Check(kHost + "/busybox").ok());
}

TEST(BaseImagePolicy, OtherRegistriesAndHostlessNamesAreRefused) {
  BaseImagePolicy p = BaseImagePolicy::ForDomain(TwoDomains(), "ranker");
  for (const std::string& img :
       std::vector<std::string>{"alpine", "docker.io/library/alpine:3", "reg.example.com/loop/x",
                                "localhost/loop/epp", "127.0.0.1:5001/kiln/x"}) {
    Status st = p.Check(img);
    EXPECT_FALSE(st.ok()) << img;
    EXPECT_NE(st.message().find("is not in the domain's registry 127.0.0.1:5000"),
              std::string::npos)
        << st.message();
  }
  // Hosts compare case-insensitively.
  BaseImagePolicy q("d", "Reg.Example.COM", "loop/d", std::nullopt, {});
  EXPECT_TRUE(q.Check("reg.example.com/kiln/x:1").ok());
}

TEST(BaseImagePolicy, AllowedPatterns) {
  Config c = TwoDomains();
  c.domains["ranker"].build.base_images =
      std::vector<std::string>{"kiln/*", "base/go-builder:1.*", "pinned/x@" + kDigest, "deep/**"};
  BaseImagePolicy p = BaseImagePolicy::ForDomain(c, "ranker");
  EXPECT_TRUE(p.Check(kHost + "/kiln/busybox:1").ok());
  EXPECT_FALSE(p.Check(kHost + "/kiln/a/b:1").ok());  // * stays in one segment
  EXPECT_TRUE(p.Check(kHost + "/deep/a/b:1").ok());   // ** does not
  EXPECT_TRUE(p.Check(kHost + "/base/go-builder:1.21").ok());
  EXPECT_FALSE(p.Check(kHost + "/base/go-builder:2.0").ok());
  EXPECT_FALSE(p.Check(kHost + "/base/go-builder").ok());  // no tag: not a pinned 1.*
  EXPECT_TRUE(p.Check(kHost + "/pinned/x@" + kDigest).ok());
  EXPECT_FALSE(p.Check(kHost + "/pinned/x:latest").ok());
  EXPECT_TRUE(p.Check(kHost + "/loop/ranker:c1").ok());  // own repository always
  Status st = p.Check(kHost + "/other/thing:1");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("matches no entry of build.base_images (allowed: kiln/*, "
                              "base/go-builder:1.*"),
            std::string::npos)
      << st.message();
}

TEST(BaseImagePolicy, WildcardNeverGrantsAnotherDomainLiteralListingDoes) {
  Config c = TwoDomains();
  c.domains["ranker"].build.base_images = std::vector<std::string>{"loop/*", "kiln/*"};
  BaseImagePolicy p = BaseImagePolicy::ForDomain(c, "ranker");
  Status st = p.Check(kHost + "/loop/epp:main");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("it is domain epp's image repository (allowed: loop/*, kiln/*"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(p.Check(kHost + "/loop/shared:1").ok());
  c.domains["ranker"].build.base_images = std::vector<std::string>{"loop/epp"};
  EXPECT_TRUE(BaseImagePolicy::ForDomain(c, "ranker").Check(kHost + "/loop/epp:main").ok());
  EXPECT_FALSE(BaseImagePolicy::ForDomain(c, "ranker").Check(kHost + "/loop/epp/sub:1").ok());
}

TEST(BaseImagePolicy, UnresolvedOrMalformedNamesAreRefused) {
  BaseImagePolicy p = BaseImagePolicy::ForDomain(TwoDomains(), "ranker");
  for (const std::string& img :
       std::vector<std::string>{kHost + "/loop/${X}:1", "$KILN_REGISTRY/kiln/x", kHost + "/kiln//x",
                                kHost + "/kiln/x:", kHost + "/kiln/x@sha256:12",
                                "\"" + kHost + "/kiln/x\"", std::string(), kHost + "/../x"}) {
    Status st = p.Check(img);
    EXPECT_FALSE(st.ok()) << img;
    EXPECT_NE(st.message().find("is not allowed for domain ranker"), std::string::npos)
        << st.message();
  }
  EXPECT_NE(p.Check(kHost + "/loop/${X}:1").message().find("cannot resolve"), std::string::npos);
}

TEST(BaseImagePolicy, ParseImageRefNormalises) {
  ImageRef r;
  std::string why;
  ASSERT_TRUE(ParseImageRef("Reg.Example.com:443/Loop/App:V1", &r, &why)) << why;
  EXPECT_EQ(r.host, "reg.example.com:443");
  EXPECT_EQ(r.repository, "loop/app");
  EXPECT_EQ(r.tag, "V1");
  ASSERT_TRUE(ParseImageRef("busybox", &r, &why));
  EXPECT_EQ(r.host, "docker.io");
  EXPECT_EQ(r.repository, "library/busybox");
  ASSERT_TRUE(ParseImageRef("index.docker.io/x/y@" + kDigest, &r, &why));
  EXPECT_EQ(r.host, "docker.io");
  EXPECT_EQ(r.digest, kDigest);
  EXPECT_EQ(r.tag, "");
  ASSERT_TRUE(ParseImageRef("localhost/a:1", &r, &why));
  EXPECT_EQ(r.host, "localhost");
  EXPECT_EQ(RegistryHostOf("HTTP://127.0.0.1:5000//"), "127.0.0.1:5000");
}

TEST(BaseImagePolicy, PatternValidation) {
  EXPECT_EQ(ValidateBaseImagePattern("kiln/*"), "");
  EXPECT_EQ(ValidateBaseImagePattern("base/go-builder:1.2*"), "");
  EXPECT_EQ(ValidateBaseImagePattern("x@" + kDigest), "");
  EXPECT_NE(ValidateBaseImagePattern(""), "");
  EXPECT_NE(ValidateBaseImagePattern("127.0.0.1:5000/kiln/*"), "");
  EXPECT_NE(ValidateBaseImagePattern("localhost/kiln"), "");
  EXPECT_NE(ValidateBaseImagePattern("Kiln/X"), "");
  EXPECT_NE(ValidateBaseImagePattern("kiln//x"), "");
  EXPECT_NE(ValidateBaseImagePattern("kiln/x:"), "");
  EXPECT_NE(ValidateBaseImagePattern("kiln/x@sha256:1"), "");
}

std::string Problems(const Config& c, std::vector<ConfigProblem>* warnings = nullptr) {
  std::vector<ConfigProblem> problems, w;
  CheckDomainIsolation(c, &problems, &w);
  if (warnings) *warnings = w;
  std::string s;
  for (const auto& p : problems) s += FormatConfigProblem(p) + "\n";
  return s;
}

TEST(CheckDomainIsolation, OverlappingRepositoriesAreErrors) {
  Config c = TwoDomains();
  EXPECT_EQ(Problems(c), "");
  c.domains["ranker"].image.repository = "loop/epp";
  std::string out = Problems(c);
  EXPECT_NE(out.find("domains.ranker.image.repository: 'loop/epp' is also domain epp's image "
                     "repository on 127.0.0.1:5000"),
            std::string::npos)
      << out;
  c.domains["ranker"].image.repository = "loop/epp/ranker";
  out = Problems(c);
  EXPECT_NE(out.find("domains.ranker.image.repository: 'loop/epp/ranker' lies under domain epp's"),
            std::string::npos)
      << out;
  c.domains["ranker"].image.repository = "loop/eppx";  // a string prefix, not a path prefix
  EXPECT_EQ(Problems(c), "");
  // The same repository name on another registry host is fine.
  c.domains["far"].image.repository = "loop/epp";
  EXPECT_EQ(Problems(c), "");
  // Two registry entries for one host are the same registry.
  c.registries["alias"] =
      RegistryConfig{"alias", "http://127.0.0.1:5000", std::nullopt, std::nullopt};
  c.domains["far"].image.registry = "alias";
  EXPECT_NE(Problems(c).find("domains.far.image.repository"), std::string::npos);
}

TEST(CheckDomainIsolation, BaseImagePatternsMatchingAnotherDomain) {
  Config c = TwoDomains();
  c.domains["ranker"].build.base_images = std::vector<std::string>{"loop/*"};
  std::string out = Problems(c);
  EXPECT_NE(out.find("domains.ranker.build.base_images[0]: 'loop/*' matches domain epp's image "
                     "repository 'loop/epp'"),
            std::string::npos)
      << out;
  c.domains["ranker"].build.base_images = std::vector<std::string>{"loop/epp/*"};
  EXPECT_NE(Problems(c).find("matches domain epp's"), std::string::npos);
  c.domains["ranker"].build.base_images = std::vector<std::string>{"**"};
  EXPECT_NE(Problems(c).find("matches domain epp's"), std::string::npos);
  c.domains["ranker"].build.base_images = std::vector<std::string>{"kiln/*", "loop/ranker*"};
  EXPECT_EQ(Problems(c), "");
  // Listed literally: allowed, with a warning.
  c.domains["ranker"].build.base_images = std::vector<std::string>{"loop/epp"};
  std::vector<ConfigProblem> w;
  EXPECT_EQ(Problems(c, &w), "");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, "domains.ranker.build.base_images[0]");
}

}  // namespace
}  // namespace kiln
