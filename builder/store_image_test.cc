// Unit tests of StoreImageReader (builder/store_image.h) and the base-layer map of
// builder/store_image_pusher.h, on synthetic containers/storage overlay stores written here (no
// buildah): the image record, the config under its big-data name, the layer chain across two
// stores, byte-exact tar-split reassembly, what a hostile build user could plant, and
// PushStoreImage against a fake registry.
#include "builder/store_image.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "builder/store_image_pusher.h"
#include "common/base64.h"
#include "common/sha256.h"
#include "registry/fake_http_server.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Digest(const std::string& s) { return "sha256:" + Sha256Hex(s); }
constexpr char kOciLayerTarGzipForTest[] = "application/vnd.oci.image.layer.v1.tar+gzip";

void Write(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

void WriteGz(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, data.data(), static_cast<unsigned>(data.size()));
  gzclose(f);
}

json Segment(const std::string& raw) { return {{"type", 2}, {"payload", EncodeBase64(raw)}}; }
json File(const std::string& name, size_t size) {
  return {{"type", 1}, {"name", name}, {"size", size}, {"payload", "AAAAAAAAAAA="}};
}

std::string Lines(const std::vector<json>& entries) {
  std::string s;
  for (const json& e : entries) s += e.dump() + "\n";
  return s;
}

// One layer: tar-split entries, the files of its diff directory, and the tar they make.
struct Layer {
  std::string id;
  std::vector<json> entries;
  std::map<std::string, std::string> files;
  std::string tar;  // what reassembly must give
};

// Header + contents + padding per file, like a tar (the reader does not parse tar).
Layer MakeLayer(char c, const std::map<std::string, std::string>& files) {
  Layer l;
  l.id = std::string(64, c);
  for (const auto& [name, data] : files) {
    const std::string hdr = "HDR:" + name + std::string(8, '\0');
    l.entries.push_back(Segment(hdr));
    l.entries.push_back(File(name, data.size()));
    l.tar += hdr + data;
    l.files[name] = data;
  }
  l.entries.push_back(Segment(std::string(1024, '\0')));
  l.entries.push_back({{"type", 2}, {"payload", ""}});
  l.tar += std::string(1024, '\0');
  return l;
}

class StoreImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-store-image-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    cand_ = root_ + "/cand";
    base_ = root_ + "/base";
    base_layer_ = MakeLayer('a', {{"bin/sh", "base shell"}});
    app_layer_ = MakeLayer('b', {{"app", std::string(300000, 'x') + "end"}, {"etc/conf", "c=1"}});
    WriteStore();
  }
  void TearDown() override { fs::remove_all(root_); }

  void WriteLayerFiles(const std::string& store, const Layer& l) {
    WriteGz(store + "/overlay-layers/" + l.id + ".tar-split.gz", Lines(l.entries));
    fs::create_directories(store + "/overlay/" + l.id + "/diff");
    for (const auto& [name, data] : l.files)
      Write(store + "/overlay/" + l.id + "/diff/" + name, data);
  }

  void WriteStore() {
    // The base store: the bottom layer only. The candidate's: the top layer and the image.
    WriteLayerFiles(base_, base_layer_);
    Write(base_ + "/overlay-layers/layers.json",
          json::array({{{"id", base_layer_.id}, {"diff-digest", Digest(base_layer_.tar)}}}).dump());
    Write(base_ + "/overlay-images/images.json", "[]");
    WriteLayerFiles(cand_, app_layer_);
    Write(cand_ + "/overlay-layers/layers.json",
          json::array({{{"id", app_layer_.id},
                        {"parent", base_layer_.id},
                        {"diff-digest", Digest(app_layer_.tar)}}})
              .dump());
    WriteImage({Digest(base_layer_.tar), Digest(app_layer_.tar)});
  }

  void WriteImage(const std::vector<std::string>& diff_ids) {
    config_ = json{{"architecture", "amd64"},
                   {"os", "linux"},
                   {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}}
                  .dump();
    id_ = Sha256Hex(config_);
    Write(cand_ + "/overlay-images/images.json",
          json::array({{{"id", std::string(64, 'f')}, {"layer", base_layer_.id}},
                       {{"id", id_}, {"layer", app_layer_.id}}})
              .dump());
    const std::string dir = cand_ + "/overlay-images/" + id_ + "/";
    Write(dir + "=" + EncodeBase64("sha256:" + id_), config_);
    Write(dir + "manifest",
          json{{"annotations", {{"io.kiln.build-key", "k1"}, {"org.example", "v"}}}}.dump());
  }

  std::string DiffPath(const Layer& l, const std::string& name) {
    return cand_ + "/overlay/" + l.id + "/diff/" + name;
  }

  // ReadImage + ReadLayer of the app layer.
  Status ReadApp(std::string* tar, StoreLimits limits = StoreLimits()) {
    StoreImageReader reader({cand_, base_}, limits);
    StoreImage img;
    Status st = reader.ReadImage(id_, &img);
    if (!st.ok()) return st;
    return reader.ReadLayer(img, img.layers.at(1), tar);
  }

  // PushStoreImage of the test image as app:cand to the registry at `url`.
  OciPushResult PushTo(const std::string& url, StorePushRequest req) {
    StoreImageReader reader({cand_, base_});
    StoreImage img;
    OciPushResult r;
    r.status = reader.ReadImage(id_, &img);
    if (!r.status.ok()) return r;
    req.repository = "app";
    req.tag = "cand";
    RegistryClient client({url, std::nullopt, std::nullopt});
    return PushStoreImage(&client, reader, img, req, nullptr, nullptr);
  }

  void ExpectNoHostPath(const Status& st) {
    EXPECT_EQ(st.message().find(root_), std::string::npos) << st.message();
  }

  std::string root_, cand_, base_, config_, id_;
  Layer base_layer_, app_layer_;
};

TEST_F(StoreImageTest, ReadsTheImageAcrossStoresAndRebuildsEveryLayerByteExactly) {
  StoreImageReader reader({cand_, base_});
  StoreImage img;
  ASSERT_TRUE(reader.ReadImage(id_, &img).ok());
  EXPECT_EQ(img.config, config_);
  ASSERT_EQ(img.layers.size(), 2u);
  EXPECT_EQ(img.layers[0].id, base_layer_.id);
  EXPECT_EQ(img.layers[0].store, 1u);  // the base store
  EXPECT_EQ(img.layers[1].id, app_layer_.id);
  EXPECT_EQ(img.layers[1].store, 0u);
  EXPECT_EQ(img.annotations.at("io.kiln.build-key"), "k1");
  EXPECT_EQ(img.annotations.at("org.example"), "v");
  std::string tar;
  ASSERT_TRUE(reader.ReadLayer(img, img.layers[0], &tar).ok());
  EXPECT_EQ(tar, base_layer_.tar);
  Status st = reader.ReadLayer(img, img.layers[1], &tar);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tar, app_layer_.tar);
}

TEST_F(StoreImageTest, ReassemblyTakesSegmentsVerbatimAndFilesByCleanedName) {
  std::vector<std::pair<std::string, uint64_t>> asked;
  auto file = [&](const std::string& name, uint64_t size, std::string* tar) {
    asked.emplace_back(name, size);
    tar->append(size, 'F');
    return Status::Ok();
  };
  const std::string text =
      Lines({Segment("H1"), File("./a//b", 2), File("dir/", 0), Segment("P"), File("/c", 1)});
  std::string tar;
  ASSERT_TRUE(ReassembleTarSplit(text, file, StoreLimits(), &tar).ok());
  EXPECT_EQ(tar, "H1FFPF");
  ASSERT_EQ(asked.size(), 2u);  // a size-0 entry (a directory) reads nothing
  EXPECT_EQ(asked[0].first, "a/b");
  EXPECT_EQ(asked[1].first, "c");
}

