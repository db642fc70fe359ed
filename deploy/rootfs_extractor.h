// RootfsExtractor: applies OCI image layers, bottom first, to a root directory on the host.
// Layer contents are hostile input. Every entry name is cleaned (deploy/rootfs_rules.h: a
// leading "/" is dropped, ".." stops at the root) and every parent directory is resolved with
// symlinks interpreted inside the root, so no entry, whiteout, symlink or hard link can create,
// change or delete anything outside `root`. Device nodes, FIFOs and unknown entry types are
// skipped; setuid/setgid bits are dropped. OCI whiteouts (".wh.<name>", ".wh..wh..opq") remove
// what lower layers created.
//
// Thread-safety: the functions keep no state; two calls must not work on the same root at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln {

struct ExtractLimits {
  uint64_t max_total_bytes = uint64_t{8} << 30;  // file data over all layers of one image
  size_t max_entries = 1000000;
};

struct ExtractStats {
  size_t entries = 0;      // entries applied (files, dirs, links, whiteouts)
  size_t neutralized = 0;  // names that tried to leave the root (absolute, "..")
  size_t skipped = 0;      // devices, FIFOs, unknown types, AUFS metadata
  uint64_t bytes = 0;      // file data written
  bool too_large = false;  // Issue 15: stopped at max_total_bytes
};

/// Applies one layer blob (gzip or plain tar) to `root` (an existing directory). `stats` is
/// accumulated across calls so limits cover a whole image. Returns InvalidArgument for a
/// malformed or unsupported layer, a symlink loop, or an exceeded limit; Internal for I/O
/// errors. On failure the root is left partially written (the caller discards it).
Status ApplyLayer(const std::string& root, std::string_view blob, ExtractStats* stats,
                  const ExtractLimits& limits = ExtractLimits());

/// Creates directory `abs_path` (absolute, e.g. the image's WorkingDir) and its parents inside
/// `root`, resolving symlinks as if `root` were "/"; Ok when it exists. InvalidArgument for a
/// symlink loop or when a non-directory is in the way; Internal on I/O error.
Status EnsureDirectoryInRoot(const std::string& root, const std::string& abs_path);

/// Makes /proc, /dev and /tmp of `root` real directories (replacing whatever the image put
/// there, e.g. a symlink), so the sandbox's mounts land inside the root. Internal on I/O error.
Status PrepareMountPoints(const std::string& root);

}  // namespace kiln
