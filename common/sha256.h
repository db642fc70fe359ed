// SHA-256 helpers over OpenSSL's EVP API. Thread-safe: no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

/// Incremental SHA-256. Not copyable. One thread at a time per instance.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  /// Lowercase hex digest (64 chars). The object may not be used afterwards.
  std::string HexDigest();

 private:
  void* ctx_;
};

/// Lowercase hex SHA-256 of `s`.
std::string Sha256Hex(std::string_view s);

/// Constant-time comparison of two strings (length leaks, content does not).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

/// True when `s` is exactly 64 lowercase hex characters.
bool IsSha256Hex(std::string_view s);

/// True when `s` is an OCI sha256 digest: "sha256:" + 64 lowercase hex characters. The one
/// digest validator: every digest from a registry, the journal, config or an agent is checked
/// with it before use.
bool IsSha256Digest(std::string_view s);

}  // namespace kiln
