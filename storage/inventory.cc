#include "storage/inventory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/file_util.h"
#include "state/state_store.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

struct Usage {
  int64_t bytes = 0;
  int64_t newest_mtime_ms = 0;
};

int64_t MtimeMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

Usage Measure(const std::string& path) {
  Usage u;
  struct stat top;
  if (::lstat(path.c_str(), &top) != 0) return u;
  u.bytes = static_cast<int64_t>(top.st_blocks) * 512;
  u.newest_mtime_ms = MtimeMs(top);
  if (!S_ISDIR(top.st_mode)) return u;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    if (st.st_dev != top.st_dev) {  // a mount point inside the tree: not ours to count
      if (S_ISDIR(st.st_mode)) it.disable_recursion_pending();
      continue;
    }
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second)
      continue;
    u.bytes += static_cast<int64_t>(st.st_blocks) * 512;
    u.newest_mtime_ms = std::max(u.newest_mtime_ms, MtimeMs(st));
  }
  return u;
}

// Issue 19: the writer's pid of a temporary file kiln writes beside the entries of a cache
// directory and renames into place: ".tmp-<pid>-<n>" (layered outputs), "<hex>.tmp<pid>" or
// "<hex>.tmp-<pid>-<n>" (local deploy blobs, WriteFileAtomic); 0 when `name` is not one.
pid_t TempWriter(const std::string& name) {
  if (pid_t pid = AtomicTempWriter(name)) return pid;
  size_t at = std::string::npos;
  if (name.rfind(".tmp-", 0) == 0)
    at = 5;
  else if (size_t t = name.rfind(".tmp"); t != std::string::npos && t > 0)
    at = t + 4;
  if (at == std::string::npos || at >= name.size() ||
      !isdigit(static_cast<unsigned char>(name[at])))
    return 0;
  long pid = std::strtol(name.c_str() + at, nullptr, 10);
  return pid > 0 && pid < (1L << 30) ? static_cast<pid_t>(pid) : 0;
}

bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

bool IsDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(p, ec));
}

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

void Add(std::vector<StorageItem>* items, const std::string& state_dir, StorageKind kind,
         const std::string& domain, const std::string& candidate, const std::string& rel,
         std::vector<std::string> images = {}) {
  std::string path = state_dir + "/" + rel;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  Usage u = Measure(path);
  StorageItem it;
  it.kind = kind;
  it.domain = domain;
  it.candidate = candidate;
  it.id = rel;
  it.bytes = u.bytes;
  it.last_used_ms = u.newest_mtime_ms;
  it.images = std::move(images);
  items->push_back(std::move(it));
}

std::string ReadSmall(const fs::path& p) {
  std::string text;
  ReadFile(p.string(), &text);
  return text.substr(0, 1 << 16);
}

}  // namespace

int64_t DiskUsage(const std::string& path) { return Measure(path).bytes; }

std::vector<StorageItem> ScanInventory(const std::string& state_dir, const Config& config,
                                       std::set<std::string>* always_leased) {
  std::vector<StorageItem> items;
  for (const auto& [d, dc] : config.domains) {
    const std::string base = "domains/" + d;
    const fs::path droot = fs::path(state_dir) / base;
    if (!IsDir(droot)) continue;
    for (const auto& c : Entries(droot / "candidates")) {
      std::string cbase = base + "/candidates/" + c;
      if (!IsDir(fs::path(state_dir) / cbase)) continue;
      Add(&items, state_dir, StorageKind::kCandidateStorage, d, c, cbase + "/storage");
      Add(&items, state_dir, StorageKind::kWorkspace, d, c, cbase + "/src");
    }
    // A cache entry being written (its temporary file, its writer alive) is not counted and
    // never collected; one left by a kiln process that is gone (kill -9) is a leftover.
    auto cache_entry = [&](StorageKind kind, const std::string& rel, const std::string& name) {
      pid_t writer = TempWriter(name);
      if (writer && ProcessExists(writer)) return;
      Add(&items, state_dir, kind, d, "", rel);
      if (writer && !items.empty() && items.back().id == rel) items.back().leftover = true;
    };
    for (const auto& e : Entries(droot / "cache" / "outputs"))
      cache_entry(StorageKind::kLayeredOutput, base + "/cache/outputs/" + e, e);
    Add(&items, state_dir, StorageKind::kBuildCache, d, "", base + "/cache/rootless");
    for (const auto& e : Entries(droot / "cache" / "layered")) {
      Add(&items, state_dir, StorageKind::kBuildCache, d, "", base + "/cache/layered/" + e);
      if (!items.empty() && items.back().id == base + "/cache/layered/" + e)
        items.back().trimmable = true;  // a compiler cache: its old files may go
    }
    // Issue 19: the local target records the layers of each image it fetched
    // (deploy/images/<hex>.json); a blob carries the images that use it, so the blobs of the
    // deployed and latest images are protected, and a record goes with its image.
    std::map<std::string, std::vector<std::string>> users;  // blob hex -> image digests
    for (const auto& e : Entries(droot / "deploy" / "images")) {
      const std::string hex = e.size() == 69 ? e.substr(0, 64) : "";
      if (hex.empty() || e.compare(64, 5, ".json") != 0) continue;
      const std::string image = "sha256:" + hex;
      auto j = nlohmann::json::parse(ReadSmall(droot / "deploy" / "images" / e), nullptr, false);
      if (j.is_object() && j.contains("layers") && j["layers"].is_array())
        for (const auto& l : j["layers"])
          if (l.is_string() && l.get<std::string>().rfind("sha256:", 0) == 0)
            users[l.get<std::string>().substr(7)].push_back(image);
      Add(&items, state_dir, StorageKind::kDeployBlob, d, "", base + "/deploy/images/" + e,
          {image});
    }
    for (const auto& e : Entries(droot / "deploy" / "blobs" / "sha256")) {
      cache_entry(StorageKind::kDeployBlob, base + "/deploy/blobs/sha256/" + e, e);
      auto u = users.find(e);
      if (u != users.end() && !items.empty() &&
          items.back().id == base + "/deploy/blobs/sha256/" + e)
        items.back().images = u->second;
    }
    for (const auto& e : Entries(droot / "deploy" / "rootfs")) {
      std::string rel = base + "/deploy/rootfs/" + e;
      Add(&items, state_dir, StorageKind::kDeployRootfs, d, "", rel);
      if (always_leased) always_leased->insert(rel);
    }
    Add(&items, state_dir, StorageKind::kGitRepo, d, "", base + "/repo.git");
  }
  // Build-key cache entries: the domain is the one whose image repository the entry names.
  for (const auto& name : Entries(fs::path(state_dir) / "keys")) {
    if (name.size() != 69 || name.compare(64, 5, ".json") != 0) continue;
    auto file = StateStore::ParseBuildKeyFile(ReadSmall(fs::path(state_dir) / "keys" / name));
    std::string ref = file ? file->outcome.image_ref : "";
    std::string digest = file ? file->outcome.digest : "";
    std::string domain;
    for (const auto& [d, dc] : config.domains) {
      std::string needle = "/" + dc.image.repository + "@";
      if (ref.find(needle) != std::string::npos) domain = d;
    }
    std::vector<std::string> images;
    if (!digest.empty()) images.push_back(digest);
    Add(&items, state_dir, StorageKind::kKeyEntry, domain, "", "keys/" + name, images);
  }
  Add(&items, state_dir, StorageKind::kJournal, "", "", "state");
  return items;
}

}  // namespace kiln
