// libFuzzer target: ParseDiagnostics (builder/diagnostics.h) on arbitrary build output.
// Input: first byte picks the options (source roots, max count); the rest is the output.
// Invariants: never throws; at most max_diagnostics results; file/message valid UTF-8 without
// control characters; known severities; ToJson never throws. Stateless; single-threaded.
#include <cstddef>
#include <cstdint>

#include "builder/diagnostics.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size == 0) return 0;
  DiagnosticsOptions opts;
  uint8_t flags = data[0];
  if (flags & 1) opts.source_roots.push_back("/src/");
  if (flags & 2) opts.source_roots.push_back("/workspace");
  if (flags & 4) opts.source_roots.push_back("");
  opts.max_diagnostics = (flags & 8) ? 3 : 200;
  if (flags & 16) opts.repo_root = "/tmp/h6cap/py";
  if (flags & 32) opts.go_module = "example.com/m";
  if (flags & 64) opts.max_message_bytes = 7;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  DiagnosticsResult result = ParseBuildDiagnostics(text, opts);
  std::vector<Diagnostic> diags = ParseDiagnostics(text, opts);
  KILN_FUZZ_CHECK(diags == result.diagnostics);
  KILN_FUZZ_CHECK(diags.size() <= opts.max_diagnostics);
  for (const Diagnostic& d : diags) {
    KILN_FUZZ_CHECK(d.severity == "error" || d.severity == "warning" || d.severity == "note");
    KILN_FUZZ_CHECK(d.line >= 0 && d.column >= 0);
    KILN_FUZZ_CHECK(d.message.size() <= opts.max_message_bytes);
    KILN_FUZZ_CHECK(fuzz::IsValidUtf8(d.code));
    for (const std::string* s : {&d.file, &d.message}) {
      KILN_FUZZ_CHECK(fuzz::IsValidUtf8(*s));
      for (unsigned char c : *s) KILN_FUZZ_CHECK(c >= 0x20 && c != 0x7F);
    }
    std::string j = ToJson(d).dump();
    KILN_FUZZ_CHECK(!j.empty());
  }
  std::string stripped = StripAnsi(text);
  KILN_FUZZ_CHECK(stripped.size() <= text.size());
  return 0;
}
