// Test helper: writes small tar archives entry by entry, including entries a well-behaved tool
// would never write (absolute names, "..", devices, links out of the root). Header-only, for
// the deploy tests. Not thread-safe.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace kiln::testing_tar {

class TarBuilder {
 public:
  TarBuilder& File(const std::string& name, const std::string& data, unsigned mode = 0644) {
    return Entry(name, '0', data, "", mode);
  }
  TarBuilder& Dir(const std::string& name, unsigned mode = 0755) {
    return Entry(name, '5', "", "", mode);
  }
  TarBuilder& Symlink(const std::string& name, const std::string& target) {
    return Entry(name, '2', "", target, 0777);
  }
  TarBuilder& Hardlink(const std::string& name, const std::string& target) {
    return Entry(name, '1', "", target, 0644);
  }
  TarBuilder& Device(const std::string& name, char type = '3') {
    return Entry(name, type, "", "", 0666);
  }
  /// A PAX 'x' record giving `name` as the path of the next entry (for names over 100 bytes).
  TarBuilder& PaxFile(const std::string& name, const std::string& data) {
    std::string rec = " path=" + name + "\n";
    size_t len = rec.size();
    for (int i = 0; i < 3; ++i) len = rec.size() + std::to_string(len).size();
    Entry("PaxHeaders/x", 'x', std::to_string(len) + rec, "", 0644);
    return Entry("placeholder", '0', data, "", 0644);
  }
  TarBuilder& Entry(const std::string& name, char type, const std::string& data,
                    const std::string& link, unsigned mode) {
    char h[512];
    std::memset(h, 0, sizeof(h));
    std::strncpy(h, name.c_str(), 100);
    std::snprintf(h + 100, 8, "%07o", mode);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    std::strncpy(h + 157, link.c_str(), 100);
    std::memcpy(h + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.append(h, sizeof(h));
    out_ += data;
    out_.append((512 - data.size() % 512) % 512, '\0');
    return *this;
  }
  /// The archive with its end marker.
  std::string Tar() const { return out_ + std::string(1024, '\0'); }
  /// The archive gzip-compressed.
  std::string Gzip() const { return GzipBytes(Tar()); }

  static std::string GzipBytes(const std::string& in) {
    z_stream z;
    std::memset(&z, 0, sizeof(z));
    deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&z, in.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  }

 private:
  std::string out_;
};

}  // namespace kiln::testing_tar
