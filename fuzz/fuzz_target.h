// Shared helpers for kiln's libFuzzer targets (fuzz/fuzz_*.cc).
//
// Each target defines `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)`. In the
// clang build (scripts/fuzz.sh, KILN_FUZZ=ON) that symbol is linked with libFuzzer; in the
// normal gcc build each target's source is compiled with the symbol renamed to
// KilnFuzz_<target> and linked into fuzz/replay_main.cc (CTest `fuzz_regressions`), which
// replays fuzz/corpus/<target>/ and fuzz/regressions/<target>/.
//
// Targets check their own invariants with KILN_FUZZ_CHECK, which aborts (a crash both
// libFuzzer and the replay driver report). Targets keep no state across inputs unless said.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#define KILN_FUZZ_CHECK(cond)                                                           \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace kiln::fuzz {

/// Splits fuzz input into pieces at `sep` (at most `max_parts`; the last one takes the rest).
inline std::vector<std::string_view> Split(std::string_view in, std::string_view sep,
                                           size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t p = in.find(sep);
    if (p == std::string_view::npos) break;
    parts.push_back(in.substr(0, p));
    in.remove_prefix(p + sep.size());
  }
  parts.push_back(in);
  return parts;
}

/// True when `s` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace kiln::fuzz
