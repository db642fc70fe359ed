#include "state/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kiln {
namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fsync", path_, errno);
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      return ErrnoStatus("truncate", path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return Status::Ok();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixLockHandle : public LockHandle {
 public:
  explicit PosixLockHandle(int fd) : fd_(fd) {}
  ~PosixLockHandle() override { ::close(fd_); }  // closing releases the flock

 private:
  int fd_;
};

class PosixFileSystem : public FileSystem {
 public:
  Status ReadFile(const std::string& path, std::string* out) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    out->clear();
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out->reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        return ErrnoStatus("read", path, err);
      }
      if (n == 0) break;
      out->append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return Status::Ok();
  }

  Status OpenAppendable(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    return Open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, out);
  }

  Status OpenTruncated(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    return Open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, out);
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return ErrnoStatus("rename", from + " to " + to, errno);
    return Status::Ok();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("remove", path, errno);
    return Status::Ok();
  }

  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", dir, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoStatus("fsync", dir, err);
    return Status::Ok();
  }

  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    names->clear();
    DIR* d = ::opendir(dir.c_str());
    if (!d) return ErrnoStatus("opendir", dir, errno);
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names->push_back(std::move(n));
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) return ErrnoStatus("readdir", dir, err);
    return Status::Ok();
  }

  Status CreateDirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return ErrnoStatus("mkdir", dir, ec.value());
    return Status::Ok();
  }

  Status Lock(const std::string& path, std::unique_ptr<LockHandle>* out) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::FailedPrecondition("state directory is in use by another process (lock " +
                                          path + ")");
      }
      return ErrnoStatus("flock", path, err);
    }
    *out = std::make_unique<PosixLockHandle>(fd);
    return Status::Ok();
  }

 private:
  Status Open(const std::string& path, int flags, std::unique_ptr<WritableFile>* out) {
    int fd = ::open(path.c_str(), flags, 0600);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    *out = std::make_unique<PosixWritableFile>(path, fd);
    return Status::Ok();
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static FileSystem* fs = new PosixFileSystem();
  return fs;
}

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(m);
  if (err == ENOENT) return Status::NotFound(m);
  return Status::Internal(m);
}

}  // namespace kiln
