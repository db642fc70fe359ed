// LayerWriter: packs a build's declared outputs (files and directory trees inside a candidate's
// workspace) into one OCI image layer: a tar stream (ustar headers, PAX records for long names),
// gzip-compressed with zlib. The result is deterministic: fixed mtime (0), uid/gid 0, empty
// owner names, modes normalized to 0755/0644, entries in sorted byte order and a fixed gzip
// header, so equal outputs always give equal digests.
//
// Two steps, so a caller can look the layer up by its uncompressed digest before paying for
// compression: PackLayerTar reads each file once into an in-memory tar and hashes it in the
// same pass (diff_id); CompressLayer deflates fixed-size chunks of it on several threads (each
// chunk primed with the previous 32 KiB as dictionary and ended with a sync flush, as pigz
// does) into ONE gzip member, hashing the compressed bytes in order as chunks finish. The chunk
// size (not the thread count) fixes the bytes, so any machine gives the same digest.
//
// Ownership: the functions own nothing beyond their call; results are returned by value.
// Thread-safety: pure functions (no shared state); CompressLayer starts and joins its own
// worker threads. Memory: the tar and the compressed blob are both held in memory.
//
// The outputs are agent-controlled, so every path is checked: `from` must be a normalized
// relative path that resolves (through symlinks) inside the workspace, `to` a normalized
// absolute path; device files, FIFOs and sockets are refused; sizes and entry counts are
// bounded. Symlinks found inside a packed directory tree are stored as symlinks, never followed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
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

/// An uncompressed layer.
struct LayerTar {
  /// The tar bytes.
  std::string data;
  /// "sha256:<hex>" of `data`.
  std::string diff_id;
};

/// How CompressLayer compresses.
struct CompressOptions {
  /// gzip level 0..9 (1 = fastest).
  int level = 1;
  /// Worker threads; 0 = one per hardware thread (at most 16). Does not change the bytes.
  int threads = 0;
  /// Input bytes per independently deflated chunk (64 KiB..1 GiB). Changes the bytes: keep it
  /// fixed so equal outputs give equal digests everywhere.
  size_t chunk_bytes = size_t{1} << 20;
};

/// Packs `entries` from `workspace` into an uncompressed tar (each file read once) and its
/// diff_id. Errors as WriteLayer. `out` is only written on success.
Status PackLayerTar(const std::string& workspace, const std::vector<LayerEntry>& entries,
                    LayerTar* out, const LayerLimits& limits = LayerLimits());

/// Compresses `tar` (whose sha256 is `diff_id`, copied into out->diff_id) into one gzip member
/// with the fixed header, in parallel. InvalidArgument for a bad level or chunk size, Internal
/// for zlib failures. `out` is only written on success.
Status CompressLayer(std::string_view tar, const std::string& diff_id,
                     const CompressOptions& opts, LayerBlob* out);

/// PackLayerTar + CompressLayer (default threads and chunk size), gzip `gzip_level` (0..9).
/// Returns InvalidArgument for a hostile or malformed path (absolute or `..` `from`, a `from`
/// escaping the workspace through symlinks, a relative or non-normalized `to`, two entries
/// mapping different things to one image path), for device files, FIFOs and sockets, and when
/// a limit is exceeded; NotFound when a `from` or the workspace does not exist; Internal for I/O
/// and zlib failures. `out` is only written on success.
Status WriteLayer(const std::string& workspace, const std::vector<LayerEntry>& entries,
                  int gzip_level, LayerBlob* out, const LayerLimits& limits = LayerLimits());

}  // namespace kiln
