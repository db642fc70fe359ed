#include "common/base64.h"

#include <openssl/evp.h>

#include <cctype>
#include <cstdint>

namespace kiln {

bool DecodeBase64(const std::string& in, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string clean;
  for (char c : in)
    if (!std::isspace(static_cast<unsigned char>(c))) clean.push_back(c);
  while (!clean.empty() && clean.back() == '=') clean.pop_back();
  if (clean.size() % 4 == 1) return false;
  std::string r;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : clean) {
    int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      r.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  *out = std::move(r);
  return true;
}

std::string EncodeBase64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(&out[0]),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(n < 0 ? 0 : n);
  return out;
}

}  // namespace kiln
