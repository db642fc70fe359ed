// Tests of the layered mode's OCI documents against the image spec's required fields
// (config.md: architecture, os, rootfs{type:"layers", diff_ids}; manifest.md: schemaVersion 2,
// mediaType, config and layers descriptors; descriptor.md: mediaType, digest, size).
#include "builder/oci_image.h"

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace kiln {
namespace {
using json = nlohmann::json;

std::string D(char c) { return "sha256:" + std::string(64, c); }

json BaseManifest() {  // a docker v2 manifest, as buildah pushes by default
  return {{"schemaVersion", 2},
          {"mediaType", "application/vnd.docker.distribution.manifest.v2+json"},
          {"config",
           {{"mediaType", "application/vnd.docker.container.image.v1+json"},
            {"digest", D('c')},
            {"size", 900}}},
          {"layers",
           {{{"mediaType", "application/vnd.docker.image.rootfs.diff.tar.gzip"},
             {"digest", D('1')},
             {"size", 1100000}}}}};
}

json BaseConfig() {
  return {
      {"architecture", "amd64"},
      {"os", "linux"},
      {"created", "2024-01-01T00:00:00Z"},
      {"config",
       {{"Env", {"PATH=/bin"}}, {"Cmd", {"sh"}}, {"Labels", {{"io.kiln.inputs", "abc"}}}}},
      {"rootfs", {{"type", "layers"}, {"diff_ids", {D('a')}}}},
      {"history",
       {{{"created", "2024-01-01T00:00:00Z"}, {"created_by", "COPY busybox"}},
        {{"created", "2024-01-01T00:00:00Z"}, {"created_by", "ENV PATH"}, {"empty_layer", true}}}}};
}

OciImageSpec Spec() {
  OciImageSpec s;
  s.layer = {kOciLayerTarGzip, D('2'), 4080000};
  s.layer_diff_id = D('b');
  s.entrypoint = {"/app"};
  s.labels = {{"kiln.candidate", "c1"}};
  s.annotations = {{"io.kiln.build-key", "k1"}, {"org.opencontainers.image.revision", "deadbeef"}};
  return s;
}

void ExpectDescriptor(const json& d, const std::string& type, const std::string& digest,
                      uint64_t size) {
  ASSERT_TRUE(d.is_object()) << d;
  EXPECT_EQ(d.value("mediaType", ""), type);
  EXPECT_EQ(d.value("digest", ""), digest);
  ASSERT_TRUE(d["size"].is_number_unsigned()) << d;
  EXPECT_EQ(d["size"].get<uint64_t>(), size);
}

TEST(OciImageTest, ManifestHasTheRequiredFieldsAndDescriptors) {
  OciImage img;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), Spec(), &img).ok());
  json m = json::parse(img.manifest);
  EXPECT_EQ(m["schemaVersion"], 2);
  EXPECT_EQ(m["mediaType"], kOciImageManifestType);
  EXPECT_EQ(img.manifest_digest, "sha256:" + Sha256Hex(img.manifest));
  // config descriptor: the config bytes' digest and size.
  ExpectDescriptor(m["config"], kOciImageConfigType, "sha256:" + Sha256Hex(img.config),
                   img.config.size());
  EXPECT_EQ(img.config_desc.digest, "sha256:" + Sha256Hex(img.config));
  // layers: the base's (docker media type mapped to OCI), then the new one.
  ASSERT_EQ(m["layers"].size(), 2u);
  ExpectDescriptor(m["layers"][0], kOciLayerTarGzip, D('1'), 1100000);
  ExpectDescriptor(m["layers"][1], kOciLayerTarGzip, D('2'), 4080000);
  ASSERT_EQ(img.base_layers.size(), 1u);
  EXPECT_EQ(img.base_layers[0].digest, D('1'));
  EXPECT_EQ(m["annotations"]["io.kiln.build-key"], "k1");
  EXPECT_EQ(m["annotations"]["org.opencontainers.image.revision"], "deadbeef");
}

