// LayerWriter: packs a build's declared outputs (files and directory trees inside a candidate's
// workspace) into one OCI image layer: a tar stream (ustar headers, PAX records for long names),
// gzip-compressed with zlib. The result is deterministic: fixed mtime (0), uid/gid 0, empty
// owner names, modes normalized to 0755/0644, entries in sorted byte order and a fixed gzip
// header, so equal outputs always give equal digests.
//
// The outputs are agent-controlled, so every path is checked: `from` must be a normalized
// relative path that resolves (through symlinks) inside the workspace, `to` a normalized
// absolute path; device files, FIFOs and sockets are refused; sizes and entry counts are
// bounded. Symlinks found inside a packed directory tree are stored as symlinks, never followed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln {

/// One declared output.
struct LayerEntry {
  /// Path relative to the workspace (a file, or a directory packed recursively).
  std::string from;
  /// Absolute, normalized path in the image.
  std::string to;
};

/// A finished layer blob.
struct LayerBlob {
  /// tar+gzip bytes.
  std::string data;
  /// "sha256:<hex>" of `data` (the blob digest).
  std::string digest;
  /// "sha256:<hex>" of the uncompressed tar (the config's rootfs.diff_ids entry).
  std::string diff_id;
  /// data.size().
  size_t size = 0;
};

/// Bounds on what a layer may hold.
struct LayerLimits {
  /// Sum of the packed regular files' sizes.
  uint64_t max_total_bytes = uint64_t{2} << 30;  // 2 GiB
  /// Number of tar entries (files, directories, symlinks, including created parents).
  size_t max_entries = 100000;
};

/// Packs `entries` from `workspace` into a layer, gzip `gzip_level` (1..9; 1 = fastest).
/// Returns InvalidArgument for a hostile or malformed path (absolute or `..` `from`, a `from`
/// escaping the workspace through symlinks, a relative or non-normalized `to`, two entries
/// mapping different things to one image path), for device files, FIFOs and sockets, and when
/// a limit is exceeded; NotFound when a `from` or the workspace does not exist; Internal for I/O
/// and zlib failures. `out` is only written on success.
Status WriteLayer(const std::string& workspace, const std::vector<LayerEntry>& entries,
                  int gzip_level, LayerBlob* out, const LayerLimits& limits = LayerLimits());

}  // namespace kiln
