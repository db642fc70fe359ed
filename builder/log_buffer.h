// LogBuffer: a build's log, bounded, readable by offset while it is being written.
// Thread-safe: one writer thread (the build) and any number of readers.
//
// Offsets are absolute byte positions in the full log. When the log outgrows `max_bytes`, the
// oldest bytes are dropped; Read() from a dropped offset starts at the oldest kept byte.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln {

class LogBuffer {
 public:
  explicit LogBuffer(size_t max_bytes = 4 << 20) : max_(max_bytes < 1024 ? 1024 : max_bytes) {}
  void Append(std::string_view s);
  void Close();  // the log is complete
  struct Chunk {
    std::string text;
    size_t offset = 0;       // where `text` starts (may be > requested if bytes were dropped)
    size_t next_offset = 0;
    bool complete = false;   // closed and nothing beyond next_offset
    size_t dropped = 0;      // bytes dropped from the head so far
  };
  /// Reads up to `limit` bytes from `offset`.
  Chunk Read(size_t offset, size_t limit) const;
  /// The last `max_bytes` bytes, cut at a line start when possible.
  std::string Tail(size_t max_bytes) const;
  size_t size() const;  // total bytes ever appended

 private:
  const size_t max_;
  mutable std::mutex mu_;
  std::string data_;    // kept bytes
  size_t start_ = 0;    // absolute offset of data_[0]
  bool closed_ = false;
};

}  // namespace kiln
