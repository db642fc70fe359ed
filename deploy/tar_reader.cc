#include "deploy/tar_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace kiln {
namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxMetaBytes = 1 << 20;  // PAX / GNU long-name records

class PlainSource : public ByteSource {
 public:
  explicit PlainSource(std::string_view d) : d_(d) {}
  Status Read(char* buf, size_t n, size_t* got) override {
    *got = std::min(n, d_.size() - pos_);
    std::memcpy(buf, d_.data() + pos_, *got);
    pos_ += *got;
    return Status::Ok();
  }

 private:
  std::string_view d_;
  size_t pos_ = 0;
};

class GzipSource : public ByteSource {
 public:
  explicit GzipSource(std::string_view d) : d_(d) {
    std::memset(&z_, 0, sizeof(z_));
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(d_.data()));
    z_.avail_in = static_cast<uInt>(std::min<size_t>(d_.size(), UINT32_MAX));
    fed_ = z_.avail_in;
  }
  ~GzipSource() override { inflateEnd(&z_); }
  Status Read(char* buf, size_t n, size_t* got) override {
    *got = 0;
    if (!ok_) return Status::Internal("gzip: init failed");
    while (*got < n && !done_) {
      if (z_.avail_in == 0 && fed_ < d_.size()) {
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(d_.data() + fed_));
        z_.avail_in = static_cast<uInt>(std::min<size_t>(d_.size() - fed_, UINT32_MAX));
        fed_ += z_.avail_in;
      }
      z_.next_out = reinterpret_cast<Bytef*>(buf + *got);
      z_.avail_out = static_cast<uInt>(std::min<size_t>(n - *got, UINT32_MAX));
      size_t before = z_.avail_out;
      int rc = inflate(&z_, Z_NO_FLUSH);
      *got += before - z_.avail_out;
      if (rc == Z_STREAM_END) {
        // Another gzip member may follow (concatenated gzip is valid).
        if (z_.avail_in == 0 && fed_ >= d_.size()) {
          done_ = true;
        } else if (inflateReset(&z_) != Z_OK) {
          return Status::Internal("gzip: reset failed");
        }
        continue;
      }
      if (rc == Z_BUF_ERROR && z_.avail_in == 0 && fed_ >= d_.size())
        return Status::Internal("gzip: truncated stream");
      if (rc != Z_OK && rc != Z_BUF_ERROR) return Status::Internal("gzip: corrupt stream");
    }
    return Status::Ok();
  }

 private:
  std::string_view d_;
  z_stream z_;
  bool ok_ = false;
  bool done_ = false;
  size_t fed_ = 0;
};

bool AllZero(const char* b, size_t n) {
  return std::all_of(b, b + n, [](char c) { return c == 0; });
}

// Octal (NUL/space terminated) or GNU base-256 (high bit of the first byte).
Status ParseNumber(const char* f, size_t n, uint64_t* out, bool allow_negative = false) {
  auto u = reinterpret_cast<const unsigned char*>(f);
  if (u[0] & 0x80) {
    if (u[0] & 0x40) {
      if (!allow_negative) return Status::InvalidArgument("tar: negative number");
      *out = 0;
      return Status::Ok();
    }
    uint64_t v = u[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return Status::InvalidArgument("tar: number overflows");
      v = (v << 8) | u[i];
    }
    *out = v;
    return Status::Ok();
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && (f[i] == ' ' || f[i] == 0)) ++i;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return Status::InvalidArgument("tar: number overflows");
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  for (; i < n; ++i)
    if (f[i] != ' ' && f[i] != 0) return Status::InvalidArgument("tar: bad octal number");
  *out = v;
  return Status::Ok();
}

std::string Field(const char* f, size_t n) { return std::string(f, strnlen(f, n)); }

// PAX records: "<len> <key>=<value>\n".
Status ParsePax(const std::string& data, TarEntry* e, bool* has_path, bool* has_link) {
  size_t i = 0;
  while (i < data.size()) {
    size_t sp = data.find(' ', i);
    if (sp == std::string::npos) return Status::InvalidArgument("tar: bad PAX record");
    uint64_t len = 0;
    for (size_t k = i; k < sp; ++k) {
      if (data[k] < '0' || data[k] > '9' || len > data.size())
        return Status::InvalidArgument("tar: bad PAX length");
      len = len * 10 + static_cast<uint64_t>(data[k] - '0');
    }
    if (len <= sp - i + 1 || i + len > data.size() || data[i + len - 1] != '\n')
      return Status::InvalidArgument("tar: bad PAX record length");
    std::string rec = data.substr(sp + 1, i + len - 1 - (sp + 1));
    size_t eq = rec.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument("tar: PAX record without '='");
    std::string key = rec.substr(0, eq), val = rec.substr(eq + 1);
    auto num = [&](uint64_t* v) -> Status {
      if (val.empty() || val.size() > 19 ||
          val.find_first_not_of("0123456789") != std::string::npos)
        return Status::InvalidArgument("tar: bad PAX number for " + key);
      *v = std::stoull(val);
      return Status::Ok();
    };
    uint64_t v = 0;
    if (key == "path") {
      e->name = val;
      *has_path = true;
    } else if (key == "linkpath") {
      e->linkname = val;
      *has_link = true;
    } else if (key == "size") {
      if (Status st = num(&v); !st.ok()) return st;
      e->size = v;
    } else if (key == "uid") {
      if (Status st = num(&v); !st.ok()) return st;
      e->uid = static_cast<int64_t>(v);
    } else if (key == "gid") {
      if (Status st = num(&v); !st.ok()) return st;
      e->gid = static_cast<int64_t>(v);
    }
    i += len;
  }
  return Status::Ok();
}

}  // namespace

