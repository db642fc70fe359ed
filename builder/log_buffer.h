// LogBuffer: a build's log, bounded, readable by offset while it is being written.
// Thread-safe: one writer thread (the build) and any number of readers.
//
// Offsets are absolute byte positions in the full log (the raw bytes the build wrote). When the
// log outgrows `max_bytes`, the oldest bytes are dropped; Read() from a dropped offset starts at
// the oldest kept byte.
//
// Text handed out (Read, Tail) is always valid UTF-8; the stored bytes stay as written.
//  - Ill-formed sequences are replaced by U+FFFD, one per maximal ill-formed subpart (so
//    text.size() may differ from next_offset - offset).
//  - Read() moves the chunk end back rather than split a character (or an ill-formed subpart):
//    next_offset then points at its first byte and the next Read returns it whole, so reading a
//    log chunk by chunk yields exactly the text of reading it at once. When `limit` is smaller
//    than the first character, the chunk holds that whole character (at most 3 bytes more than
//    `limit`). A character the build has only partly written yet is held back until the rest
//    arrives (or the log closes, when it is replaced).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln {

class LogBuffer {
 public:
  explicit LogBuffer(size_t max_bytes = 4 << 20) : max_(max_bytes < 1024 ? 1024 : max_bytes) {}
  /// Appends `s`; ignored once closed (what a cancelled step still writes after the build
  /// ended must not change its final log).
  void Append(std::string_view s);
  void Close();  // the log is complete and final
  struct Chunk {
    std::string text;        // valid UTF-8
    size_t offset = 0;       // where `text` starts (may be > requested if bytes were dropped)
    size_t next_offset = 0;  // byte offset to continue from (at a character boundary)
    bool complete = false;   // closed and nothing beyond next_offset
    size_t dropped = 0;      // bytes dropped from the head so far
  };
  /// Reads up to `limit` bytes from `offset` (see the header comment for character boundaries).
  Chunk Read(size_t offset, size_t limit) const;
  /// The last `max_bytes` bytes, cut at a line start when possible, as valid UTF-8.
  std::string Tail(size_t max_bytes) const;
  size_t size() const;  // total bytes ever appended
  /// Issue 19: drops the oldest bytes down to `keep_bytes` (offsets stay absolute, as when the
  /// log outgrows max_bytes) and releases the spare memory. For finished logs of older builds.
  void Shrink(size_t keep_bytes);
  /// Bytes held now (kept bytes plus spare capacity).
  size_t held_bytes() const;

 private:
  const size_t max_;
  mutable std::mutex mu_;
  std::string data_;  // kept bytes
  size_t start_ = 0;  // absolute offset of data_[0]
  bool closed_ = false;
};

}  // namespace kiln
