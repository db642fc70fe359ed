// StoreImageReader: reads an image that `buildah build` committed straight out of the
// containers/storage overlay store it was built in (issue 18: no `buildah push oci:` export).
//
// Layout read (containers/storage 1.4x, buildah 1.28; checked against stores built here):
//   overlay-images/images.json          [{id, layer, ...}]; the image whose id is the iid
//   overlay-images/<id>/=<b64(key)>     big data; the config under key "sha256:<id>"
//   overlay-images/<id>/manifest        buildah's own manifest (its annotations are kept)
//   overlay-layers/layers.json          [{id, parent, diff-digest, ...}]
//   overlay-layers/<id>.tar-split.gz    gzip of JSON lines: {"type":2,"payload":<b64>} raw tar
//                                       bytes; {"type":1,"name":n,"size":s} the contents of
//                                       file n (s bytes) of the layer's diff directory
//   overlay/<id>/diff                   the layer's files
// Layers of base images are in the read-only additional store(s); every store is searched.
//
// The store is the build user's, i.e. untrusted (a RUN step controls file contents and may
// plant symlinks), and kiln reads it as root: every JSON file is size-bounded and read without
// following symlinks; the diff directory and each file in it are opened with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV),
// must be a regular file of exactly the size the tar-split says, sizes and entry counts are
// bounded, and a layer is handed out only when the sha256 of the reassembled tar equals its
// diff-digest (= the config's rootfs.diff_ids entry); the config's sha256 must be the image id.
// Errors name the image and the store-relative file, never a host path:
//   FailedPrecondition the store holds something this reader does not understand (a name_raw
//                      entry, a layer chain that does not match the config, no openat2): the
//                      caller falls back to `buildah push oci:`;
//   Internal           the store contradicts itself (a digest mismatch, a file of the wrong
//                      size, a symlink or a `..` where a file should be): not pushed;
//   NotFound / ResourceExhausted as their names say.
//
// Thread-safety: ReadImage fills per-object caches (call it from one thread); ReadLayer is
// const and safe to call concurrently once ReadImage returned.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kiln {

/// Bounds on what kiln reads from a build user's store.
struct StoreLimits {
  size_t max_json_bytes = size_t{64} << 20;       // images.json, layers.json
  size_t max_config_bytes = size_t{4} << 20;      // the image config, the manifest
  size_t max_tar_split_bytes = size_t{64} << 20;  // <id>.tar-split.gz
  size_t max_tar_split_text = size_t{256} << 20;  // ... after gunzip
  size_t max_entries = 200000;                    // tar-split lines per layer
  uint64_t max_file_bytes = uint64_t{1} << 30;    // one file of a layer
  uint64_t max_layer_bytes = uint64_t{1} << 30;   // one reassembled layer tar
  size_t max_layers = 256;
};

/// One layer of an image, bottom first.
struct StoreLayer {
  std::string id;       // 64 hex
  std::string diff_id;  // "sha256:<hex>" (= the config's rootfs.diff_ids entry)
  size_t store = 0;     // index into the reader's stores
};

struct StoreImage {
  std::string id;                                  // 64 hex
  std::string config;                              // bytes; sha256 == id
  std::vector<StoreLayer> layers;                  // bottom first
  std::map<std::string, std::string> annotations;  // of buildah's stored manifest
};

/// Appends the `size` bytes of the layer file `name` (a cleaned relative path) to *tar.
using TarSplitFileFn =
    std::function<Status(const std::string& name, uint64_t size, std::string* tar)>;

/// Rebuilds a layer tar from tar-split JSON lines (already gunzipped): segments verbatim, file
/// entries through `file`. Names are cleaned ("./" and leading "/" dropped); a ".." component
/// is Internal (the store contradicts itself). Bounded by `limits` (entries, file size, total
/// size).
Status ReassembleTarSplit(std::string_view jsonl, const TarSplitFileFn& file,
                          const StoreLimits& limits, std::string* tar);

class StoreImageReader {
 public:
  /// `stores`: graph roots (absolute), the one the image was built in first, then the
  /// read-only additional image stores.
  explicit StoreImageReader(std::vector<std::string> stores, StoreLimits limits = StoreLimits());

  /// The image `image_id` (64 hex), its config checked against the id and its layer chain
  /// against the config's diff_ids.
  Status ReadImage(const std::string& image_id, StoreImage* out);

  /// The layer's tar, verified: sha256(*tar) == layer.diff_id.
  Status ReadLayer(const StoreImage& image, const StoreLayer& layer, std::string* tar) const;

 private:
  struct LayerInfo {
    std::string parent, diff_id;
    size_t store = 0;
  };
  Status LoadLayers(const std::string& image_id);

  std::vector<std::string> stores_;
  StoreLimits limits_;
  bool layers_loaded_ = false;
  std::map<std::string, LayerInfo> layers_;  // by id, over every store (the first wins)
};

}  // namespace kiln