Status MakeLayerSource(std::string_view blob, std::unique_ptr<ByteSource>* out) {
  auto m = [&](std::initializer_list<unsigned char> magic) {
    if (blob.size() < magic.size()) return false;
    size_t i = 0;
    for (unsigned char c : magic)
      if (static_cast<unsigned char>(blob[i++]) != c) return false;
    return true;
  };
  if (m({0x1f, 0x8b})) {
    *out = std::make_unique<GzipSource>(blob);
  } else if (m({0x28, 0xb5, 0x2f, 0xfd})) {
    return Status::InvalidArgument(
        "zstd-compressed layers are not supported by the local deploy target");
  } else if (m({0x42, 0x5a, 0x68}) || m({0xfd, '7', 'z', 'X', 'Z'})) {
    return Status::InvalidArgument("bzip2/xz-compressed layers are not supported");
  } else {
    *out = std::make_unique<PlainSource>(blob);
  }
  return Status::Ok();
}

Status TarReader::ReadExact(char* buf, size_t n) {
  size_t got = 0;
  if (Status st = src_->Read(buf, n, &got); !st.ok()) return st;
  if (got != n) return Status::Internal("tar: truncated archive");
  return Status::Ok();
}

Status TarReader::Skip(uint64_t n) {
  char buf[16384];
  while (n > 0) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(buf)));
    if (Status st = ReadExact(buf, k); !st.ok()) return st;
    n -= k;
  }
  return Status::Ok();
}

Status TarReader::ReadMeta(uint64_t size, std::string* out) {
  if (size > kMaxMetaBytes) return Status::InvalidArgument("tar: meta record too large");
  out->assign(static_cast<size_t>(size), '\0');
  if (Status st = ReadExact(out->data(), out->size()); !st.ok()) return st;
  return Skip((kBlock - size % kBlock) % kBlock);
}

Status TarReader::Next(TarEntry* e, bool* end) {
  *end = false;
  if (Status st = Skip(remaining_ + padding_); !st.ok()) return st;
  remaining_ = padding_ = 0;
  TarEntry pax;
  pax.uid = pax.gid = -1;
  bool pax_path = false, pax_link = false, pax_size = false, gnu_name = false, gnu_link = false;
  std::string gname, glink;
  for (;;) {
    char h[kBlock];
    size_t got = 0;
    if (Status st = src_->Read(h, kBlock, &got); !st.ok()) return st;
    if (got == 0 || (got == kBlock && AllZero(h, kBlock))) {
      *end = true;  // end-of-archive marker (or a missing one at EOF)
      return Status::Ok();
    }
    if (got != kBlock) return Status::Internal("tar: truncated header");
    uint64_t sum = 0, want = 0;
    for (size_t i = 0; i < kBlock; ++i)
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    if (Status st = ParseNumber(h + 148, 8, &want); !st.ok() || sum != want)
      return Status::InvalidArgument("tar: header checksum mismatch");
    uint64_t size = 0, mode = 0, uid = 0, gid = 0;
    if (Status st = ParseNumber(h + 124, 12, &size); !st.ok()) return st;
    char type = h[156];
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      std::string data;
      if (Status st = ReadMeta(size, &data); !st.ok()) return st;
      if (type == 'x') {
        uint64_t before = pax.size;
        pax.size = UINT64_MAX;
        if (Status st = ParsePax(data, &pax, &pax_path, &pax_link); !st.ok()) return st;
        if (pax.size != UINT64_MAX)
          pax_size = true;
        else
          pax.size = before;
      } else if (type == 'L') {
        gname = Field(data.data(), data.size());
        gnu_name = true;
      } else if (type == 'K') {
        glink = Field(data.data(), data.size());
        gnu_link = true;
      }
      continue;
    }
    if (Status st = ParseNumber(h + 100, 8, &mode); !st.ok()) return st;
    if (Status st = ParseNumber(h + 108, 8, &uid, true); !st.ok()) return st;
    if (Status st = ParseNumber(h + 116, 8, &gid, true); !st.ok()) return st;
    *e = TarEntry();
    e->name = Field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0)
      e->name = Field(h + 345, 155) + "/" + e->name;
    e->linkname = Field(h + 157, 100);
    e->type = type;
    e->mode = static_cast<uint32_t>(mode & 07777);
    e->uid = static_cast<int64_t>(uid);
    e->gid = static_cast<int64_t>(gid);
    e->size = size;
    if (gnu_name) e->name = gname;
    if (gnu_link) e->linkname = glink;
    if (pax_path) e->name = pax.name;
    if (pax_link) e->linkname = pax.linkname;
    if (pax_size) e->size = pax.size;
    if (pax.uid >= 0) e->uid = pax.uid;
    if (pax.gid >= 0) e->gid = pax.gid;
    // Only regular files have data; whatever size another entry declares is skipped.
    uint64_t data = e->size;
    if (type != '0' && type != '\0' && type != '7') e->size = 0;
    remaining_ = data;
    padding_ = (kBlock - data % kBlock) % kBlock;
    return Status::Ok();
  }
}

Status TarReader::ReadData(char* buf, size_t n, size_t* got) {
  *got = 0;
  size_t k = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
  if (k == 0) return Status::Ok();
  if (Status st = ReadExact(buf, k); !st.ok()) return st;
  remaining_ -= k;
  *got = k;
  return Status::Ok();
}

}  // namespace kiln
