#include "builder/log_buffer.h"

#include <algorithm>

#include "common/json_text.h"

namespace kiln {

void LogBuffer::Append(std::string_view s) {
  std::lock_guard<std::mutex> l(mu_);
  if (closed_) return;  // a finished build's log is final (a late line of a cancelled step)
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
  data_.shrink_to_fit();  // issue 19: a finished log holds no spare capacity
}

void LogBuffer::Shrink(size_t keep_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (data_.size() > keep_bytes) {
    size_t drop = data_.size() - keep_bytes;
    data_.erase(0, drop);
    start_ += drop;
  }
  data_.shrink_to_fit();
}

size_t LogBuffer::held_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return data_.capacity();
}

LogBuffer::Chunk LogBuffer::Read(size_t offset, size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  Chunk c;
  c.dropped = start_;
  size_t end = start_ + data_.size();
  size_t from = std::max(offset, start_);
  if (from > end) from = end;
  size_t n = std::min(limit, end - from);
  std::string_view kept(data_);
  std::string_view raw = kept.substr(from - start_, n);
  size_t cut = Utf8SafePrefix(raw);
  if (cut < n) {
    // The chunk ends inside a character: look at it with the bytes kept after it.
    Utf8Unit u = Utf8UnitAt(kept.substr(from - start_ + cut, 4));
    if (u.incomplete && !closed_)
      n = cut;  // the build is still writing it: a later read gets it whole
    else if (cut == 0)
      n = u.length;  // `limit` is smaller than this one unit: hand it out whole
    else if (!(u.incomplete && from + n == end))
      n = cut;  // the next chunk starts with it
    // else the closed log ends inside it: replaced below
  }
  c.text = ToValidUtf8(kept.substr(from - start_, n));
  c.offset = from;
  c.next_offset = from + n;
  c.complete = closed_ && c.next_offset == end;
  return c;
}

std::string LogBuffer::Tail(size_t max_bytes) const {
  std::lock_guard<std::mutex> l(mu_);
  if (data_.size() <= max_bytes) return ToValidUtf8(data_);
  size_t from = data_.size() - max_bytes;
  size_t nl = data_.find('\n', from);
  if (nl != std::string::npos && nl + 1 < data_.size()) {
    from = nl + 1;
  } else {
    // No line start: do not begin inside a character.
    for (int k = 0; k < 3 && from < data_.size() && (data_[from] & 0xC0) == 0x80; ++k) ++from;
  }
  return ToValidUtf8(std::string_view(data_).substr(from));
}

size_t LogBuffer::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return start_ + data_.size();
}

}  // namespace kiln