TEST_F(StoreImageTest, ConfigThatIsNotTheImageIdIsRefused) {
  Write(cand_ + "/overlay-images/" + id_ + "/=" + EncodeBase64("sha256:" + id_), config_ + " ");
  StoreImageReader reader({cand_, base_});
  StoreImage img;
  Status st = reader.ReadImage(id_, &img);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("image " + id_.substr(0, 12)), std::string::npos);
  ExpectNoHostPath(st);
}

TEST_F(StoreImageTest, LayerChainThatIsNotTheConfigsFallsBack) {
  WriteImage({Digest(base_layer_.tar), Digest("something else")});
  StoreImageReader reader({cand_, base_});
  StoreImage img;
  EXPECT_EQ(reader.ReadImage(id_, &img).code(), Status::Code::kFailedPrecondition);
}

TEST_F(StoreImageTest, ChangedFileContentsDoNotMatchTheDiffId) {
  Write(DiffPath(app_layer_, "etc/conf"), "c=2");  // same size, other bytes
  std::string tar;
  Status st = ReadApp(&tar);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("do not match"), std::string::npos) << st.message();
  ExpectNoHostPath(st);
}

// Hostile stores: what a RUN step (the build user) could leave behind.
TEST_F(StoreImageTest, SymlinkAtAListedNameIsNotFollowed) {
  Write(root_ + "/secret", "c=1");  // same size and contents: only the link is wrong
  fs::remove(DiffPath(app_layer_, "etc/conf"));
  fs::create_symlink(root_ + "/secret", DiffPath(app_layer_, "etc/conf"));
  std::string tar;
  Status st = ReadApp(&tar);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("etc/conf"), std::string::npos);
  ExpectNoHostPath(st);
  // A relative link that stays inside the diff directory is refused as well.
  fs::remove(DiffPath(app_layer_, "etc/conf"));
  Write(DiffPath(app_layer_, "etc/real"), "c=1");
  fs::create_symlink("real", DiffPath(app_layer_, "etc/conf"));
  EXPECT_EQ(ReadApp(&tar).code(), Status::Code::kInternal);
}

TEST_F(StoreImageTest, SymlinkedDirectoryOnTheWayIsNotFollowed) {
  Write(root_ + "/outside/conf", "c=1");
  fs::remove_all(DiffPath(app_layer_, "etc"));
  fs::create_symlink(root_ + "/outside", DiffPath(app_layer_, "etc"));
  std::string tar;
  Status st = ReadApp(&tar);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  ExpectNoHostPath(st);
}

TEST_F(StoreImageTest, DiffDirectoryThatIsASymlinkIsRefused) {
  const std::string diff = cand_ + "/overlay/" + app_layer_.id + "/diff";
  fs::rename(diff, root_ + "/elsewhere");
  fs::create_symlink(root_ + "/elsewhere", diff);
  std::string tar;
  Status st = ReadApp(&tar);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  ExpectNoHostPath(st);
}

TEST_F(StoreImageTest, TarSplitNamingParentPathsIsRefused) {
  Write(cand_ + "/overlay/outside", "c=1");
  for (const char* name : {"../../outside", "etc/../../../outside", "/../outside"}) {
    app_layer_.entries[3] = File(name, 3);
    WriteGz(cand_ + "/overlay-layers/" + app_layer_.id + ".tar-split.gz",
            Lines(app_layer_.entries));
    std::string tar;
    Status st = ReadApp(&tar);
    EXPECT_EQ(st.code(), Status::Code::kInternal) << name;
    EXPECT_NE(st.message().find("outside the layer"), std::string::npos) << st.message();
  }
}

TEST_F(StoreImageTest, FileOfAnotherSizeThanTheTarSplitSaysIsRefused) {
  Write(DiffPath(app_layer_, "etc/conf"), "c=1 and much more");
  std::string tar;
  Status st = ReadApp(&tar);
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("the layer's index says 3"), std::string::npos) << st.message();
}

