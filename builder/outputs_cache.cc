#include "builder/outputs_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/sha256.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {
constexpr char kMagic[] = "kiln-layer v1\n";
constexpr char kSuffix[] = ".layer";

bool ReadAll(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    ssize_t r = ::read(fd, &(*out)[done], out->size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return done == out->size();
}

// Issue 15: writes to a descriptor.
class FdSink : public ByteSink {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  Status Write(const char* data, size_t n) override {
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::write(fd_, data + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return Status::Internal(std::string("cannot write layer blob: ") + std::strerror(errno));
      done += static_cast<size_t>(w);
    }
    return Status::Ok();
  }

 private:
  int fd_;
};

// Streams [offset, end of file) of `fd` through sha256.
bool HashFrom(int fd, uint64_t offset, std::string* digest, uint64_t* size) {
  std::unique_ptr<char[]> buf(new char[256 * 1024]);
  Sha256 sha;
  uint64_t pos = offset;
  for (;;) {
    ssize_t r = ::pread(fd, buf.get(), 256 * 1024, static_cast<off_t>(pos));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) break;
    sha.Update(buf.get(), static_cast<size_t>(r));
    pos += static_cast<uint64_t>(r);
  }
  *digest = "sha256:" + sha.HexDigest();
  *size = pos - offset;
  return true;
}

constexpr size_t kHeaderBytes = sizeof(kMagic) - 1 + 71 + 1;  // magic, digest, '\n'
}  // namespace

Status WriteTempBlob(const std::string& dir, const std::string& diff_id,
                     const BlobProducer& produce, LayerBlob* out) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return Status::Internal("cannot create a temporary layer file: " +
                            std::string(std::strerror(errno)));
  auto file = std::make_shared<BlobFile>(fd, 0, 0);  // closes fd on every path
  FdSink sink(fd);
  LayerBlob blob;
  uint64_t size = 0;
  Status st = produce(&sink, &blob.digest, &size);
  if (!st.ok()) return st;
  blob.file = std::make_shared<BlobFile>(::dup(fd), 0, size);
  if (blob.file->fd() < 0) return Status::Internal("cannot keep the temporary layer file");
  blob.diff_id = diff_id;
  blob.size = static_cast<size_t>(size);
  *out = std::move(blob);
  return Status::Ok();
}

