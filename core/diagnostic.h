// Diagnostic: one structured compiler/linker/builder message, as builds produce it
// (builder/diagnostics.h parses build output into these), the state journal stores it and the
// tools show it. Value type and pure JSON conversions; thread-safe (no state).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
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
  /// The tool's own code when it prints one: "E0308" (rustc), "TS2322" (tsc), "E302" (flake8),
  /// "assignment" (mypy). The message keeps the code as the tool shows it.
  std::string code{};
  /// True when `message` was cut to DiagnosticsOptions::max_message_bytes.
  bool truncated = false;

  bool operator==(const Diagnostic& o) const {
    return file == o.file && line == o.line && column == o.column && severity == o.severity &&
           message == o.message && code == o.code && truncated == o.truncated;
  }
};

/// {"file":..,"line":..,"column":..,"severity":..,"message":..}, plus "code" when non-empty and
/// "truncated": true when the message was cut. Never throws for parser output.
nlohmann::json ToJson(const Diagnostic& d);

/// The inverse of ToJson: missing or mistyped fields take their defaults. Never throws.
Diagnostic DiagnosticFromJson(const nlohmann::json& j);

/// A JSON array of ToJson(d); and back (non-objects in `a` are skipped; a non-array is empty).
nlohmann::json DiagnosticsToJson(const std::vector<Diagnostic>& ds);
std::vector<Diagnostic> DiagnosticsFromJson(const nlohmann::json& a);

}  // namespace kiln
