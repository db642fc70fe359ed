// StoreImagePusher: pushes an image read straight from buildah's containers/storage store
// (builder/store_image.h) to a registry with kiln's credential (issue 18: no `buildah push
// oci:` export before kiln's push).
//
// Layers of the base images are usually in the registry already (kiln fetched the bases from
// it): a layer whose diff_id a base's config lists reuses that base's compressed descriptor,
// HEAD in the target repository, else a cross-repository mount from the base's repository;
// only when both fail is it read from the store and uploaded. Every other layer is read from
// the store (verified against its diff_id), then uploaded as a plain tar (digest = diff_id) or
// gzip level 1 (`compress`), unless the registry has it. The config goes as buildah wrote it
// (its sha256 is the image id). Up to three blobs at a time (RunBlobTasks); the OCI manifest,
// with buildah's annotations plus kiln's, goes last, only when every blob is there.
//
// Thread-safety: stateless function; `reader` must have read `image` (ReadLayer is const).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "builder/oci_layout_pusher.h"  // OciPushResult
#include "builder/store_image.h"
#include "core/cancel_token.h"
#include "registry/registry_client.h"

namespace kiln {

/// A base image's layer as the registry holds it.
struct BaseLayerBlob {
  std::string repository;  // where the base lives, e.g. "kiln/busybox"
  std::string media_type;  // its manifest's layer media type
  std::string digest;      // compressed digest
  uint64_t size = 0;
};

struct StorePushRequest {
  std::string repository;  // e.g. "loop/app"
  std::string tag;
  bool compress = true;  // new layers gzip level 1 (else plain tar)
  /// Set over buildah's stored annotations.
  std::map<std::string, std::string> annotations;
  /// By diff_id ("sha256:<hex>"): base layers the registry holds.
  std::map<std::string, BaseLayerBlob> base_layers;
  bool blobs_only = false;  // issue 20: the missing blobs only, no manifest (no tag moves)
  /// By diff_id: compressed layers an earlier call (the blob stage) produced; one the registry
  /// has is taken as is, without reading or compressing the layer again.
  std::map<std::string, OciDescriptor> compressed;
};

/// The layers of a base image by diff_id, from its registry manifest and config (JSON texts;
/// untrusted: anything malformed gives an empty map, an index gives an empty map).
std::map<std::string, BaseLayerBlob> BaseLayerBlobs(const std::string& repository,
                                                    const std::string& manifest,
                                                    const std::string& config);

/// The config digest a base manifest names ("" when it is not an image manifest).
std::string BaseConfigDigest(const std::string& manifest);

/// Pushes `image` as repository:tag. `out` (may be empty) gets one line per uploaded blob.
/// Errors: the reader's (FailedPrecondition: the store is not understood, nothing pushed yet
/// beyond blobs) and RegistryClient's statuses.
OciPushResult PushStoreImage(RegistryClient* client, const StoreImageReader& reader,
                             const StoreImage& image, const StorePushRequest& req,
                             const std::function<void(std::string_view)>& out,
                             const CancelToken* cancel);

}  // namespace kiln
