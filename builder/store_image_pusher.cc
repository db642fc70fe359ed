#include "builder/store_image_pusher.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "builder/layer_writer.h"
#include "builder/oci_image.h"
#include "common/sha256.h"

namespace kiln {
namespace {
using json = nlohmann::json;

constexpr char kDockerLayerGzip[] = "application/vnd.docker.image.rootfs.diff.tar.gzip";

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace

std::string BaseConfigDigest(const std::string& manifest) {
  json m = json::parse(manifest, nullptr, false);
  if (!m.is_object() || !m.contains("config") || !m["config"].is_object()) return "";
  const json& c = m["config"];
  if (!c.contains("digest") || !c["digest"].is_string()) return "";
  const std::string d = c["digest"].get<std::string>();
  return IsSha256Digest(d) ? d : "";
}

std::map<std::string, BaseLayerBlob> BaseLayerBlobs(const std::string& repository,
                                                    const std::string& manifest,
                                                    const std::string& config) {
  std::map<std::string, BaseLayerBlob> out;
  json m = json::parse(manifest, nullptr, false);
  json c = json::parse(config, nullptr, false);
  if (!m.is_object() || !m.contains("layers") || !m["layers"].is_array() || !c.is_object() ||
      !c.contains("rootfs") || !c["rootfs"].is_object() || !c["rootfs"].contains("diff_ids") ||
      !c["rootfs"]["diff_ids"].is_array())
    return {};
  const json& layers = m["layers"];
  const json& diff_ids = c["rootfs"]["diff_ids"];
  if (layers.size() != diff_ids.size()) return {};
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    if (!l.is_object() || !diff_ids[i].is_string()) return {};
    BaseLayerBlob b;
    b.repository = repository;
    b.media_type = l.value("mediaType", "");
    b.digest = l.value("digest", "");
    const json& size = l.contains("size") ? l["size"] : json();
    if (!size.is_number_unsigned() || !IsSha256Digest(b.digest)) return {};
    b.size = size.get<uint64_t>();
    if (b.media_type == kDockerLayerGzip) b.media_type = kOciLayerTarGzip;  // the same bytes
    if (b.media_type != kOciLayerTarGzip && b.media_type != kOciLayerTar) continue;
    const std::string diff_id = diff_ids[i].get<std::string>();
    if (IsSha256Digest(diff_id)) out.emplace(diff_id, std::move(b));
  }
  return out;
}

OciPushResult PushStoreImage(RegistryClient* client, const StoreImageReader& reader,
                             const StoreImage& image, const StorePushRequest& req,
                             const std::function<void(std::string_view)>& out,
                             const CancelToken* cancel) {
  OciPushResult res;
  const std::string& repo = req.repository;
  std::vector<OciDescriptor> descs(image.layers.size());
  std::mutex mu;  // guards res.uploaded_blobs and `out`
  std::atomic<int64_t> read_ms{0}, compress_ms{0};
  // Every blob uploaded here is bytes kiln has hashed itself: a layer read from the store is
  // verified against its diff_id (StoreImageReader::ReadLayer), the config against the image
  // id, a gzip blob's digest is computed as it is compressed. So PutBlob does not hash them
  // again (the registry still checks the digest), and takes them without a copy.
  auto upload = [&](const std::string& digest, std::string data) -> Status {
    if (out) {
      std::lock_guard<std::mutex> l(mu);
      out("kiln: uploading " + digest + " (" + std::to_string(data.size()) + " bytes)\n");
    }
    Status st = client->PutBlob(repo, digest, std::move(data), /*verify=*/false);
    if (!st.ok()) return st;
    std::lock_guard<std::mutex> l(mu);
    ++res.uploaded_blobs;
    return st;
  };
  // A layer from the store: read (verified against its diff_id), [gzip], HEAD, upload.
  auto from_store = [&](size_t i) -> Status {
    const StoreLayer& layer = image.layers[i];
    bool exists = false;
    Status st;
    auto known = req.compressed.find(layer.diff_id);
    if (req.compress && known != req.compressed.end()) {  // compressed by the blob stage
      st = client->BlobExists(repo, known->second.digest, &exists);
      if (!st.ok()) return st;
      if (exists) {
        descs[i] = known->second;
        return Status::Ok();
      }
    }
    if (!req.compress) {  // the digest is known before reading: an unchanged layer is not read
      descs[i] = {kOciLayerTar, layer.diff_id, 0};
      st = client->BlobExists(repo, layer.diff_id, &exists);
      if (!st.ok()) return st;
    }
    std::string tar;
    auto t0 = std::chrono::steady_clock::now();
    st = reader.ReadLayer(image, layer, &tar);
    read_ms += MsSince(t0);
    if (!st.ok()) return st;
    if (!req.compress) {
      descs[i].size = tar.size();
      return exists ? Status::Ok() : upload(layer.diff_id, std::move(tar));
    }
    CompressOptions opts;
    opts.level = 1;
    LayerBlob blob;
    t0 = std::chrono::steady_clock::now();
    st = CompressLayer(tar, layer.diff_id, opts, &blob);
    compress_ms += MsSince(t0);
    if (!st.ok()) return st;
    descs[i] = {kOciLayerTarGzip, blob.digest, blob.data.size()};
    {
      std::lock_guard<std::mutex> l(mu);
      res.compressed[layer.diff_id] = descs[i];
    }
    st = client->BlobExists(repo, blob.digest, &exists);
    if (!st.ok() || exists) return st;
    return upload(blob.digest, std::move(blob.data));
  };
  // A base layer: the registry's own blob (HEAD, else mount from the base's repository).
  auto base = [&](size_t i, const BaseLayerBlob& b) -> Status {
    bool exists = false;
    Status st = client->BlobExists(repo, b.digest, &exists);
    if (!st.ok()) return st;
    if (!exists && b.repository != repo) {
      st = client->MountBlob(repo, b.digest, b.repository, &exists);
      if (!st.ok()) return st;
    }
    if (!exists) return from_store(i);
    descs[i] = {b.media_type, b.digest, b.size};
    return Status::Ok();
  };
  const std::string config_digest = "sha256:" + image.id;
  std::vector<std::function<Status()>> tasks;
  // New layers first (the largest work), then the base layers' HEADs and the config beside them.
  for (size_t i = image.layers.size(); i-- > 0;)
    if (!req.base_layers.count(image.layers[i].diff_id))
      tasks.push_back([&, i] { return from_store(i); });
  for (size_t i = 0; i < image.layers.size(); ++i) {
    auto it = req.base_layers.find(image.layers[i].diff_id);
    if (it != req.base_layers.end()) tasks.push_back([&, i, it] { return base(i, it->second); });
  }
  tasks.push_back([&]() -> Status {
    bool exists = false;
    Status st = client->BlobExists(repo, config_digest, &exists);
    if (!st.ok() || exists) return st;
    return upload(config_digest, image.config);
  });
  res.status = RunBlobTasks(tasks, cancel);
  res.read_ms = read_ms;
  res.compress_ms = compress_ms;
  if (!res.status.ok() || req.blobs_only) return res;
  json layers = json::array();
  for (const OciDescriptor& d : descs)
    layers.push_back({{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}});
  json m = {{"schemaVersion", 2},
            {"mediaType", kOciImageManifestType},
            {"config",
             {{"mediaType", kOciImageConfigType},
              {"digest", config_digest},
              {"size", image.config.size()}}},
            {"layers", layers}};
  std::map<std::string, std::string> annotations = image.annotations;
  for (const auto& [k, v] : req.annotations) annotations[k] = v;
  if (!annotations.empty()) m["annotations"] = annotations;
  const std::string body = m.dump();
  std::string digest;
  res.status = client->PutManifest(repo, req.tag, kOciImageManifestType, body, &digest);
  if (!res.status.ok()) return res;
  const std::string want = "sha256:" + Sha256Hex(body);
  if (digest != want) {
    res.status =
        Status::Internal("registry computed manifest digest " + digest + ", expected " + want);
    return res;
  }
  res.digest = digest;
  return res;
}

}  // namespace kiln
