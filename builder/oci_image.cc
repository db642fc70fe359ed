#include "builder/oci_image.h"

#include "common/sha256.h"

namespace kiln {
using json = nlohmann::json;

namespace {
constexpr char kEpoch[] = "1970-01-01T00:00:00Z";

json Descriptor(const OciDescriptor& d) {
  return {{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}};
}
}  // namespace

std::string OciLayerMediaType(const std::string& t) {
  if (t == "application/vnd.docker.image.rootfs.diff.tar.gzip") return kOciLayerTarGzip;
  if (t == "application/vnd.docker.image.rootfs.diff.tar")
    return "application/vnd.oci.image.layer.v1.tar";
  return t;
}

Status MakeOciImage(const json& base_manifest, const json& base_config, const OciImageSpec& spec,
                    OciImage* out) {
  if (!base_manifest.is_object() || !base_manifest.contains("layers") ||
      !base_manifest["layers"].is_array() || !base_manifest.contains("config"))
    return Status::InvalidArgument("base manifest has no config/layers");
  if (!base_config.is_object()) return Status::InvalidArgument("base config is not an object");
  if (!IsSha256Digest(spec.layer.digest) || !IsSha256Digest(spec.layer_diff_id) ||
      spec.layer.size == 0)
    return Status::InvalidArgument("layer descriptor needs a sha256 digest, diff_id and size");

  OciImage img;
  for (const auto& l : base_manifest["layers"]) {
    if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string() ||
        !l.contains("size") || !l["size"].is_number_integer() || l["size"].get<int64_t>() < 0)
      return Status::InvalidArgument("base manifest has a layer without digest or size");
    OciDescriptor d;
    d.media_type = OciLayerMediaType(l.value("mediaType", std::string(kOciLayerTarGzip)));
    d.digest = l["digest"].get<std::string>();
    d.size = l["size"].get<uint64_t>();
    if (!IsSha256Digest(d.digest))
      return Status::InvalidArgument("base layer digest is not sha256: " + d.digest);
    img.base_layers.push_back(std::move(d));
  }

  json cfg = base_config;
  json rootfs = cfg.value("rootfs", json::object());
  json diff_ids = rootfs.is_object() ? rootfs.value("diff_ids", json::array()) : json::array();
  if (!diff_ids.is_array() || diff_ids.size() != img.base_layers.size())
    return Status::InvalidArgument("base config rootfs.diff_ids (" +
                                   std::to_string(diff_ids.size()) +
                                   ") do not match the base manifest's layers (" +
                                   std::to_string(img.base_layers.size()) + ")");
  diff_ids.push_back(spec.layer_diff_id);
  cfg["rootfs"] = {{"type", "layers"}, {"diff_ids", diff_ids}};
  if (!cfg.contains("architecture") || !cfg["architecture"].is_string())
    cfg["architecture"] = "amd64";
  if (!cfg.contains("os") || !cfg["os"].is_string()) cfg["os"] = "linux";
  cfg["created"] = kEpoch;

  json& c = cfg["config"];
  if (!c.is_object()) c = json::object();
  if (!spec.entrypoint.empty()) {
    c["Entrypoint"] = spec.entrypoint;
    c.erase("Cmd");
  }
  if (!c.contains("Labels") || !c["Labels"].is_object()) c["Labels"] = json::object();
  for (const auto& [k, v] : spec.labels) c["Labels"][k] = v;

  // history: one entry per layer that is not an empty_layer, oldest first.
  json history = cfg.value("history", json());
  if (!history.is_array()) {
    history = json::array();
    for (size_t i = 0; i < img.base_layers.size(); ++i)
      history.push_back({{"created", kEpoch}, {"created_by", "base image layer"}});
  }
  history.push_back({{"created", kEpoch}, {"created_by", spec.created_by}});
  cfg["history"] = history;

  img.config = cfg.dump();
  img.config_desc = {kOciImageConfigType, "sha256:" + Sha256Hex(img.config), img.config.size()};

  json layers = json::array();
  for (const auto& d : img.base_layers) layers.push_back(Descriptor(d));
  layers.push_back(Descriptor(spec.layer));
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", kOciImageManifestType},
                   {"config", Descriptor(img.config_desc)},
                   {"layers", layers}};
  if (!spec.annotations.empty()) manifest["annotations"] = spec.annotations;
  img.manifest = manifest.dump();
  img.manifest_digest = "sha256:" + Sha256Hex(img.manifest);
  *out = std::move(img);
  return Status::Ok();
}

bool StoreLayersUncompressed(const std::string& compression, const std::string& registry_url) {
  if (compression == "none") return true;
  if (compression != "auto") return false;
  // http(s)://host[:port]: the host, without brackets or port.
  std::string rest = registry_url.substr(
      registry_url.find("://") == std::string::npos ? 0 : registry_url.find("://") + 3);
  rest = rest.substr(0, rest.find('/'));
  std::string host;
  if (!rest.empty() && rest[0] == '[') {
    host = rest.substr(
        1, rest.find(']') == std::string::npos ? std::string::npos : rest.find(']') - 1);
  } else {
    host = rest.substr(0, rest.find(':'));
  }
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int dots = 0;
  for (char c : host) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      dots = -100;
  }
  return host == "localhost" || host == "::1" || (dots == 3 && host.rfind("127.", 0) == 0);
}

}  // namespace kiln
