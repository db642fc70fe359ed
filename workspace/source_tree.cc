#include "workspace/source_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/sha256.h"

namespace kiln {
namespace {

// Record format, fed to one SHA-256 (paths are NUL-terminated, so records cannot be confused):
//   "kiln-source-tree-v1\n"
//   "D " <path> "\0"                              directory
//   "F " <x|-> " " <path> "\0" <sha256 hex of contents>  regular file (x: any exec bit set)
//   "L " <path> "\0" <target> "\0"                 symlink
class Hasher {
 public:
  Status HashDir(int dir_fd, const std::string& rel) {
    DIR* d = ::fdopendir(dir_fd);
    if (!d) {
      ::close(dir_fd);
      return Error("cannot read directory", rel);
    }
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n != ".git") names.push_back(std::move(n));
    }
    std::sort(names.begin(), names.end());
    Status s;
    for (const auto& name : names) {
      s = HashEntry(::dirfd(d), name, rel.empty() ? name : rel + "/" + name);
      if (!s.ok()) break;
    }
    ::closedir(d);  // closes dir_fd
    return s;
  }

  std::string Finish() { return sha_.HexDigest(); }
  void Begin() { sha_.Update("kiln-source-tree-v1\n"); }

 private:
  Status HashEntry(int parent_fd, const std::string& name, const std::string& rel) {
    struct stat st;
    if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return Error("cannot stat", rel);
    if (S_ISDIR(st.st_mode)) {
      Record("D ", rel);
      int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return Error("cannot open directory", rel);
      return HashDir(fd, rel);
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlinkat(parent_fd, name.c_str(), target.data(), target.size());
      if (n < 0) return Error("cannot read symlink", rel);
      target.resize(static_cast<size_t>(n));
      Record("L ", rel);
      sha_.Update(target);
      sha_.Update("\0", 1);
      return Status::Ok();
    }
    if (S_ISREG(st.st_mode)) return HashFile(parent_fd, name, rel, st);
    return Status::InvalidArgument("source tree entry '" + rel +
                                   "' is not a regular file, directory or symlink");
  }

  Status HashFile(int parent_fd, const std::string& name, const std::string& rel,
                  const struct stat& st) {
    int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Error("cannot open", rel);
    // Contents are hashed separately (streamed), so the record has a fixed shape.
    Sha256 content;
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        return Error("cannot read", rel);
      }
      content.Update(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    Record((st.st_mode & 0111) ? "F x " : "F - ", rel);
    sha_.Update(content.HexDigest());
    return Status::Ok();
  }

  void Record(const char* tag, const std::string& rel) {
    sha_.Update(tag);
    sha_.Update(rel);
    sha_.Update("\0", 1);
  }

  static Status Error(const char* what, const std::string& rel) {
    return Status::Internal(std::string(what) + " '" + (rel.empty() ? "." : rel) +
                            "': " + strerror(errno));
  }

  Sha256 sha_;
};

}  // namespace

Status SourceTree::HashDirectory(const std::string& dir, std::string* hex) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::InvalidArgument("source '" + dir +
                                   "' is not a readable directory: " + strerror(errno));
  Hasher h;
  h.Begin();
  Status s = h.HashDir(fd, "");
  if (!s.ok()) return s;
  *hex = h.Finish();
  return Status::Ok();
}

}  // namespace kiln
