// WwwAuthenticate: a parser for the HTTP WWW-Authenticate header (RFC 7235), as sent by OCI
// registries ("Bearer realm=...,service=...,scope=..." or "Basic realm=...").
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kiln {

/// One authentication challenge. `scheme` and parameter names are lowercased; values are
/// unquoted and unescaped. A token68 credential (e.g. "Negotiate abc==") is stored under the
/// parameter name "token68".
struct Challenge {
  std::string scheme;
  std::map<std::string, std::string> params;

  /// The parameter's value, or "" when absent.
  std::string Param(const std::string& name) const;
};

/// Parses a WWW-Authenticate header value into its challenges (in order). On malformed input
/// (unterminated quote, missing scheme, empty or duplicate parameter, control characters,
/// over 16 KiB) returns InvalidArgument naming the problem and its byte offset, and leaves
/// `out` empty. Never throws.
Status ParseWwwAuthenticate(std::string_view header, std::vector<Challenge>* out);

}  // namespace kiln