OutputsCache::OutputsCache(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string OutputsCache::Path(const std::string& diff_id) const {
  return dir_ + "/" + diff_id.substr(7) + kSuffix;
}

bool OutputsCache::Lookup(const std::string& diff_id, LayerBlob* out) {
  if (!IsSha256Digest(diff_id)) return false;
  const std::string path = Path(diff_id);
  std::string file;
  if (!ReadAll(path, &file)) return false;
  const size_t magic = sizeof(kMagic) - 1;
  const size_t nl = file.find('\n', magic);
  std::string digest = nl == std::string::npos ? "" : file.substr(magic, nl - magic);
  if (file.compare(0, magic, kMagic) != 0 || !IsSha256Digest(digest) ||
      "sha256:" + Sha256Hex(std::string_view(file).substr(nl + 1)) != digest) {
    std::error_code ec;
    fs::remove(path, ec);  // corrupt or foreign: drop it
    return false;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // LRU: now
  LayerBlob blob;
  blob.data = file.substr(nl + 1);
  blob.digest = digest;
  blob.diff_id = diff_id;
  blob.size = blob.data.size();
  *out = std::move(blob);
  return true;
}

Status OutputsCache::Store(const LayerBlob& blob) {
  if (!IsSha256Digest(blob.diff_id) || !IsSha256Digest(blob.digest))
    return Status::InvalidArgument("layer without digest/diff_id");
  if (blob.data.size() + 128 > max_bytes_) return Status::Ok();
  std::lock_guard<std::mutex> l(mu_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::Internal("cannot create " + dir_ + ": " + ec.message());
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
  static std::atomic<unsigned> seq{0};
  const std::string tmp =
      dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  std::string head = std::string(kMagic) + blob.digest + "\n";
  bool ok = true;
  const std::string* parts[] = {&head, &blob.data};
  for (const std::string* part : parts) {
    size_t done = 0;
    while (ok && done < part->size()) {
      ssize_t w = ::write(fd, part->data() + done, part->size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        ok = false;
      else
        done += static_cast<size_t>(w);
    }
  }
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), Path(blob.diff_id).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::Internal("cannot store layer in " + dir_);
  }
  EvictLocked();
  return Status::Ok();
}

bool OutputsCache::LookupFile(const std::string& diff_id, LayerBlob* out) {
  if (!IsSha256Digest(diff_id)) return false;
  const std::string path = Path(diff_id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  auto file = std::make_shared<BlobFile>(fd, 0, 0);  // owns fd
  struct stat st;
  char head[kHeaderBytes];
  std::string digest, actual;
  uint64_t size = 0;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head);
  if (ok) {
    const size_t magic = sizeof(kMagic) - 1;
    digest.assign(head + magic, 71);
    ok = std::memcmp(head, kMagic, magic) == 0 && head[kHeaderBytes - 1] == '\n' &&
         IsSha256Digest(digest) && HashFrom(fd, kHeaderBytes, &actual, &size) && actual == digest;
  }
  if (!ok) {
    std::error_code ec;
    fs::remove(path, ec);  // corrupt or foreign: drop it
    return false;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // LRU: now
  LayerBlob blob;
  blob.file = std::make_shared<BlobFile>(::dup(fd), kHeaderBytes, size);
  if (blob.file->fd() < 0) return false;
  blob.digest = digest;
  blob.diff_id = diff_id;
  blob.size = static_cast<size_t>(size);
  *out = std::move(blob);
  return true;
}

Status OutputsCache::StoreStream(const std::string& diff_id, const BlobProducer& produce,
                                 LayerBlob* out) {
  if (!IsSha256Digest(diff_id)) return Status::InvalidArgument("layer without diff_id");
  std::error_code ec;
  {
    std::lock_guard<std::mutex> l(mu_);
    fs::create_directories(dir_, ec);
    if (ec) return Status::Internal("cannot create " + dir_ + ": " + ec.message());
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  static std::atomic<unsigned> seq{0};
  const std::string tmp =
      dir_ + "/.tmp-" + std::to_string(::getpid()) + "-s" + std::to_string(seq++);
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  auto owner = std::make_shared<BlobFile>(fd, 0, 0);  // closes fd on every path
  FdSink sink(fd);
  LayerBlob blob;
  uint64_t size = 0;
  Status st = sink.Write(std::string(kHeaderBytes, ' ').data(), kHeaderBytes);  // placeholder
  if (st.ok()) st = produce(&sink, &blob.digest, &size);
  const std::string head = std::string(kMagic) + blob.digest + "\n";
  if (st.ok() && (!IsSha256Digest(blob.digest) || head.size() != kHeaderBytes))
    st = Status::Internal("layer producer gave no digest");
  if (st.ok() && ::pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()))
    st = Status::Internal("cannot store layer in " + dir_);
  if (st.ok()) {
    blob.file = std::make_shared<BlobFile>(::dup(fd), kHeaderBytes, size);
    if (blob.file->fd() < 0) st = Status::Internal("cannot keep the layer file");
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  blob.diff_id = diff_id;
  blob.size = static_cast<size_t>(size);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (size + 128 > max_bytes_ || ::rename(tmp.c_str(), Path(diff_id).c_str()) != 0) {
      ::unlink(tmp.c_str());  // too large to keep (or no rename): the open file still serves
    } else {
      EvictLocked();
    }
  }
  *out = std::move(blob);
  return Status::Ok();
}

uint64_t OutputsCache::DiskBytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2) && it->path().extension() == kSuffix) total += it->file_size(e2);
  }
  return total;
}

void OutputsCache::EvictLocked() {
  struct Entry {
    std::string path;
    struct timespec mtime;
    uint64_t size;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string p = it->path().string();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (it->path().extension() != kSuffix) {
      // A temporary file older than an hour was left by a crash.
      if (it->path().filename().string().rfind(".tmp-", 0) == 0 &&
          st.st_mtime + 3600 < ::time(nullptr))
        ::unlink(p.c_str());
      continue;
    }
    entries.push_back({p, st.st_mtim, static_cast<uint64_t>(st.st_size)});
    total += static_cast<uint64_t>(st.st_size);
  }
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
    if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
    return a.path < b.path;
  });
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    if (::unlink(e.path.c_str()) == 0) total -= e.size;
  }
}

}  // namespace kiln
