#include "builder/store_image.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>

#include "builder/oci_layout_pusher.h"  // ReadFileBeneath
#include "common/base64.h"
#include "common/sha256.h"
#include "common/subprocess.h"  // UniqueFd

namespace kiln {
namespace {
using json = nlohmann::json;

bool IsHex64(const std::string& s) { return IsSha256Hex(s); }

std::string Short(const std::string& id) { return id.substr(0, 12); }

// openat2 beneath `dirfd`: no symlink anywhere on the path, no magic link, no other mount.
int OpenBeneath(int dirfd, const std::string& rel, uint64_t flags) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  long fd;
  do {
    fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  return static_cast<int>(fd);
}

// Store-relative reads; errors name the image and the relative file only.
Status ReadStoreFile(const std::string& store, const std::string& rel, size_t max,
                     const std::string& image, std::string* data) {
  Status st = ReadFileBeneath(store, rel, max, data);
  if (st.ok()) return st;
  const std::string what = "image " + Short(image) + ": the build store's " + rel;
  switch (st.code()) {
    case Status::Code::kNotFound:
      return Status::NotFound(what + " is missing");
    case Status::Code::kResourceExhausted:
      return Status::ResourceExhausted(what + " is larger than " + std::to_string(max) + " bytes");
    case Status::Code::kInvalidArgument:
      return Status::Internal(what + " is not a regular file");
    default:
      return Status::Internal(what + " cannot be read");
  }
}

Status Gunzip(const std::string& in, size_t max, std::string* out) {
  z_stream z = {};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return Status::Internal("zlib init failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  out->clear();
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out->append(buf, sizeof buf - z.avail_out);
    if (out->size() > max) {
      inflateEnd(&z);
      return Status::ResourceExhausted("larger than " + std::to_string(max) + " bytes unpacked");
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) break;  // truncated
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return Status::Internal("not a complete gzip stream");
  return Status::Ok();
}

// "./a//b/" -> "a/b"; false for "..", an empty result.
bool CleanName(const std::string& name, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('/', i);
    if (j == std::string::npos) j = name.size();
    std::string part = name.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return false;
    if (!out->empty()) *out += '/';
    *out += part;
  }
  return !out->empty();
}

// `st` with `prefix` before its message, same code (for the codes this file returns).
Status Prefixed(const Status& st, const std::string& prefix) {
  switch (st.code()) {
    case Status::Code::kResourceExhausted:
      return Status::ResourceExhausted(prefix + st.message());
    case Status::Code::kFailedPrecondition:
      return Status::FailedPrecondition(prefix + st.message());
    default:
      return Status::Internal(prefix + st.message());
  }
}

}  // namespace

Status ReassembleTarSplit(std::string_view jsonl, const TarSplitFileFn& file,
                          const StoreLimits& limits, std::string* tar) {
  tar->clear();
  size_t entries = 0;
  size_t pos = 0;
  while (pos < jsonl.size()) {
    size_t nl = jsonl.find('\n', pos);
    if (nl == std::string_view::npos) nl = jsonl.size();
    std::string_view line = jsonl.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    if (++entries > limits.max_entries)
      return Status::ResourceExhausted("more than " + std::to_string(limits.max_entries) +
                                       " tar-split entries");
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object() || !e.contains("type") || !e["type"].is_number_integer())
      return Status::Internal("malformed tar-split entry " + std::to_string(entries));
    const int64_t type = e["type"].get<int64_t>();
    if (type == 2) {  // segment: raw tar bytes
      const json& p = e.contains("payload") ? e["payload"] : json();
      if (p.is_null()) continue;
      std::string raw;
      if (!p.is_string() || !DecodeBase64(p.get<std::string>(), &raw))
        return Status::Internal("malformed tar-split segment " + std::to_string(entries));
      if (tar->size() + raw.size() > limits.max_layer_bytes)
        return Status::ResourceExhausted("layer larger than " +
                                         std::to_string(limits.max_layer_bytes) + " bytes");
      tar->append(raw);
    } else if (type == 1) {  // file: contents from the diff directory
      const json& sz = e.contains("size") ? e["size"] : json(0);
      if (!sz.is_number_integer() || sz.get<int64_t>() < 0)
        return Status::Internal("malformed tar-split file size in entry " +
                                std::to_string(entries));
      const uint64_t size = sz.get<uint64_t>();
      if (size == 0) continue;  // directories, links, empty files: all in the headers
      if (!e.contains("name") || !e["name"].is_string())
        return Status::FailedPrecondition("tar-split file entry " + std::to_string(entries) +
                                          " without a UTF-8 name");
      std::string name;
      if (!CleanName(e["name"].get<std::string>(), &name))
        return Status::Internal("tar-split names a file outside the layer: " +
                                e["name"].get<std::string>());
      if (size > limits.max_file_bytes)
        return Status::ResourceExhausted("layer file " + name + " is larger than " +
                                         std::to_string(limits.max_file_bytes) + " bytes");
      if (tar->size() + size > limits.max_layer_bytes)
        return Status::ResourceExhausted("layer larger than " +
                                         std::to_string(limits.max_layer_bytes) + " bytes");
      Status st = file(name, size, tar);
      if (!st.ok()) return st;
    } else {
      return Status::FailedPrecondition("tar-split entry type " + std::to_string(type));
    }
  }
  return Status::Ok();
}