TEST_F(StoreImageTest, OversizedEntriesAndTooManyEntriesAreRefused) {
  std::string tar;
  StoreLimits small;
  small.max_file_bytes = 1000;  // the app file is 300003 bytes
  Status st = ReadApp(&tar, small);
  EXPECT_EQ(st.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(st.message().find("app"), std::string::npos);
  StoreLimits few;
  few.max_entries = 3;
  EXPECT_EQ(ReadApp(&tar, few).code(), Status::Code::kResourceExhausted);
  StoreLimits total;
  total.max_layer_bytes = 200000;
  EXPECT_EQ(ReadApp(&tar, total).code(), Status::Code::kResourceExhausted);
  // A tar-split claiming a huge file is refused before anything is read or allocated.
  app_layer_.entries[3] = File("etc/conf", uint64_t{1} << 40);
  WriteGz(cand_ + "/overlay-layers/" + app_layer_.id + ".tar-split.gz", Lines(app_layer_.entries));
  EXPECT_EQ(ReadApp(&tar).code(), Status::Code::kResourceExhausted);
}

TEST_F(StoreImageTest, NonRegularFileAtAListedNameIsRefused) {
  fs::remove(DiffPath(app_layer_, "etc/conf"));
  ASSERT_EQ(::mkfifo(DiffPath(app_layer_, "etc/conf").c_str(), 0644), 0);  // would block a read
  std::string tar;
  EXPECT_EQ(ReadApp(&tar).code(), Status::Code::kInternal);
}

TEST_F(StoreImageTest, MalformedTarSplitIsAnErrorNotACrash) {
  std::string tar;
  for (const std::string& text : {std::string("not json\n"), std::string("{\"type\":7}\n"),
                                  std::string("{\"type\":2,\"payload\":\"!!\"}\n"),
                                  std::string("{\"type\":1,\"name\":\"x\",\"size\":-1}\n")}) {
    Status st = ReassembleTarSplit(
        text, [](const std::string&, uint64_t, std::string*) { return Status::Ok(); },
        StoreLimits(), &tar);
    EXPECT_FALSE(st.ok()) << text;
  }
}

// PushStoreImage against a fake registry: the base layer is the registry's own blob (mounted
// from the base's repository, never read from the store), the app layer goes as the plain tar
// rebuilt from the store, the config as stored, the manifest last with kiln's annotations.
// A registry that mounts blobs from kiln/busybox, keeps every upload (checked against its
// digest) and the manifest; not thread-safe beyond its handler's mutex.
struct FakeRegistry {
  std::mutex mu;
  std::vector<std::string> log;
  std::map<std::string, std::string> uploaded;  // digest -> bytes
  std::string manifest;
  size_t uploads_before_manifest = 0;

  kiln::testing::FakeServer::Handler Handler() {
    namespace http = boost::beast::http;
    return [this](const kiln::testing::FakeServer::Request& req) {
      std::lock_guard<std::mutex> l(mu);
      const std::string t(req.target());
      log.push_back(std::string(http::to_string(req.method())) + " " + t);
      if (req.method() == http::verb::head)
        return kiln::testing::Reply(uploaded.count(t.substr(t.rfind('/') + 1)) ? 200 : 404);
      if (req.method() == http::verb::post && t.find("mount=") != std::string::npos)
        return kiln::testing::Reply(t.find("from=kiln%2Fbusybox") != std::string::npos ? 201 : 500);
      if (req.method() == http::verb::post) {
        auto r = kiln::testing::Reply(202);
        r.set(http::field::location, "/v2/app/blobs/uploads/u" + std::to_string(log.size()));
        return r;
      }
      if (req.method() == http::verb::put && t.find("/blobs/uploads/") != std::string::npos) {
        const std::string d = t.substr(t.find("digest=") + 7);
        const std::string digest = "sha256:" + d.substr(d.find("3A") + 2);
        if (digest != Digest(req.body())) return kiln::testing::Reply(400, "{\"errors\":[]}");
        uploaded[digest] = req.body();
        return kiln::testing::Reply(201);
      }
      if (req.method() == http::verb::put && t.find("/manifests/") != std::string::npos) {
        manifest = req.body();
        uploads_before_manifest = uploaded.size();
        auto r = kiln::testing::Reply(201);
        r.set("Docker-Content-Digest", Digest(req.body()));
        return r;
      }
      return kiln::testing::Reply(404);
    };
  }
  std::set<std::string> Uploaded() {
    std::set<std::string> s;
    for (const auto& [d, data] : uploaded) s.insert(d);
    return s;
  }
};

TEST_F(StoreImageTest, PushReusesTheBaseLayerUploadsTheNewOneAndPutsTheManifestLast) {
  FakeRegistry reg;
  kiln::testing::FakeServer server(reg.Handler());
  const std::string base_blob = "sha256:" + std::string(64, 'd');
  // The base layer's files are gone from the store: reading it would fail the push.
  fs::remove_all(base_ + "/overlay/" + base_layer_.id + "/diff");
  StorePushRequest req;
  req.compress = false;
  req.annotations = {{"io.kiln.build-key", "k2"}, {"io.kiln.candidate", "cand"}};
  req.base_layers[Digest(base_layer_.tar)] = {"kiln/busybox", kOciLayerTarGzipForTest, base_blob,
                                              1234};
  OciPushResult r = PushTo(server.url(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.digest, Digest(reg.manifest));
  EXPECT_EQ(reg.Uploaded(), (std::set<std::string>{Digest(app_layer_.tar), "sha256:" + id_}));
  EXPECT_EQ(reg.uploads_before_manifest, 2u);
  EXPECT_EQ(reg.log.back(), "PUT /v2/app/manifests/cand");
  json m = json::parse(reg.manifest);
  EXPECT_EQ(m["config"]["digest"], "sha256:" + id_);
  EXPECT_EQ(m["config"]["size"], config_.size());
  ASSERT_EQ(m["layers"].size(), 2u);
  EXPECT_EQ(m["layers"][0]["digest"], base_blob);
  EXPECT_EQ(m["layers"][0]["size"], 1234);
  EXPECT_EQ(m["layers"][0]["mediaType"], kOciLayerTarGzipForTest);
  EXPECT_EQ(m["layers"][1]["digest"], Digest(app_layer_.tar));
  EXPECT_EQ(m["layers"][1]["size"], app_layer_.tar.size());
  EXPECT_EQ(m["layers"][1]["mediaType"], "application/vnd.oci.image.layer.v1.tar");
  EXPECT_EQ(m["annotations"]["io.kiln.build-key"], "k2");  // kiln's over buildah's
  EXPECT_EQ(m["annotations"]["io.kiln.candidate"], "cand");
  EXPECT_EQ(m["annotations"]["org.example"], "v");  // buildah's own kept
}

// A remote registry (build.compression gzip): new layers and base layers the registry lacks go
// as gzip level 1 of the rebuilt tar; the manifest names the compressed digests.
TEST_F(StoreImageTest, CompressedPushUploadsGzipOfTheRebuiltTars) {
  FakeRegistry reg;
  kiln::testing::FakeServer server(reg.Handler());
  StorePushRequest req;
  req.compress = true;  // and no base layer known: both are read from the stores
  OciPushResult r = PushTo(server.url(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  json m = json::parse(reg.manifest);
  ASSERT_EQ(m["layers"].size(), 2u);
  const std::string tars[] = {base_layer_.tar, app_layer_.tar};
  for (size_t i = 0; i < 2; ++i) {
    const json& l = m["layers"][i];
    EXPECT_EQ(l["mediaType"], kOciLayerTarGzipForTest);
    const std::string digest = l["digest"].get<std::string>();
    ASSERT_TRUE(reg.uploaded.count(digest)) << digest;
    const std::string& gz = reg.uploaded[digest];
    EXPECT_EQ(l["size"], gz.size());
    EXPECT_NE(digest, Digest(tars[i]));
    std::string tar(tars[i].size() + 16, '\0');
    uLongf n = tar.size();
    z_stream z = {};
    ASSERT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
    z.avail_in = static_cast<uInt>(gz.size());
    z.next_out = reinterpret_cast<Bytef*>(&tar[0]);
    z.avail_out = static_cast<uInt>(n);
    EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
    tar.resize(z.total_out);
    inflateEnd(&z);
    EXPECT_EQ(tar, tars[i]);  // the layer is the diff_id's tar
  }
}

// Issue 20: the blob stage (before the push-lane grant) uploads the blobs and puts no
// manifest; the push under the grant takes the layers it compressed as they are (HEAD only:
// nothing read or compressed again, nothing uploaded) and puts the manifest.
TEST_F(StoreImageTest, BlobStageUploadsWithoutAManifestAndThePushReusesItsLayers) {
  FakeRegistry reg;
  kiln::testing::FakeServer server(reg.Handler());
  StorePushRequest req;
  req.compress = true;
  req.blobs_only = true;
  OciPushResult blobs = PushTo(server.url(), req);
  ASSERT_TRUE(blobs.status.ok()) << blobs.status.ToString();
  EXPECT_TRUE(reg.manifest.empty());
  EXPECT_TRUE(blobs.digest.empty());
  EXPECT_EQ(reg.uploaded.size(), 3u);  // two gzip layers and the config
  ASSERT_EQ(blobs.compressed.size(), 2u);
  for (const auto& [diff_id, d] : blobs.compressed) EXPECT_TRUE(reg.uploaded.count(d.digest));

  req.blobs_only = false;
  req.compressed = blobs.compressed;
  OciPushResult push = PushTo(server.url(), req);
  ASSERT_TRUE(push.status.ok()) << push.status.ToString();
  EXPECT_EQ(push.uploaded_blobs, 0);
  EXPECT_TRUE(push.compressed.empty());  // no layer compressed again
  EXPECT_EQ(push.compress_ms, 0);
  EXPECT_EQ(push.digest, Digest(reg.manifest));
  json m = json::parse(reg.manifest);
  ASSERT_EQ(m["layers"].size(), 2u);
  EXPECT_EQ(m["layers"][0]["digest"], blobs.compressed.at(Digest(base_layer_.tar)).digest);
  EXPECT_EQ(m["layers"][1]["digest"], blobs.compressed.at(Digest(app_layer_.tar)).digest);
}

TEST(BaseLayerBlobsTest, MapsDiffIdsToTheRegistrysCompressedLayers) {
  const std::string d1 = "sha256:" + std::string(64, '1'), d2 = "sha256:" + std::string(64, '2');
  const std::string c1 = "sha256:" + std::string(64, 'c'), c2 = "sha256:" + std::string(64, 'd');
  const std::string manifest = json{
      {"schemaVersion", 2},
      {"config", {{"digest", "sha256:" + std::string(64, 'e')}}},
      {"layers",
       {{{"mediaType", "application/vnd.docker.image.rootfs.diff.tar.gzip"},
         {"digest", c1},
         {"size", 10}},
        {{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
         {"digest", c2},
         {"size", 20}}}}}.dump();
  const std::string config = json{{"rootfs", {{"diff_ids", {d1, d2}}}}}.dump();
  EXPECT_EQ(BaseConfigDigest(manifest), "sha256:" + std::string(64, 'e'));
  auto m = BaseLayerBlobs("kiln/busybox", manifest, config);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at(d1).digest, c1);
  EXPECT_EQ(m.at(d1).media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
  EXPECT_EQ(m.at(d1).size, 10u);
  EXPECT_EQ(m.at(d2).repository, "kiln/busybox");
  // Counts that disagree, or an index instead of a manifest: nothing is reused.
  EXPECT_TRUE(BaseLayerBlobs("r", manifest, json{{"rootfs", {{"diff_ids", {d1}}}}}.dump()).empty());
  EXPECT_TRUE(BaseLayerBlobs("r", json{{"manifests", json::array()}}.dump(), config).empty());
  EXPECT_EQ(BaseConfigDigest("[]"), "");
}

}  // namespace
}  // namespace kiln
