// JSON text and UTF-8 safety for bytes that kiln does not control (build output, program
// output, agent-supplied strings). Every dump of JSON that can hold such bytes goes through
// DumpJson; every place where build or program bytes become a stored string uses ToValidUtf8.
//
// Pure functions, no state: thread-safe.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kiln {

/// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above
/// U+10FFFF, no truncated sequence).
bool IsValidUtf8(std::string_view s);

/// `s` with every ill-formed part replaced by U+FFFD (EF BF BD), one replacement per maximal
/// ill-formed subpart (the Unicode "substitution of maximal subparts" practice): a stray
/// continuation byte, an invalid lead byte (C0, C1, F5..FF), an overlong or surrogate
/// sequence, a code point above U+10FFFF, or a sequence cut short (also at the end of `s`).
/// Valid input is returned unchanged, so the function is idempotent.
std::string ToValidUtf8(std::string_view s);

/// The length of the longest prefix of `s` that does not end inside a multi-byte sequence
/// that could still be completed by more bytes: `s.size()` minus 0..3. Used to cut a chunk of a
/// growing byte stream at a character boundary.
size_t Utf8SafePrefix(std::string_view s);

/// The first unit of `s` (not empty): a well-formed character (`valid`, length 1..4) or a
/// maximal ill-formed subpart (what ToValidUtf8 replaces by one U+FFFD). `incomplete`: the
/// subpart is a valid start of a character that the end of `s` cut short.
struct Utf8Unit {
  size_t length = 0;
  bool valid = false;
  bool incomplete = false;
};
Utf8Unit Utf8UnitAt(std::string_view s);

/// Replaces ill-formed UTF-8 in every string and object key of `*j` (recursively).
void MakeValidUtf8(nlohmann::json* j);

/// Compact JSON text of `j` that never throws on ill-formed UTF-8 (it is replaced by U+FFFD).
/// `indent` as in nlohmann::json::dump.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

/// The body of every HTTP error kiln answers outside JSON-RPC: {"error": message}, valid UTF-8.
std::string JsonErrorBody(const std::string& message);

}  // namespace kiln
