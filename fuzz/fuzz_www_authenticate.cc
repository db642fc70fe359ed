// libFuzzer target: ParseWwwAuthenticate (registry/www_authenticate.h) on arbitrary header
// values. Invariants: never throws; on error `out` is empty and the message is non-empty; on
// success every scheme is a non-empty lowercase token and every parameter name lowercase and
// non-empty; parsing is deterministic. Stateless; single-threaded.
#include <cctype>
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "registry/www_authenticate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view header(reinterpret_cast<const char*>(data), size);
  std::vector<Challenge> out;
  Status s = ParseWwwAuthenticate(header, &out);
  if (!s.ok()) {
    KILN_FUZZ_CHECK(out.empty());
    KILN_FUZZ_CHECK(!s.message().empty());
    KILN_FUZZ_CHECK(s.code() == Status::Code::kInvalidArgument);
    return 0;
  }
  for (const Challenge& c : out) {
    KILN_FUZZ_CHECK(!c.scheme.empty());
    for (char ch : c.scheme) KILN_FUZZ_CHECK(!std::isupper(static_cast<unsigned char>(ch)));
    for (const auto& [name, value] : c.params) {
      KILN_FUZZ_CHECK(!name.empty());
      for (char ch : name) KILN_FUZZ_CHECK(!std::isupper(static_cast<unsigned char>(ch)));
      KILN_FUZZ_CHECK(c.Param(name) == value);
    }
  }
  std::vector<Challenge> again;
  KILN_FUZZ_CHECK(ParseWwwAuthenticate(header, &again).ok());
  KILN_FUZZ_CHECK(again.size() == out.size());
  return 0;
}
