// libFuzzer target: the Containerfile readers (builder/containerfile_images.h, the base-image
// policy's input; builder/step_cache_policy.h, the `--layers` choice) on arbitrary agent-written
// Containerfiles. Invariants: never throws or crashes; deterministic; every image named is
// non-empty and on a line of the file; the step-cache reason is never empty; the overrides
// always win. Stateless; single-threaded.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "builder/containerfile_images.h"
#include "builder/step_cache_policy.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::map<std::string, std::string> args = {{"KILN_REGISTRY", "127.0.0.1:5000"}};
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  const std::vector<ContainerfileImage> images = ContainerfileImages(text, args);
  for (const ContainerfileImage& i : images) {
    KILN_FUZZ_CHECK(!i.image.empty());
    KILN_FUZZ_CHECK(i.line >= 1 && i.line <= lines);
  }
  KILN_FUZZ_CHECK(ContainerfileImages(text, args).size() == images.size());
  const StepCacheDecision d = DecideStepCache(text, args, "auto");
  KILN_FUZZ_CHECK(!d.reason.empty());
  const StepCacheDecision again = DecideStepCache(text, args, "auto");
  KILN_FUZZ_CHECK(again.use_layers == d.use_layers && again.reason == d.reason);
  KILN_FUZZ_CHECK(DecideStepCache(text, args, "always").use_layers);
  KILN_FUZZ_CHECK(!DecideStepCache(text, args, "never").use_layers);
  return 0;
}
