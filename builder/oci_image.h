// OCI image documents for the layered mode: the image config and the image manifest of "the
// pinned base image + one new layer", built as pure functions so they can be checked against
// the OCI image spec (config.md, manifest.md, descriptor.md) without a registry.
//
// The config carries only what the image IS (base config, entrypoint, the candidate label, the
// layer's diff_id, a history entry): it contains nothing per build, so a rebuild that produces
// the same outputs produces the same config blob. Per-build facts (build key, commit) go into
// the manifest's annotations. Both are serialized with sorted keys (nlohmann::json), so equal
// inputs give equal bytes and digests.
//
// Ownership: values in, values out. Thread-safety: pure functions, no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln {

inline constexpr char kOciImageConfigType[] = "application/vnd.oci.image.config.v1+json";
inline constexpr char kOciLayerTarGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr char kOciLayerTar[] = "application/vnd.oci.image.layer.v1.tar";
inline constexpr char kOciImageManifestType[] = "application/vnd.oci.image.manifest.v1+json";

/// Issue 18: whether `build.compression` (`auto`, `gzip`, `none`) stores new layers without
/// compression for a registry at `registry_url` (`http(s)://host[:port]`): `none` always, `auto`
/// when the host is on the loopback (127.0.0.0/8, localhost, [::1]). Pure.
bool StoreLayersUncompressed(const std::string& compression, const std::string& registry_url);

/// A content descriptor (descriptor.md: mediaType, digest, size are required).
struct OciDescriptor {
  std::string media_type;
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;
};

/// What the new image adds to its base.
struct OciImageSpec {
  /// The new layer: its blob descriptor and its diff_id (sha256 of the uncompressed tar).
  OciDescriptor layer;
  std::string layer_diff_id;
  /// Replaces the base's Entrypoint (and drops its Cmd) when not empty.
  std::vector<std::string> entrypoint;
  /// Merged into config.Labels (same for every build of a candidate).
  std::map<std::string, std::string> labels;
  /// The manifest's annotations (per build: build key, commit); omitted when empty.
  std::map<std::string, std::string> annotations;
  /// history[].created_by of the new layer.
  std::string created_by = "kiln layered build";
};

/// The finished documents.
struct OciImage {
  std::string config;         // JSON bytes
  OciDescriptor config_desc;  // of `config`
  std::string manifest;       // JSON bytes
  std::string manifest_digest;
  std::vector<OciDescriptor> base_layers;  // the base's layers, as referenced by the manifest
};

/// Maps docker schema2 layer media types to their OCI equivalents (the bytes are the same).
std::string OciLayerMediaType(const std::string& docker_or_oci);

/// Builds config + manifest from the base image's manifest (OCI or docker v2 image manifest,
/// not an index) and config. InvalidArgument when the base documents are malformed: no
/// config/layers, a layer descriptor without digest or size, or rootfs.diff_ids that do not
/// match the number of base layers. Missing architecture/os in the base config default to
/// amd64/linux; a missing history gets one entry per base layer so history stays consistent.
Status MakeOciImage(const nlohmann::json& base_manifest, const nlohmann::json& base_config,
                    const OciImageSpec& spec, OciImage* out);

}  // namespace kiln