StoreImageReader::StoreImageReader(std::vector<std::string> stores, StoreLimits limits)
    : stores_(std::move(stores)), limits_(limits) {}

Status StoreImageReader::LoadLayers(const std::string& image_id) {
  if (layers_loaded_) return Status::Ok();
  for (size_t s = 0; s < stores_.size(); ++s) {
    std::string text;
    Status st = ReadStoreFile(stores_[s], "overlay-layers/layers.json", limits_.max_json_bytes,
                              image_id, &text);
    if (st.code() == Status::Code::kNotFound && s > 0) continue;  // an empty base store
    if (!st.ok()) return st;
    json arr = json::parse(text, nullptr, false);
    if (arr.is_discarded() || !arr.is_array())
      return Status::FailedPrecondition("overlay-layers/layers.json is not a list");
    for (const json& l : arr) {
      if (!l.is_object()) continue;
      const std::string id = l.value("id", "");
      if (!IsHex64(id) || layers_.count(id)) continue;
      LayerInfo info;
      info.parent =
          l.contains("parent") && l["parent"].is_string() ? l["parent"].get<std::string>() : "";
      info.diff_id = l.contains("diff-digest") && l["diff-digest"].is_string()
                         ? l["diff-digest"].get<std::string>()
                         : "";
      info.store = s;
      layers_[id] = std::move(info);
    }
  }
  layers_loaded_ = true;
  return Status::Ok();
}

Status StoreImageReader::ReadImage(const std::string& image_id, StoreImage* out) {
  if (!IsHex64(image_id)) return Status::InvalidArgument("malformed image id");
  const std::string name = "image " + Short(image_id);
  // 1. The image record, in whichever store holds it.
  json rec;
  size_t store = 0;
  for (size_t s = 0; s < stores_.size() && rec.is_null(); ++s) {
    std::string text;
    Status st = ReadStoreFile(stores_[s], "overlay-images/images.json", limits_.max_json_bytes,
                              image_id, &text);
    if (st.code() == Status::Code::kNotFound && s > 0) continue;
    if (!st.ok()) return st;
    json arr = json::parse(text, nullptr, false);
    if (arr.is_discarded() || !arr.is_array())
      return Status::FailedPrecondition("overlay-images/images.json is not a list");
    for (const json& i : arr)
      if (i.is_object() && i.value("id", "") == image_id) {
        rec = i;
        store = s;
        break;
      }
  }
  if (rec.is_null()) return Status::NotFound(name + " is not in the build store");
  std::string top =
      rec.contains("layer") && rec["layer"].is_string() ? rec["layer"].get<std::string>() : "";
  // 2. The config: big data "sha256:<id>", file "=" + base64(key) (containers/storage names
  // every key that is not only letters and digits so).
  const std::string dir = "overlay-images/" + image_id + "/";
  std::string config;
  Status st = ReadStoreFile(stores_[store], dir + "=" + EncodeBase64("sha256:" + image_id),
                            limits_.max_config_bytes, image_id, &config);
  if (st.code() == Status::Code::kNotFound)
    return Status::FailedPrecondition(name + ": no config under the expected big-data name");
  if (!st.ok()) return st;
  if (Sha256Hex(config) != image_id)
    return Status::Internal(name + ": the stored config does not match the image id");
  json cfg = json::parse(config, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("rootfs") ||
      !cfg["rootfs"].is_object() || !cfg["rootfs"].contains("diff_ids") ||
      !cfg["rootfs"]["diff_ids"].is_array())
    return Status::Internal(name + ": the stored config has no rootfs.diff_ids");
  std::vector<std::string> diff_ids;
  for (const json& d : cfg["rootfs"]["diff_ids"]) {
    if (!d.is_string() || !IsSha256Digest(d.get<std::string>()))
      return Status::Internal(name + ": malformed diff_id in the stored config");
    diff_ids.push_back(d.get<std::string>());
  }
  if (diff_ids.size() > limits_.max_layers)
    return Status::ResourceExhausted(name + " has more than " + std::to_string(limits_.max_layers) +
                                     " layers");
  // 3. The layer chain, top down across the stores, must be the config's diff_ids.
  st = LoadLayers(image_id);
  if (!st.ok()) return st;
  std::vector<StoreLayer> chain;
  for (std::string id = top; !id.empty();) {
    auto it = layers_.find(id);
    if (it == layers_.end())
      return Status::FailedPrecondition(name + ": layer " + Short(id) + " is in no known store");
    if (chain.size() >= diff_ids.size())
      return Status::FailedPrecondition(name + ": more layers than the config lists");
    chain.push_back({id, it->second.diff_id, it->second.store});
    id = it->second.parent;
  }
  std::reverse(chain.begin(), chain.end());
  if (chain.size() != diff_ids.size())
    return Status::FailedPrecondition(name + ": " + std::to_string(chain.size()) +
                                      " layers in the store, " + std::to_string(diff_ids.size()) +
                                      " in the config");
  for (size_t i = 0; i < chain.size(); ++i)
    if (chain[i].diff_id != diff_ids[i])
      return Status::FailedPrecondition(name + ": layer " + std::to_string(i) +
                                        " in the store is not the config's");
  // 4. buildah's own manifest: its annotations (best effort; kiln adds its own anyway).
  std::string manifest;
  std::map<std::string, std::string> annotations;
  if (ReadStoreFile(stores_[store], dir + "manifest", limits_.max_config_bytes, image_id, &manifest)
          .ok()) {
    json m = json::parse(manifest, nullptr, false);
    if (m.is_object() && m.contains("annotations") && m["annotations"].is_object())
      for (const auto& [k, v] : m["annotations"].items())
        if (v.is_string()) annotations[k] = v.get<std::string>();
  }
  out->id = image_id;
  out->config = std::move(config);
  out->layers = std::move(chain);
  out->annotations = std::move(annotations);
  return Status::Ok();
}

