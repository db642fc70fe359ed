// OutputsCache: compressed layers of the layered mode on disk, keyed by their diff_id (sha256 of
// the uncompressed tar), so a rebuild whose outputs did not change reuses the exact same blob
// (same digest, no compression) instead of compressing again.
//
// Layout: one file per layer, `<dir>/<diff_id hex>.layer` = "kiln-layer v1\n<digest>\n" + the
// gzip bytes, written to a temporary file and renamed (readers never see a partial entry). A
// lookup re-hashes the bytes and drops an entry whose digest does not match. Size bound: after
// each store the least recently used entries (file mtime, refreshed on every hit) are deleted
// until the directory holds at most `max_bytes`. The directory is created mode 0700 and must be
// kiln's own (under the state dir; never mounted into a sandbox).
//
// Ownership: owns nothing but its directory path; the files belong to the directory.
// Thread-safety: thread-safe; one mutex serializes this instance's store/evict. Several
// instances or processes on one directory are safe too (atomic renames; a concurrently evicted
// entry is just a miss).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "builder/layer_writer.h"
#include "common/status.h"

namespace kiln {

class OutputsCache {
 public:
  OutputsCache(std::string dir, uint64_t max_bytes);

  /// True and *out filled (data, digest, diff_id, size) when `diff_id` is cached and intact.
  bool Lookup(const std::string& diff_id, LayerBlob* out);

  /// Stores `blob` (digest and diff_id must be set), then evicts down to the bound. A blob
  /// larger than the bound is not stored (Ok). Internal on I/O errors (the cache stays valid).
  Status Store(const LayerBlob& blob);

  /// Sum of the entries' sizes on disk (scans the directory).
  uint64_t DiskBytes() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string Path(const std::string& diff_id) const;
  void EvictLocked();

  const std::string dir_;
  const uint64_t max_bytes_;
  std::mutex mu_;
};

}  // namespace kiln
