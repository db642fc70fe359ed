// BaseStore: the per-domain shared, read-only store of base images for containerfile builds
// (issue 18). Every candidate of a domain builds on the same containers/storage overlay store of
// base images (`<cache_dir>/bases/u<uid>`, owned by the domain's build user so its rootless
// buildah can read the layers with the right id mapping). Candidate builds see it only through
// a read-only bind mount, as an additional image store (`--storage-opt
// overlay.imagestore=...`): they can use its images but never modify or delete them, and it
// survives the removal of any candidate's storage. kiln alone fills it, once per image digest
// per domain, under an exclusive lock (`u<uid>.lock`), from an OCI layout kiln fetched with its
// own credential; which digest each name was loaded at is kiln's marker (`u<uid>.json`, root's).
//
// This file is the pure part: paths, the marker format and the decision which images still
// need loading. No I/O except where a function says so; thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kiln {

struct BaseStorePaths {
  std::string dir;     // <cache_dir>/bases (kiln's, 0700)
  std::string store;   // <dir>/u<uid>: the containers/storage graph root (the build user's)
  std::string marker;  // <dir>/u<uid>.json: {"<image>": "<registry digest>"} (kiln's)
  std::string lock;    // <dir>/u<uid>.lock: held while the store is being filled
};

/// The base store of a domain whose cache directory is `cache_dir`, for build user `uid` (one
/// store per uid: the files' ownership is that user's id mapping).
BaseStorePaths BaseStoreFor(const std::string& cache_dir, uid_t uid);

/// The name a base image gets in the store: the image itself for a tag reference; for a digest
/// reference (`host/repo@sha256:X`) a tag in the same repository (`host/repo:kiln-pinned-<12
/// hex>`), so buildah's digest lookup (repository + manifest digest) finds it.
std::string BaseStoreName(const std::string& image);

/// One base image a build needs: the name the Containerfile uses and the digest the registry
/// resolved it to now.
struct BaseWant {
  std::string image;
  std::string digest;  // "sha256:<hex>"
};

/// The images of `wanted` the store does not hold at the wanted digest: the marker records a
/// different digest (a moved tag) or none, or the store's image list lacks the name (the store
/// was emptied or never finished loading). `marker` maps image -> digest; `stored` is the set
/// of names in the store (StoredImageNames).
std::vector<BaseWant> MissingBases(const std::vector<BaseWant>& wanted,
                                   const std::map<std::string, std::string>& marker,
                                   const std::set<std::string>& stored);

/// The marker as JSON text, and back. A malformed marker reads as empty (everything reloads).
std::string BaseMarkerText(const std::map<std::string, std::string>& marker);
std::map<std::string, std::string> ParseBaseMarker(const std::string& text);

/// Names in a containers/storage overlay store's `overlay-images/images.json` text (untrusted:
/// malformed input gives an empty set).
std::set<std::string> StoredImageNamesFromJson(const std::string& images_json);

}  // namespace kiln
