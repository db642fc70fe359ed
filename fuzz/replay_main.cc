// fuzz_regressions: replays every file of fuzz/corpus/<target>/ and fuzz/regressions/<target>/
// through each fuzz target's entry point, in the normal (gcc, no libFuzzer) build. Each target
// source is compiled with LLVMFuzzerTestOneInput renamed to KilnFuzz_<target> (see
// fuzz/CMakeLists.txt). A target that crashes or fails an invariant aborts the process, so the
// CTest entry fails and names the input last printed.
//
// Usage: fuzz_regressions <fuzz source dir> [target...]   (default: all targets)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#define KILN_DECLARE_TARGET(name) extern "C" int KilnFuzz_##name(const uint8_t* data, size_t size);
KILN_DECLARE_TARGET(mcp_handler)
KILN_DECLARE_TARGET(config_parser)
KILN_DECLARE_TARGET(diagnostics)
KILN_DECLARE_TARGET(www_authenticate)
KILN_DECLARE_TARGET(layer_writer)
KILN_DECLARE_TARGET(tool_views)
KILN_DECLARE_TARGET(containerfile)

namespace {

struct Target {
  const char* name;
  int (*fn)(const uint8_t*, size_t);
};

const Target kTargets[] = {
    {"mcp_handler", KilnFuzz_mcp_handler},     {"config_parser", KilnFuzz_config_parser},
    {"diagnostics", KilnFuzz_diagnostics},     {"www_authenticate", KilnFuzz_www_authenticate},
    {"layer_writer", KilnFuzz_layer_writer},   {"tool_views", KilnFuzz_tool_views},
    {"containerfile", KilnFuzz_containerfile},
};

// Replays every regular file under `dir` (sorted); returns how many ran.
size_t ReplayDir(const Target& t, const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return 0;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "%s: %s\n", t.name, f.c_str());
    t.fn(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  return files.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <fuzz source dir> [target...]\n", argv[0]);
    return 2;
  }
  std::filesystem::path root(argv[1]);
  std::vector<std::string> only(argv + 2, argv + argc);
  size_t total = 0;
  for (const Target& t : kTargets) {
    if (!only.empty() && std::find(only.begin(), only.end(), t.name) == only.end()) continue;
    size_t n = ReplayDir(t, root / "corpus" / t.name) + ReplayDir(t, root / "regressions" / t.name);
    std::printf("%-18s %zu inputs OK\n", t.name, n);
    if (n == 0) {
      std::fprintf(stderr, "no inputs for %s\n", t.name);
      return 1;
    }
    total += n;
  }
  std::printf("fuzz_regressions: %zu inputs replayed\n", total);
  return 0;
}
