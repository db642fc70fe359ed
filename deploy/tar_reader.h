// TarReader: a streaming reader of the tar archives inside OCI image layers (ustar, GNU long
// names 'L'/'K', PAX 'x' records for path, linkpath, size, uid, gid; 'g' records ignored).
// LayerSource picks the decompression from the blob's magic bytes: gzip (possibly several
// members) or a plain tar; zstd is refused. Entries are returned as stored: the names are NOT
// sanitized here (see deploy/rootfs_rules.h).
//
// Ownership: a LayerSource reads `blob` in place; the blob must outlive it. A TarReader reads
// from a ByteSource it does not own. Not thread-safe: one thread per instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln {

/// A forward-only byte stream.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Reads up to n bytes; *got < n only at the end of the stream. Internal on corrupt data.
  virtual Status Read(char* buf, size_t n, size_t* got) = 0;
};

/// The uncompressed tar stream of a layer blob (gzip or plain tar, detected by magic bytes).
/// Returns InvalidArgument for zstd or another unsupported compression.
Status MakeLayerSource(std::string_view blob, std::unique_ptr<ByteSource>* out);

struct TarEntry {
  std::string name;      // as stored (PAX/GNU long name or ustar prefix + name)
  std::string linkname;  // symlink target or hard link source, as stored
  char type = '0';       // ustar typeflag
  uint32_t mode = 0;
  int64_t uid = 0;
  int64_t gid = 0;
  uint64_t size = 0;  // bytes of data that follow (0 for non-files)
};

class TarReader {
 public:
  explicit TarReader(ByteSource* src) : src_(src) {}
  /// Advances to the next real entry (skipping unread data of the previous one and consuming
  /// PAX/GNU meta entries). Sets *end at the end of the archive. InvalidArgument for a bad
  /// checksum, number or PAX record; Internal when the stream is truncated or corrupt.
  Status Next(TarEntry* entry, bool* end);
  /// Reads data of the current entry; *got == 0 once it is consumed. Errors as Next.
  Status ReadData(char* buf, size_t n, size_t* got);

 private:
  Status ReadExact(char* buf, size_t n);
  Status Skip(uint64_t n);
  Status ReadMeta(uint64_t size, std::string* out);

  ByteSource* src_;
  uint64_t remaining_ = 0;  // data bytes of the current entry not read yet
  uint64_t padding_ = 0;    // padding after the current entry's data
};

}  // namespace kiln
