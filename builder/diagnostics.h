// Diagnostics: turns raw build output (go build/vet, gcc, clang, ld, buildah) into a list of
// structured compiler diagnostics that an agent can act on.
//
// Pure functions, no I/O, no shared state: thread-safe. Input is untrusted bytes (whatever a
// build printed); the parser never throws, never recurses, and is linear in the input size.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

/// One compiler/linker/builder message. `file` is "" for messages without a source location
/// (linker errors, the builder's "building at STEP ... exit status N" summary). `line` and
/// `column` are 0 when unknown. `severity` is "error", "warning" or "note".
/// `file` and `message` are always valid UTF-8 without control characters.
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string severity;
  std::string message;

  bool operator==(const Diagnostic& o) const {
    return file == o.file && line == o.line && column == o.column && severity == o.severity &&
           message == o.message;
  }
};

struct DiagnosticsOptions {
  /// In-container/in-sandbox source roots stripped from paths, e.g. "/src/", "/workspace/".
  /// A root without a trailing '/' is treated as a directory ("/src" strips "/src/x.go").
  /// A leading "./" is always stripped.
  std::vector<std::string> source_roots;
  /// At most this many diagnostics are returned (the first ones, in output order).
  size_t max_diagnostics = 200;
};

/// Parses `build_output` into diagnostics, in order of appearance, exact duplicates removed.
/// Lines that are not diagnostics (package headers, code snippets, carets, "In file included
/// from", buildah STEP lines, ...) are ignored. A summary line such as buildah's
/// `building at STEP "...": exit status 1` or `collect2: error: ld returned 1 exit status` is
/// returned (file "") only when no other error was found. Never fails: garbage yields an empty
/// or partial list.
std::vector<Diagnostic> ParseDiagnostics(std::string_view build_output,
                                         const DiagnosticsOptions& opts);

/// {"file":..,"line":..,"column":..,"severity":..,"message":..}. Never throws for parser output.
nlohmann::json ToJson(const Diagnostic& d);

/// Strips ANSI escape sequences (CSI, OSC, two-byte ESC sequences) from `s`.
std::string StripAnsi(std::string_view s);

}  // namespace kiln
