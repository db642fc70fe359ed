// Diagnostics: turns raw build output into a list of structured compiler diagnostics that an
// agent can act on. Understood formats: go build / go vet / go test, gcc, clang, ld/collect2,
// javac, rustc/cargo, tsc (plain and --pretty), CPython tracebacks (incl. SyntaxError), pytest,
// mypy, flake8, and buildah's RUN step summary.
//
// Pure functions, no I/O, no shared state: thread-safe. Input is untrusted bytes (whatever a
// build printed); the parser never throws, never recurses, and is linear in the input size.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostic.h"

namespace kiln {

struct DiagnosticsOptions {
  /// In-container/in-sandbox source roots stripped from paths, e.g. "/src/", "/workspace/".
  /// A root without a trailing '/' is treated as a directory ("/src" strips "/src/x.go").
  /// A leading "./" is always stripped.
  std::vector<std::string> source_roots;
  /// Host path of the repository checkout when the build ran outside a container (stripped
  /// like a source root). "" when unused.
  std::string repo_root{};
  /// Go module path (from go.mod), used to turn `go test`'s package import path into a
  /// repo-relative directory. When "", a module with a dot-less first element ("app/pkg/x")
  /// or a github.com/gitlab.com/bitbucket.org path is guessed; otherwise only the file's
  /// base name is given.
  std::string go_module{};
  /// At most this many diagnostics are returned (the first ones, in output order).
  size_t max_diagnostics = 50;
  /// Each message is cut to at most this many bytes (on a UTF-8 boundary, `truncated` set).
  size_t max_message_bytes = 2048;
};

/// Parser output with the overall bound made visible.
struct DiagnosticsResult {
  std::vector<Diagnostic> diagnostics;
  /// True when more diagnostics were found than max_diagnostics allowed.
  bool truncated = false;
};

/// Paths: source roots and repo_root are stripped, so files inside the repository are
/// relative. Diagnostics located in absolute paths outside them (system headers, the standard
/// library) are kept as context, but under the count bound they only get the slots that
/// diagnostics pointing into the repository (or to no file) leave free. For Python tracebacks
/// the innermost frame inside the repository is chosen. Object files (.o, .a, .so) are never a
/// `file`.
///
/// Parses `build_output` into diagnostics, in order of appearance, exact duplicates removed.
/// Lines that are not diagnostics (package headers, code snippets, carets, "In file included
/// from", buildah STEP lines, ...) are ignored. A summary line such as buildah's
/// `building at STEP "...": exit status 1` or `collect2: error: ld returned 1 exit status` is
/// returned (file "") only when no other error was found. Never fails: garbage yields an empty
/// or partial list.
std::vector<Diagnostic> ParseDiagnostics(std::string_view build_output,
                                         const DiagnosticsOptions& opts);

/// Same as ParseDiagnostics, with the overall truncation flag.
DiagnosticsResult ParseBuildDiagnostics(std::string_view build_output,
                                        const DiagnosticsOptions& opts);

// --- Issue 16: the failing Containerfile step ---
/// The Containerfile step a buildah build stopped at: its position ("3/5", "" when buildah
/// printed none), the instruction as buildah echoed it ("RUN go test ./..."), and the
/// step's exit status (-1 when not printed).
struct FailedStep {
  std::string position;
  std::string instruction;
  int exit_code = -1;
};

/// Finds buildah's `building at STEP "<instruction>": exit status N` line (the last one) and
/// the `STEP i/n: <instruction>` line that announced that step. nullopt when the output has
/// no such summary (the build failed elsewhere). The instruction is cut to 200 bytes
/// (UTF-8 boundary, "..." appended), without control characters.
std::optional<FailedStep> FindFailedStep(std::string_view build_output);

/// True when `instruction` is a RUN instruction ("RUN ...", any case; not "RUNN ...").
bool IsRunInstruction(std::string_view instruction);

/// "step 3/5 (RUN go test ./...) failed with exit code 1" (parts that are unknown omitted).
std::string DescribeFailedStep(const FailedStep& step);
/// The module path of a go.mod ("module example.com/m" -> "example.com/m", quotes and
/// comments removed); "" when the text declares none. For DiagnosticsOptions::go_module.
std::string GoModulePath(std::string_view go_mod);
// --- end issue 16 ---

/// Strips ANSI escape sequences (CSI, OSC, two-byte ESC sequences) from `s`.
std::string StripAnsi(std::string_view s);

}  // namespace kiln
