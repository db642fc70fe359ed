#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/subprocess.h"

namespace kiln {
namespace {

Status WriteError(const std::string& what, const std::string& path, int err) {
  std::string m = "cannot " + what + " " + path + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted("no space left: " + m);
  return Status::Internal(m);
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  *out = ss.str();
  return true;
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Internal("cannot open directory " + dir + ": " + ErrnoText(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)
    return Status::Internal("cannot sync " + dir + ": " + ErrnoText(err));
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& content, mode_t mode,
                       Durability durability) {
  static std::atomic<uint64_t> seq{0};
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return WriteError("create", tmp, errno);
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return WriteError(what, path, err);
  };
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write", errno);
    off += static_cast<size_t>(n);
  }
  if (::fchmod(fd, mode) != 0) return fail("chmod", errno);
  if (durability == Durability::kDurable && ::fsync(fd) != 0) return fail("sync", errno);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return WriteError("write", path, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return WriteError("install", path, err);
  }
  if (durability == Durability::kAtomicOnly) return Status::Ok();
  return SyncDirectory(ParentOf(path));
}

pid_t AtomicTempWriter(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (at == std::string::npos || at == 0) return 0;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + at + 5, &end, 10);
  if (pid <= 0 || pid >= (1L << 30) || *end != '-' ||
      !std::isdigit(static_cast<unsigned char>(end[1])))
    return 0;
  return static_cast<pid_t>(pid);
}

size_t RemoveOrphanTempFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = AtomicTempWriter(name);
    if (pid == 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno == EPERM) continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

FileLock::FileLock(const std::string& path, int op) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    error_ = "cannot open " + path + ": " + ErrnoText(errno);
    return;
  }
  int rc;
  while ((rc = ::flock(fd_, op)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    error_ = errno == EWOULDBLOCK ? "busy" : "cannot lock " + path + ": " + ErrnoText(errno);
    ::close(fd_);
    fd_ = -1;
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace kiln
