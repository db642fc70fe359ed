// libFuzzer target: ParseConfig (config/config_parser.h) on arbitrary JSON text.
// Invariants: never throws; every problem has a reason; a valid config also yields warnings
// without throwing; parsing the same text twice gives the same problems. Reads only the files
// the config names (auth_file, ca_file, kubeconfig checks); writes nothing. Single-threaded.
#include <cstddef>
#include <cstdint>

#include "config/config_parser.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string text(reinterpret_cast<const char*>(data), size);
  Config config;
  std::vector<ConfigProblem> problems =
      ParseConfigRelativeTo(text, "/nonexistent-kiln-base", &config);
  for (const ConfigProblem& p : problems) {
    KILN_FUZZ_CHECK(!p.reason.empty());
    KILN_FUZZ_CHECK(!FormatConfigProblem(p).empty());
  }
  if (problems.empty()) {
    std::vector<ConfigProblem> warnings = CollectConfigWarnings(config);
    for (const ConfigProblem& w : warnings) KILN_FUZZ_CHECK(!w.reason.empty());
  }
  Config again;
  KILN_FUZZ_CHECK(ParseConfigRelativeTo(text, "/nonexistent-kiln-base", &again).size() ==
                  problems.size());
  return 0;
}
