#include "common/safe_remove.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kiln {
namespace {

struct Walk {
  Status first;
  int max_depth = 256;
  void Fail(Status st) {
    if (first.ok()) first = std::move(st);
  }
};

// Removes every entry of the directory open as `dfd` (owned: closed here). `dev` is the
// filesystem the tree lives on.
void EmptyDir(int dfd, dev_t dev, int depth, const std::string& where, Walk* w) {
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    w->Fail(Status::Internal("cannot read directory " + where + ": " + std::strerror(errno)));
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  for (const std::string& n : names) {
    struct stat st;
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone already
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dfd, n.c_str(), 0) != 0 && errno != ENOENT)
        w->Fail(Status::Internal("cannot remove " + where + "/" + n + ": " + std::strerror(errno)));
      continue;
    }
    if (st.st_dev != dev) {
      w->Fail(Status::Internal(where + "/" + n + " is a mount point; left in place"));
      continue;
    }
    if (depth + 1 > w->max_depth) {
      w->Fail(Status::ResourceExhausted(where + " is nested deeper than " +
                                        std::to_string(w->max_depth) + " directories"));
      continue;
    }
    // O_NOFOLLOW: if a symlink replaced the directory since fstatat, the open fails.
    int cfd = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0) {
      if (errno == ELOOP || errno == ENOTDIR) {
        if (::unlinkat(dfd, n.c_str(), 0) != 0 && errno != ENOENT)
          w->Fail(
              Status::Internal("cannot remove " + where + "/" + n + ": " + std::strerror(errno)));
      } else if (errno != ENOENT) {
        w->Fail(Status::Internal("cannot open " + where + "/" + n + ": " + std::strerror(errno)));
      }
      continue;
    }
    struct stat cst;
    if (::fstat(cfd, &cst) != 0 || cst.st_dev != dev || !S_ISDIR(cst.st_mode)) {
      ::close(cfd);
      w->Fail(Status::Internal(where + "/" + n + " changed while being removed; left in place"));
      continue;
    }
    EmptyDir(cfd, dev, depth + 1, where + "/" + n, w);
    if (::unlinkat(dfd, n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      w->Fail(Status::Internal("cannot remove " + where + "/" + n + ": " + std::strerror(errno)));
  }
  ::closedir(d);  // closes dfd
}

}  // namespace

Status RemoveTreeBeneath(const std::string& root, const std::string& rel, int max_depth) {
  if (root.empty() || rel.empty() || rel.front() == '/')
    return Status::InvalidArgument("RemoveTreeBeneath needs a root and a relative path");
  std::vector<std::string> parts;
  for (size_t start = 0; start <= rel.size();) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (part == "..") return Status::InvalidArgument("path '" + rel + "' leaves its root");
    if (!part.empty() && part != ".") parts.push_back(part);
    start = end + 1;
  }
  if (parts.empty()) return Status::InvalidArgument("path '" + rel + "' names the root itself");
  int dfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Internal("cannot open " + root + ": " + std::strerror(errno));
  }
  std::string where = root;
  // Intermediate components: never through a symlink.
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int next = ::openat(dfd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    ::close(dfd);
    where += "/" + parts[i];
    if (next < 0) {
      if (err == ENOENT) return Status::Ok();
      if (err == ELOOP || err == ENOTDIR)
        return Status::Internal(where + " is not a directory (a symlink?); nothing removed");
      return Status::Internal("cannot open " + where + ": " + std::strerror(err));
    }
    dfd = next;
  }
  const std::string& name = parts.back();
  where += "/" + name;
  struct stat st;
  if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    int err = errno;
    ::close(dfd);
    if (err == ENOENT) return Status::Ok();
    return Status::Internal("cannot stat " + where + ": " + std::strerror(err));
  }
  Walk w;
  w.max_depth = max_depth;
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dfd, name.c_str(), 0) != 0 && errno != ENOENT)
      w.Fail(Status::Internal("cannot remove " + where + ": " + std::strerror(errno)));
    ::close(dfd);
    return w.first;
  }
  int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP || err == ENOTDIR) {  // became a symlink: remove the link only
      if (::unlinkat(dfd, name.c_str(), 0) != 0 && errno != ENOENT)
        w.Fail(Status::Internal("cannot remove " + where + ": " + std::strerror(errno)));
    } else if (err != ENOENT) {
      w.Fail(Status::Internal("cannot open " + where + ": " + std::strerror(err)));
    }
    ::close(dfd);
    return w.first;
  }
  struct stat fst;
  if (::fstat(fd, &fst) != 0) {
    ::close(fd);
    ::close(dfd);
    return Status::Internal("cannot stat " + where + ": " + std::strerror(errno));
  }
  EmptyDir(fd, fst.st_dev, 0, where, &w);
  if (::unlinkat(dfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    w.Fail(Status::Internal("cannot remove " + where + ": " + std::strerror(errno)));
  ::close(dfd);
  return w.first;
}

Status RemoveTreeNoFollow(const std::string& path, int max_depth) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name.empty() || name == "." || name == "..")
    return Status::InvalidArgument("cannot remove '" + path + "'");
  return RemoveTreeBeneath(parent, name, max_depth);
}

}  // namespace kiln
