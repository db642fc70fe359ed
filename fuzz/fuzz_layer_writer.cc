// libFuzzer target: the path handling of WriteLayer (builder/layer_writer.h).
//
// Input: up to 8 lines "from<TAB>to" (the declared outputs), packed from a fixed workspace that
// holds files, directories and symlinks pointing inside it, outside it (a directory and a file
// holding a secret marker) and at absolute paths. Invariants: never throws; on success `from`
// and `to` were normalized, the blob's size and digest fields agree, the tar entry names are
// relative, without '.'/'..' segments, and the secret outside the workspace never appears in
// the layer. The fixture lives in a temporary directory created once per process (removed at
// exit). Single-threaded.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "builder/layer_writer.h"
#include "common/names.h"
#include "fuzz/fuzz_target.h"

namespace {

namespace fs = std::filesystem;
constexpr const char* kSecret = "KILN-SECRET-OUTSIDE-WORKSPACE";

void WriteFile(const fs::path& p, const std::string& body, bool exec = false) {
  std::ofstream(p) << body;
  if (exec) fs::permissions(p, fs::perms::owner_exec, fs::perm_options::add);
}

std::string MakeFixture() {
  char tmpl[] = "/tmp/kiln-fuzz-layer-XXXXXX";
  const char* root = ::mkdtemp(tmpl);
  if (!root) std::abort();
  fs::path r(root);
  fs::create_directories(r / "outside");
  WriteFile(r / "outside" / "secret.txt", kSecret);
  fs::path ws = r / "ws";
  fs::create_directories(ws / "bin");
  fs::create_directories(ws / "data" / "sub");
  fs::create_directories(ws / "empty");
  WriteFile(ws / "bin" / "app", "app-binary", true);
  WriteFile(ws / "bin" / "tool", "tool");
  WriteFile(ws / "data" / "a.txt", "a");
  WriteFile(ws / "data" / "sub" / "b.txt", "b");
  fs::create_directory_symlink("../outside", ws / "link_out");
  fs::create_symlink("../outside/secret.txt", ws / "link_secret");
  fs::create_directory_symlink("/etc", ws / "link_abs");
  fs::create_directory_symlink("data", ws / "link_in");
  fs::create_symlink("../../outside/secret.txt", ws / "data" / "link_up");
  fs::create_symlink("loop", ws / "loop");
  static std::string keep = r.string();
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(keep, ec);
  });
  return ws.string();
}

std::string Gunzip(const std::string& in) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) std::abort();
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[65536];
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    KILN_FUZZ_CHECK(rc == Z_OK || rc == Z_STREAM_END);
    out.append(buf, sizeof buf - z.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

void CheckName(std::string name) {
  while (!name.empty() && name.back() == '/') name.pop_back();
  KILN_FUZZ_CHECK(kiln::IsNormalizedRelativePath(name));
}

// Walks the tar headers; checks every entry name (ustar name/prefix or PAX path).
void CheckTar(const std::string& tar) {
  KILN_FUZZ_CHECK(tar.size() % 512 == 0);
  std::string pax_path;
  for (size_t off = 0; off + 512 <= tar.size();) {
    const char* h = tar.data() + off;
    if (h[0] == '\0') break;  // end-of-archive blocks
    uint64_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    char type = h[156];
    std::string body = tar.substr(off + 512, size);
    if (type == 'x') {
      for (size_t p = 0; p < body.size();) {
        size_t len = std::strtoull(body.c_str() + p, nullptr, 10);
        KILN_FUZZ_CHECK(len > 0 && p + len <= body.size());
        std::string rec = body.substr(p, len);
        size_t sp = rec.find(' ');
        if (rec.compare(sp + 1, 5, "path=") == 0)
          pax_path = rec.substr(sp + 6, rec.size() - sp - 7);
        p += len;
      }
    } else {
      std::string name(h, strnlen(h, 100));
      std::string prefix(h + 345, strnlen(h + 345, 155));
      if (!prefix.empty()) name = prefix + "/" + name;
      CheckName(pax_path.empty() ? name : pax_path);
      pax_path.clear();
    }
    off += 512 + (size + 511) / 512 * 512;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string workspace = MakeFixture();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<kiln::LayerEntry> entries;
  for (std::string_view line : kiln::fuzz::Split(in, "\n", 8)) {
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      entries.push_back({std::string(line), "/out"});
    } else {
      entries.push_back({std::string(line.substr(0, tab)), std::string(line.substr(tab + 1))});
    }
  }
  kiln::LayerLimits limits;
  limits.max_entries = 64;
  limits.max_total_bytes = 1 << 20;
  kiln::LayerBlob blob;
  kiln::Status s = kiln::WriteLayer(workspace, entries, 1, &blob, limits);
  if (!s.ok()) {
    KILN_FUZZ_CHECK(blob.data.empty() && blob.digest.empty());
    return 0;
  }
  for (const kiln::LayerEntry& e : entries) {
    std::string from = e.from;
    if (from.size() > 1 && from.back() == '/') from.pop_back();
    KILN_FUZZ_CHECK(kiln::IsNormalizedRelativePath(from));
    KILN_FUZZ_CHECK(kiln::IsNormalizedAbsolutePath(e.to) && e.to != "/");
  }
  KILN_FUZZ_CHECK(blob.size == blob.data.size());
  KILN_FUZZ_CHECK(blob.digest.rfind("sha256:", 0) == 0 && blob.digest.size() == 71);
  std::string tar = Gunzip(blob.data);
  KILN_FUZZ_CHECK(tar.find(kSecret) == std::string::npos);
  CheckTar(tar);
  return 0;
}
