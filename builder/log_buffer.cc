#include "builder/log_buffer.h"

#include <algorithm>

namespace kiln {

void LogBuffer::Append(std::string_view s) {
  std::lock_guard<std::mutex> l(mu_);
  data_.append(s.data(), s.size());
  if (data_.size() > max_ + max_ / 4) {
    size_t drop = data_.size() - max_;
    data_.erase(0, drop);
    start_ += drop;
  }
}

void LogBuffer::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
}

LogBuffer::Chunk LogBuffer::Read(size_t offset, size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  Chunk c;
  c.dropped = start_;
  size_t end = start_ + data_.size();
  size_t from = std::max(offset, start_);
  if (from > end) from = end;
  size_t n = std::min(limit, end - from);
  c.text = data_.substr(from - start_, n);
  c.offset = from;
  c.next_offset = from + n;
  c.complete = closed_ && c.next_offset == end;
  return c;
}

std::string LogBuffer::Tail(size_t max_bytes) const {
  std::lock_guard<std::mutex> l(mu_);
  if (data_.size() <= max_bytes) return data_;
  size_t from = data_.size() - max_bytes;
  size_t nl = data_.find('\n', from);
  if (nl != std::string::npos && nl + 1 < data_.size()) from = nl + 1;
  return data_.substr(from);
}

size_t LogBuffer::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return start_ + data_.size();
}

}  // namespace kiln
