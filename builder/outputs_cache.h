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
#include <functional>
#include <mutex>
#include <string>

#include "builder/layer_writer.h"
#include "common/status.h"

namespace kiln {

// --- Issue 15: streamed entries ---
/// Writes a layer blob's gzip bytes into `out`; sets *digest ("sha256:<hex>") and *size.
using BlobProducer = std::function<Status(ByteSink* out, std::string* digest, uint64_t* size)>;

/// Runs `produce` into an unnamed temporary file (O_TMPFILE) in `dir` (the layered builder's
/// path when there is no outputs cache): out->file gets it, with digest, size and `diff_id`.
/// Internal on I/O errors; the producer's errors as they are. Nothing stays on disk.
Status WriteTempBlob(const std::string& dir, const std::string& diff_id,
                     const BlobProducer& produce, LayerBlob* out);

class OutputsCache {
 public:
  OutputsCache(std::string dir, uint64_t max_bytes);

  /// True and *out filled (data, digest, diff_id, size) when `diff_id` is cached and intact.
  bool Lookup(const std::string& diff_id, LayerBlob* out);

  /// Stores `blob` (digest and diff_id must be set), then evicts down to the bound. A blob
  /// larger than the bound is not stored (Ok). Internal on I/O errors (the cache stays valid).
  Status Store(const LayerBlob& blob);

  /// Issue 15: as Lookup, but the blob stays in its file (out->file, data empty) and is
  /// verified by streaming it (never held in memory whole).
  bool LookupFile(const std::string& diff_id, LayerBlob* out);

  /// Issue 15: runs `produce` straight into a new entry for `diff_id` (a temporary file,
  /// renamed into place when complete, then eviction); out->file gets the entry's bytes through
  /// an open descriptor, readable even if the entry is evicted later. A blob larger than the
  /// bound is produced but not kept. Internal on I/O errors; the producer's errors as they are
  /// (nothing is stored then).
  Status StoreStream(const std::string& diff_id, const BlobProducer& produce, LayerBlob* out);

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