TEST(OciImageTest, ConfigHasRootfsDiffIdsHistoryPlatformAndEntrypoint) {
  OciImage img;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), Spec(), &img).ok());
  json c = json::parse(img.config);
  EXPECT_EQ(c["architecture"], "amd64");
  EXPECT_EQ(c["os"], "linux");
  EXPECT_EQ(c["rootfs"]["type"], "layers");
  // diff_ids are the UNCOMPRESSED digests, one per manifest layer, in order.
  EXPECT_EQ(c["rootfs"]["diff_ids"], json({D('a'), D('b')}));
  // history: one non-empty entry per layer.
  size_t non_empty = 0;
  for (const auto& h : c["history"]) non_empty += h.value("empty_layer", false) ? 0 : 1;
  EXPECT_EQ(non_empty, 2u);
  EXPECT_EQ(c["history"].back()["created_by"], "kiln layered build");
  EXPECT_EQ(c["config"]["Entrypoint"], json({"/app"}));
  EXPECT_FALSE(c["config"].contains("Cmd"))
      << "the base Cmd would become the entrypoint's arguments";
  EXPECT_EQ(c["config"]["Env"], json({"PATH=/bin"}));
  EXPECT_EQ(c["config"]["Labels"]["kiln.candidate"], "c1");
  EXPECT_EQ(c["config"]["Labels"]["io.kiln.inputs"], "abc");
  EXPECT_EQ(c["created"], "1970-01-01T00:00:00Z");
}

TEST(OciImageTest, ConfigIsTheSameForEveryBuildOfTheSameOutputs) {
  OciImageSpec a = Spec(), b = Spec();
  b.annotations = {{"io.kiln.build-key", "k2"}, {"org.opencontainers.image.revision", "cafe"}};
  OciImage ia, ib, ia2;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), a, &ia).ok());
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), b, &ib).ok());
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), a, &ia2).ok());
  EXPECT_EQ(ia.config, ib.config) << "nothing per build in the config";
  EXPECT_NE(ia.manifest_digest, ib.manifest_digest);
  EXPECT_EQ(ia.manifest, ia2.manifest) << "deterministic";
  // No annotations: no annotations key.
  OciImageSpec c = Spec();
  c.annotations.clear();
  OciImage ic;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), c, &ic).ok());
  EXPECT_FALSE(json::parse(ic.manifest).contains("annotations"));
  // A different layer changes the config (diff_ids) and the manifest.
  c.layer_diff_id = D('e');
  OciImage id;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), BaseConfig(), c, &id).ok());
  EXPECT_NE(id.config_desc.digest, ic.config_desc.digest);
}

TEST(OciImageTest, MinimalBaseConfigGetsPlatformAndConsistentHistory) {
  json cfg = {{"rootfs", {{"type", "layers"}, {"diff_ids", {D('a')}}}}};
  OciImage img;
  ASSERT_TRUE(MakeOciImage(BaseManifest(), cfg, Spec(), &img).ok());
  json c = json::parse(img.config);
  EXPECT_EQ(c["architecture"], "amd64");
  EXPECT_EQ(c["os"], "linux");
  EXPECT_EQ(c["history"].size(), 2u);
  EXPECT_EQ(c["config"]["Entrypoint"], json({"/app"}));
}

TEST(OciImageTest, MalformedBasesAreRefused) {
  OciImage img;
  json m = BaseManifest();
  m.erase("layers");
  EXPECT_EQ(MakeOciImage(m, BaseConfig(), Spec(), &img).code(), Status::Code::kInvalidArgument);
  m = BaseManifest();
  m["layers"][0].erase("size");
  EXPECT_EQ(MakeOciImage(m, BaseConfig(), Spec(), &img).code(), Status::Code::kInvalidArgument);
  m = BaseManifest();
  m["layers"][0]["digest"] = "md5:xyz";
  EXPECT_EQ(MakeOciImage(m, BaseConfig(), Spec(), &img).code(), Status::Code::kInvalidArgument);
  json c = BaseConfig();
  c["rootfs"]["diff_ids"] = json::array();
  EXPECT_EQ(MakeOciImage(BaseManifest(), c, Spec(), &img).code(), Status::Code::kInvalidArgument);
  OciImageSpec s = Spec();
  s.layer.digest = "sha256:short";
  EXPECT_EQ(MakeOciImage(BaseManifest(), BaseConfig(), s, &img).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(OciLayerMediaType("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            kOciLayerTarGzip);
  EXPECT_EQ(OciLayerMediaType(kOciLayerTarGzip), kOciLayerTarGzip);
}

}  // namespace
}  // namespace kiln
