#include "deploy/rootfs_extractor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>

#include "deploy/rootfs_rules.h"
#include "deploy/tar_reader.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Status Errno(const std::string& what, const std::string& rel) {
  return Status::Internal(what + " /" + rel + ": " + std::strerror(errno));
}

class Applier {
 public:
  Applier(const std::string& root, ExtractStats* stats, const ExtractLimits& limits)
      : root_(root), stats_(stats), limits_(limits) {}

  Status Run(TarReader* tar) {
    for (;;) {
      TarEntry e;
      bool end = false;
      if (Status st = tar->Next(&e, &end); !st.ok()) return st;
      if (end) return Status::Ok();
      if (++stats_->entries > limits_.max_entries)
        return Status::InvalidArgument("image has more than " +
                                       std::to_string(limits_.max_entries) + " entries");
      if (Status st = Apply(tar, e); !st.ok()) return st;
    }
  }

  /// Resolves `clean` (following a final symlink too) and makes it a directory with parents.
  Status MakeDir(const std::string& clean, std::string* rel) {
    if (Status st = ResolveInRoot(clean, true, Lookup(), rel); !st.ok()) return st;
    if (rel->empty()) return Status::Ok();
    if (Status st = Place(*rel + "/x", rel, true); !st.ok()) return st;  // parents of "x" = the dir
    rel->resize(rel->size() - 2);
    return Status::Ok();
  }

 private:
  std::string Abs(const std::string& rel) const { return rel.empty() ? root_ : root_ + "/" + rel; }

  SymlinkLookup Lookup() const {
    return [this](const std::string& rel) -> std::optional<std::string> {
      struct stat sb;
      std::string p = Abs(rel);
      if (lstat(p.c_str(), &sb) != 0 || !S_ISLNK(sb.st_mode)) return std::nullopt;
      std::string buf(4096, '\0');
      ssize_t n = readlink(p.c_str(), buf.data(), buf.size());
      if (n < 0) return std::nullopt;
      buf.resize(static_cast<size_t>(n));
      return buf;
    };
  }

  // Resolves `clean` inside the root; the result's parents are real directories afterwards.
  Status Place(const std::string& clean, std::string* resolved, bool make_parents) {
    if (Status st = ResolveInRoot(clean, false, Lookup(), resolved); !st.ok()) return st;
    if (!make_parents) return Status::Ok();
    size_t pos = 0;
    while ((pos = resolved->find('/', pos)) != std::string::npos) {
      std::string prefix = resolved->substr(0, pos++);
      struct stat sb;
      std::string p = Abs(prefix);
      if (lstat(p.c_str(), &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
          return Status::InvalidArgument("layer: /" + prefix + " is not a directory");
        continue;
      }
      if (mkdir(p.c_str(), 0755) != 0) return Errno("mkdir", prefix);
    }
    return Status::Ok();
  }

  // Removes whatever is at `rel` (not following a final symlink), unless it is a directory and
  // `keep_dir`. Sets *is_dir when a directory was kept.
  Status Clear(const std::string& rel, bool keep_dir, bool* is_dir) {
    *is_dir = false;
    if (rel.empty()) return Status::InvalidArgument("layer: entry replaces the root");
    struct stat sb;
    std::string p = Abs(rel);
    if (lstat(p.c_str(), &sb) != 0) return Status::Ok();
    if (S_ISDIR(sb.st_mode)) {
      if (keep_dir) {
        *is_dir = true;
        return Status::Ok();
      }
      std::error_code ec;
      fs::remove_all(p, ec);
      if (ec) return Status::Internal("remove /" + rel + ": " + ec.message());
      return Status::Ok();
    }
    if (unlink(p.c_str()) != 0) return Errno("unlink", rel);
    return Status::Ok();
  }

  void Own(const std::string& rel, const TarEntry& e) {
    // Best effort: ownership as stored (the sandbox maps only root; others show as nobody).
    (void)!lchown(Abs(rel).c_str(), static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid));
  }

  Status Apply(TarReader* tar, const TarEntry& e) {
    std::string clean;
    bool hostile = false;
    if (Status st = CleanEntryPath(e.name, &clean, &hostile); !st.ok()) return st;
    if (hostile) ++stats_->neutralized;
    Whiteout wh = ClassifyWhiteout(clean);
    switch (wh.kind) {
      case Whiteout::Kind::kIgnore:
        ++stats_->skipped;
        return Status::Ok();
      case Whiteout::Kind::kFile:
        return RemoveLower(wh.target);
      case Whiteout::Kind::kOpaque:
        return Opaque(wh.target);
      case Whiteout::Kind::kNone:
        break;
    }
    EntryAction action = ActionFor(e.type);
    if (action == EntryAction::kSkip || (clean.empty() && action != EntryAction::kDir)) {
      ++stats_->skipped;
      return Status::Ok();
    }
    if (clean.empty()) return Status::Ok();  // the root directory itself keeps its mode
    std::string rel;
    if (Status st = Place(clean, &rel, true); !st.ok()) return st;
    if (rel.empty()) {  // a symlink chain that resolved to the root
      ++stats_->skipped;
      return Status::Ok();
    }
    for (size_t i = rel.find('/'); i != std::string::npos; i = rel.find('/', i + 1))
      created_.insert(rel.substr(0, i));
    created_.insert(rel);
    bool is_dir = false;
    if (Status st = Clear(rel, action == EntryAction::kDir, &is_dir); !st.ok()) return st;
    std::string p = Abs(rel);
    switch (action) {
      case EntryAction::kDir:
        if (!is_dir && mkdir(p.c_str(), 0755) != 0) return Errno("mkdir", rel);
        if (chmod(p.c_str(), SanitizeMode(e.mode)) != 0) return Errno("chmod", rel);
        Own(rel, e);
        return Status::Ok();
      case EntryAction::kSymlink:
        if (e.linkname.find('\0') != std::string::npos || e.linkname.size() > 4096)
          return Status::InvalidArgument("layer: bad symlink target for /" + clean);
        if (symlink(e.linkname.c_str(), p.c_str()) != 0) return Errno("symlink", rel);
        Own(rel, e);
        return Status::Ok();
      case EntryAction::kHardlink:
        return HardLink(e, rel);
      case EntryAction::kFile:
        return WriteFile(tar, e, rel);
      case EntryAction::kSkip:
        break;
    }
    return Status::Ok();
  }

