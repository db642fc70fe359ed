// PushOciLayout against a fake registry (registry/fake_http_server.h): which blobs are uploaded,
// that the manifest is put last and only when every blob is there (issue 18: blobs are pushed
// concurrently now), and that a blob the registry refuses leaves the tag alone.
#include "builder/oci_layout_pusher.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "registry/fake_http_server.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
using json = nlohmann::json;
using testing::FakeServer;
using testing::Reply;

std::string Digest(const std::string& data) { return "sha256:" + Sha256Hex(data); }

class OciLayoutPusherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-ocipush-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/blobs/sha256");
    config_ = Blob("{\"architecture\":\"amd64\"}");
    for (int i = 0; i < 4; ++i) layers_.push_back(Blob("layer " + std::to_string(i)));
    json m = {{"schemaVersion", 2},
              {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
              {"config",
               {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                {"digest", config_},
                {"size", 24}}},
              {"layers", json::array()}};
    for (const auto& l : layers_)
      m["layers"].push_back(
          {{"mediaType", "application/vnd.oci.image.layer.v1.tar"}, {"digest", l}, {"size", 7}});
    manifest_ = Blob(m.dump());
    json index = {{"schemaVersion", 2},
                  {"manifests",
                   {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                     {"digest", manifest_},
                     {"size", 1},
                     {"annotations", {{"org.opencontainers.image.ref.name", "img"}}}}}}};
    std::ofstream(dir_ + "/index.json") << index.dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Blob(const std::string& data) {
    std::string d = Digest(data);
    std::ofstream(dir_ + "/blobs/sha256/" + d.substr(7), std::ios::binary) << data;
    return d;
  }

  // A registry that has `present`, refuses uploads of `refused`, and records what happened.
  FakeServer::Handler Registry() {
    return [this](const FakeServer::Request& req) {
      std::lock_guard<std::mutex> l(mu_);
      const std::string t(req.target());
      log_.push_back(std::string(http::to_string(req.method())) + " " + t);
      if (req.method() == http::verb::head) {
        const std::string d = t.substr(t.rfind('/') + 1);
        return Reply(present_.count(d) || uploaded_.count(d) ? 200 : 404);
      }
      if (req.method() == http::verb::post) {
        auto r = Reply(202);
        r.set(http::field::location, "/v2/app/blobs/uploads/u" + std::to_string(log_.size()));
        return r;
      }
      if (req.method() == http::verb::put && t.find("/blobs/uploads/") != std::string::npos) {
        const std::string d = t.substr(t.find("digest=") + 7);
        const std::string digest = "sha256:" + d.substr(d.find("3A") + 2);  // url-encoded ':'
        if (refused_.count(digest)) return Reply(400, "{\"errors\":[]}");
        uploaded_.insert(digest);
        return Reply(201);
      }
      if (req.method() == http::verb::put && t.find("/manifests/") != std::string::npos) {
        manifest_put_after_ = uploaded_.size();
        auto r = Reply(201);
        r.set("Docker-Content-Digest", Digest(req.body()));
        return r;
      }
      return Reply(404);
    };
  }

  OciPushResult Push(RegistryClient* c, bool blobs_only = false) {
    OciPushRequest req;
    req.blobs_only = blobs_only;
    req.layout_dir = dir_;
    req.ref_name = "img";
    req.expect_config_digest = config_;
    req.repository = "app";
    req.tag = "cand";
    return PushOciLayout(c, req, nullptr, nullptr);
  }

  std::string dir_, config_, manifest_;
  std::vector<std::string> layers_;
  std::mutex mu_;
  std::vector<std::string> log_;
  std::set<std::string> present_, uploaded_, refused_;
  size_t manifest_put_after_ = 0;
};

TEST_F(OciLayoutPusherTest, UploadsOnlyMissingBlobsThenTheManifestLast) {
  present_ = {layers_[0]};
  FakeServer server(Registry());
  RegistryClient client({server.url(), std::nullopt, std::nullopt});
  OciPushResult r = Push(&client);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.digest, manifest_);
  EXPECT_EQ(r.uploaded_blobs, 4);  // the config and three layers; layer 0 was there
  EXPECT_EQ(uploaded_, (std::set<std::string>{config_, layers_[1], layers_[2], layers_[3]}));
  EXPECT_EQ(manifest_put_after_, 4u);  // every upload had finished
  ASSERT_FALSE(log_.empty());
  EXPECT_EQ(log_.back(), "PUT /v2/app/manifests/cand");
}

// Issue 20: the blob stage (before the push-lane grant) uploads every missing blob and puts no
// manifest; the push under the grant then only HEADs them and puts the manifest.
TEST_F(OciLayoutPusherTest, BlobsOnlyThenThePushUnderTheGrantPutsOnlyTheManifest) {
  FakeServer server(Registry());
  RegistryClient client({server.url(), std::nullopt, std::nullopt});
  OciPushResult blobs = Push(&client, true);
  ASSERT_TRUE(blobs.status.ok()) << blobs.status.ToString();
  EXPECT_EQ(blobs.digest, "");
  EXPECT_EQ(blobs.uploaded_blobs, 5);
  size_t before_grant = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& line : log_)
      EXPECT_EQ(line.find("/manifests/"), std::string::npos) << "no tag moves: " << line;
    before_grant = log_.size();
  }
  OciPushResult r = Push(&client);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.digest, manifest_);
  EXPECT_EQ(r.uploaded_blobs, 0);
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> under_grant(log_.begin() + before_grant, log_.end());
  ASSERT_EQ(under_grant.size(), 6u);  // five HEADs, then the manifest
  for (size_t i = 0; i + 1 < under_grant.size(); ++i)
    EXPECT_EQ(under_grant[i].rfind("HEAD /v2/app/blobs/sha256:", 0), 0u) << under_grant[i];
  EXPECT_EQ(under_grant.back(), "PUT /v2/app/manifests/cand");
}

TEST_F(OciLayoutPusherTest, RefusedBlobLeavesTheTagAlone) {
  refused_ = {layers_[2]};
  FakeServer server(Registry());
  RegistryClient client({server.url(), std::nullopt, std::nullopt});
  OciPushResult r = Push(&client);
  EXPECT_FALSE(r.status.ok());
  for (const auto& line : log_) EXPECT_EQ(line.find("/manifests/"), std::string::npos) << line;
}

}  // namespace
}  // namespace kiln