Status StoreImageReader::ReadLayer(const StoreImage& image, const StoreLayer& layer,
                                   std::string* tar) const {
  const std::string name = "image " + Short(image.id) + ", layer " + Short(layer.id);
  if (!IsHex64(layer.id) || layer.store >= stores_.size())
    return Status::InvalidArgument(name + ": not a layer of the build store");
  const std::string& store = stores_[layer.store];
  std::string gz, text;
  Status st = ReadStoreFile(store, "overlay-layers/" + layer.id + ".tar-split.gz",
                            limits_.max_tar_split_bytes, image.id, &gz);
  if (st.code() == Status::Code::kNotFound)
    return Status::FailedPrecondition(name + ": no tar-split file");
  if (!st.ok()) return st;
  st = Gunzip(gz, limits_.max_tar_split_text, &text);
  if (!st.ok()) return Prefixed(st, name + ": tar-split ");
  UniqueFd root(::open(store.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (root.get() < 0) return Status::Internal(name + ": cannot open the build store");
  UniqueFd diff(OpenBeneath(root.get(), "overlay/" + layer.id + "/diff", O_RDONLY | O_DIRECTORY));
  if (diff.get() < 0) {
    if (errno == ENOSYS) return Status::FailedPrecondition("openat2 is not available");
    return Status::Internal(name + ": overlay/" + Short(layer.id) +
                            "/diff is not a directory of the store");
  }
  auto file = [&](const std::string& rel, uint64_t size, std::string* out) -> Status {
    UniqueFd f(OpenBeneath(diff.get(), rel, O_RDONLY | O_NONBLOCK));
    struct stat sb;
    if (f.get() < 0 || ::fstat(f.get(), &sb) != 0 || !S_ISREG(sb.st_mode))
      return Status::Internal(name + ": " + rel +
                              " is not a regular file of the layer (a symlink, a missing "
                              "file or one outside the layer)");
    if (static_cast<uint64_t>(sb.st_size) != size)
      return Status::Internal(name + ": " + rel + " has " + std::to_string(sb.st_size) +
                              " bytes, the layer's index says " + std::to_string(size));
    const size_t at = out->size();
    out->resize(at + size);
    uint64_t got = 0;
    while (got < size) {
      ssize_t n = ::read(f.get(), &(*out)[at + got], static_cast<size_t>(size - got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::Internal(name + ": " + rel + " is shorter than its size");
      got += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  };
  st = ReassembleTarSplit(text, file, limits_, tar);
  if (!st.ok()) {
    if (st.message().rfind(name, 0) == 0) return st;
    return Prefixed(st, name + ": ");
  }
  if ("sha256:" + Sha256Hex(*tar) != layer.diff_id)
    return Status::Internal(name +
                            ": the files in the build store do not match the layer's digest");
  return Status::Ok();
}

}  // namespace kiln