  Status WriteFile(TarReader* tar, const TarEntry& e, const std::string& rel) {
    if (stats_->bytes + e.size > limits_.max_total_bytes) {
      stats_->too_large = true;
      return Status::InvalidArgument("the image's files exceed the size limit of " +
                                     std::to_string(limits_.max_total_bytes >> 20) + " MiB (" +
                                     std::to_string(limits_.max_total_bytes) + " bytes)");
    }
    int fd = open(Abs(rel).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return Errno("create", rel);
    std::unique_ptr<char[]> buf(new char[1 << 16]);
    Status st;
    for (;;) {
      size_t got = 0;
      st = tar->ReadData(buf.get(), 1 << 16, &got);
      if (!st.ok() || got == 0) break;
      for (size_t off = 0; off < got;) {
        ssize_t w = write(fd, buf.get() + off, got - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          st = Errno("write", rel);
          break;
        }
        off += static_cast<size_t>(w);
      }
      if (!st.ok()) break;
      stats_->bytes += got;
    }
    if (st.ok() && fchmod(fd, SanitizeMode(e.mode)) != 0) st = Errno("chmod", rel);
    if (st.ok()) (void)!fchown(fd, static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid));
    close(fd);
    return st;
  }

  Status HardLink(const TarEntry& e, const std::string& rel) {
    std::string clean, src;
    if (Status st = CleanEntryPath(e.linkname, &clean); !st.ok()) return st;
    if (Status st = ResolveInRoot(clean, false, Lookup(), &src); !st.ok()) return st;
    struct stat sb;
    if (src.empty() || lstat(Abs(src).c_str(), &sb) != 0 || S_ISDIR(sb.st_mode))
      return Status::InvalidArgument("layer: hard link /" + rel + " to a missing or invalid entry");
    if (link(Abs(src).c_str(), Abs(rel).c_str()) != 0) return Errno("link", rel);
    return Status::Ok();
  }

  Status RemoveLower(const std::string& target) {
    std::string rel;
    if (Status st = Place(target, &rel, false); !st.ok()) return st;
    if (rel.empty()) return Status::Ok();
    // Only when the parent really is a directory inside the root (Place resolved it there).
    bool kept = false;
    return Clear(rel, false, &kept);
  }

  Status Opaque(const std::string& dir) {
    std::string rel;
    if (Status st = ResolveInRoot(dir, true, Lookup(), &rel); !st.ok()) return st;
    std::string p = Abs(rel);
    struct stat sb;
    if (lstat(p.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return Status::Ok();
    std::error_code ec;
    for (fs::directory_iterator it(p, ec), endit; !ec && it != endit; it.increment(ec)) {
      std::string child = (rel.empty() ? "" : rel + "/") + it->path().filename().string();
      if (created_.count(child)) continue;  // this layer's own entries stay
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      if (rm) return Status::Internal("remove /" + child + ": " + rm.message());
    }
    if (ec) return Status::Internal("list /" + rel + ": " + ec.message());
    return Status::Ok();
  }

  const std::string root_;
  ExtractStats* stats_;
  const ExtractLimits& limits_;
  std::set<std::string> created_;  // resolved paths this layer created (kept by opaque dirs)
};

}  // namespace

Status ApplyLayer(const std::string& root, std::string_view blob, ExtractStats* stats,
                  const ExtractLimits& limits) {
  std::unique_ptr<ByteSource> src;
  if (Status st = MakeLayerSource(blob, &src); !st.ok()) return st;
  TarReader tar(src.get());
  Applier a(root, stats, limits);
  return a.Run(&tar);
}

Status EnsureDirectoryInRoot(const std::string& root, const std::string& abs_path) {
  // A directory entry through the applier: the same resolution and checks as a layer's.
  std::string clean;
  if (Status st = CleanEntryPath(abs_path, &clean); !st.ok()) return st;
  if (clean.empty()) return Status::Ok();
  std::string rel;
  ExtractStats stats;
  ExtractLimits limits;
  Applier a(root, &stats, limits);
  if (Status st = a.MakeDir(clean, &rel); !st.ok()) return st;
  return Status::Ok();
}

Status PrepareMountPoints(const std::string& root) {
  for (const char* name : {"proc", "dev", "tmp"}) {
    std::string p = root + "/" + name;
    struct stat sb;
    if (lstat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) continue;
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) return Status::Internal("remove /" + std::string(name) + ": " + ec.message());
    if (mkdir(p.c_str(), 0755) != 0) return Errno("mkdir", name);
    if (std::string(name) == "tmp") chmod(p.c_str(), 01777);
  }
  return Status::Ok();
}

}  // namespace kiln
