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
// worker threads. Memory: PackLayerTar/CompressLayer/WriteLayer hold the tar and the
// compressed blob in memory (small layers, tests).
//
// Issue 15, streaming (the layered builder's path): StreamLayerTar produces the same tar bytes
// piece by piece into a ByteSink (or only hashes them), and GzipLayerWriter compresses such a
// stream into the same gzip bytes as CompressLayer while holding at most (threads + 1) chunks
// and their outputs, so outputs of any size never sit in memory whole. GzipLayerWriter is not
// thread-safe (one producer); it runs its own workers and joins them before returning.
//
// The outputs are agent-controlled, so every path is checked: `from` must be a normalized
// relative path that resolves (through symlinks) inside the workspace, `to` a normalized
// absolute path; device files, FIFOs and sockets are refused; sizes and entry counts are
// bounded. Symlinks found inside a packed directory tree are stored as symlinks, never followed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"

namespace kiln {

/// One declared output.
struct LayerEntry {
  /// Path relative to the workspace (a file, or a directory packed recursively).
  std::string from;
  /// Absolute, normalized path in the image.
  std::string to;
};

/// Issue 15: the layer blob's bytes in a file, through an open descriptor (stays readable when
/// the file is unlinked, e.g. evicted from the outputs cache). Owns and closes the descriptor.
/// Thread-safe (pread only).
class BlobFile {
 public:
  BlobFile(int fd, uint64_t offset, uint64_t size) : fd_(fd), offset_(offset), size_(size) {}
  ~BlobFile();
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;
  /// Reads [offset, offset+size) into *out. Internal on I/O error or a short file.
  Status ReadAll(std::string* out) const;
  int fd() const { return fd_; }
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return size_; }

 private:
  const int fd_;
  const uint64_t offset_, size_;
};

/// A finished layer blob.
struct LayerBlob {
  /// tar+gzip bytes.
  std::string data;
  /// "sha256:<hex>" of `data` (the blob digest).
  std::string digest;
  /// "sha256:<hex>" of the uncompressed tar (the config's rootfs.diff_ids entry).
  std::string diff_id;
  /// data.size() (or file->size()).
  size_t size = 0;
  /// Issue 15: when set, the bytes are in this file and `data` is empty.
  std::shared_ptr<const BlobFile> file;
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
Status CompressLayer(std::string_view tar, const std::string& diff_id, const CompressOptions& opts,
                     LayerBlob* out);

/// PackLayerTar + CompressLayer (default threads and chunk size), gzip `gzip_level` (0..9).
/// Returns InvalidArgument for a hostile or malformed path (absolute or `..` `from`, a `from`
/// escaping the workspace through symlinks, a relative or non-normalized `to`, two entries
/// mapping different things to one image path), for device files, FIFOs and sockets, and when
/// a limit is exceeded; NotFound when a `from` or the workspace does not exist; Internal for I/O
/// and zlib failures. `out` is only written on success.
Status WriteLayer(const std::string& workspace, const std::vector<LayerEntry>& entries,
                  int gzip_level, LayerBlob* out, const LayerLimits& limits = LayerLimits());

}  // namespace kiln

namespace kiln {

// --- Issue 15: streaming layers ---

/// Receives a byte stream piece by piece.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(const char* data, size_t n) = 0;
};

/// The tar of PackLayerTar, streamed: into `sink` (null: only hashed) in pieces of at most
/// 256 KiB, reading each file once; *diff_id gets "sha256:<hex>". Errors as PackLayerTar, plus
/// the sink's errors.
Status StreamLayerTar(const std::string& workspace, const std::vector<LayerEntry>& entries,
                      ByteSink* sink, std::string* diff_id,
                      const LayerLimits& limits = LayerLimits());

/// Streaming CompressLayer (same options, same bytes for the same input): Write() the tar, then
/// Finish(). The gzip bytes go to `out` in order; the digest is computed on the way.
class GzipLayerWriter : public ByteSink {
 public:
  /// `out` must outlive this object. Invalid options make Write/Finish fail (InvalidArgument).
  GzipLayerWriter(const CompressOptions& opts, ByteSink* out);
  ~GzipLayerWriter() override;
  GzipLayerWriter(const GzipLayerWriter&) = delete;
  GzipLayerWriter& operator=(const GzipLayerWriter&) = delete;

  Status Write(const char* data, size_t n) override;
  /// Ends the stream (last chunk, trailer): *digest = "sha256:<hex>" of all bytes written to
  /// `out`, *size their count. Call once.
  Status Finish(std::string* digest, uint64_t* size);
  /// Most bytes held at once (chunk inputs, dictionaries and compressed outputs), for tests.
  size_t peak_buffered_bytes() const { return peak_; }

 private:
  struct Job;
  Status Dispatch(bool last);
  Status DrainFront();
  void Account();

  CompressOptions opts_;
  ByteSink* out_;
  Status status_;
  bool started_ = false;
  std::string cur_;   // the chunk being filled
  std::string dict_;  // last 32 KiB of the previous chunk
  std::deque<std::unique_ptr<Job>> inflight_;
  uint64_t in_bytes_ = 0, out_bytes_ = 0;
  unsigned long crc_ = 0;
  Sha256 sha_;
  size_t peak_ = 0;
};

}  // namespace kiln
