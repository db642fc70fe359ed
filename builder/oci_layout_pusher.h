// OciLayoutPusher: pushes one image from an OCI image layout directory (written by the
// unprivileged build user: `buildah push <image> oci:<dir>:<ref>`) to a registry with kiln's
// credential, through kiln::RegistryClient. Reads index.json -> the manifest named <ref> ->
// its config and layers; HEADs each blob and uploads only the missing ones, up to three blobs
// at a time (issue 18: the config and the base layers' HEADs no longer wait behind the app
// layer's upload); puts the manifest last under the tag, only when every blob is there (a
// failed push never moves the tag); returns the manifest digest.
//
// The layout is untrusted input (the build user owns it): every path is opened below the
// layout directory without following symlinks, only regular files are read, digests must be
// sha256:<64 hex> (so no path can be smuggled in), sizes are bounded, and every blob's sha256
// is checked against its digest before upload (RegistryClient::PutBlob refuses a mismatch).
//
// Thread-safety: stateless functions; safe to call concurrently for different layouts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "builder/oci_image.h"
#include "common/status.h"
#include "core/cancel_token.h"
#include "registry/registry_client.h"

namespace kiln {

struct OciPushRequest {
  std::string layout_dir;  // absolute; kiln opens it with O_NOFOLLOW below its parent
  std::string ref_name;    // org.opencontainers.image.ref.name of the manifest in index.json
  std::string expect_config_digest;  // "sha256:<hex>" or "": the image that must be pushed
  std::string repository;            // e.g. "loop/app"
  std::string tag;                   // e.g. the candidate name
  bool blobs_only = false;  // issue 20: upload the missing blobs, put no manifest (no tag moves)
};

struct OciPushResult {
  Status status;
  std::string digest;       // "sha256:<hex>" of the manifest pushed (blobs_only: "")
  int uploaded_blobs = 0;   // blobs the registry did not have
  int64_t read_ms = 0;      // PushStoreImage: reading + verifying layers from the store (sum)
  int64_t compress_ms = 0;  // PushStoreImage: gzip of new layers (sum)
  /// PushStoreImage: the compressed layers it made, by diff_id (StorePushRequest::compressed).
  std::map<std::string, OciDescriptor> compressed;
};

/// Pushes the image. `out` (may be empty) gets one line per uploaded blob (called from the
/// pushing threads, one at a time). Observes `cancel` between blobs. Carries the caller's
/// registry deadline (RegistryDeadlineScope) to its threads. Errors: NotFound/InvalidArgument for a
/// bad or incomplete layout (Internal when the config is not the expected one), and
/// RegistryClient's statuses for the registry.
OciPushResult PushOciLayout(RegistryClient* client, const OciPushRequest& req,
                            const std::function<void(std::string_view)>& out,
                            const CancelToken* cancel);

/// Runs `tasks` (each one blob: HEAD, read, upload) on up to three threads, each carrying the
/// caller's registry deadline; the first failure (or `cancel`) stops new tasks from starting and
/// is returned. Shared by PushOciLayout and PushStoreImage (builder/store_image_pusher.h).
Status RunBlobTasks(const std::vector<std::function<Status()>>& tasks, const CancelToken* cancel);

/// Deletes the blobs of the layout that the manifest named `ref_name` does not reference
/// (older builds' layers and configs), keeping the ones a next export can reuse. Best effort.
void PruneOciLayout(const std::string& layout_dir, const std::string& ref_name);

/// Reads `rel` (a '/'-separated path without "." or ".." components) below `dir` without
/// following any symlink, at most `max_bytes`. NotFound, InvalidArgument (not a regular file or
/// a symlink on the way), ResourceExhausted (too big).
Status ReadFileBeneath(const std::string& dir, const std::string& rel, size_t max_bytes,
                       std::string* data);

}  // namespace kiln
