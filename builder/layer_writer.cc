#include "builder/layer_writer.h"

#include "common/names.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "common/sha256.h"

namespace kiln {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kBufSize = 256 * 1024;

enum class Kind { kDir, kFile, kSymlink };

struct Node {
  Kind kind = Kind::kDir;
  std::string source;       // host path (files)
  std::string link_target;  // symlinks
  uint64_t size = 0;        // files
  bool exec = false;        // files
};

// Image path (no leading '/') -> node. std::map gives the sorted, deterministic order.
using NodeMap = std::map<std::string, Node>;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }


Status CheckFrom(std::string from, std::string* cleaned) {
  if (from.size() > 1 && from.back() == '/') from.pop_back();
  if (from.empty() || from[0] == '/') {
    return Status::InvalidArgument("output 'from' must be a relative path inside the workspace: '" +
                                   from + "'");
  }
  if (!IsNormalizedRelativePath(from)) {
    return Status::InvalidArgument(
        "output 'from' must be a normalized relative path without '.' or '..' segments: '" + from +
        "'");
  }
  *cleaned = from;
  return Status::Ok();
}

Status CheckTo(const std::string& to, std::string* image_path) {
  if (to.size() < 2 || to[0] != '/') {
    return Status::InvalidArgument("output 'to' must be an absolute path below '/': '" + to + "'");
  }
  std::string rel = to.substr(1);
  if (!IsNormalizedRelativePath(rel)) {
    return Status::InvalidArgument(
        "output 'to' must be a normalized absolute path without '.', '..' or empty segments: '" +
        to + "'");
  }
  *image_path = rel;
  return Status::Ok();
}

class Collector {
 public:
  explicit Collector(const LayerLimits& limits) : limits_(limits) {}

  Status Add(const std::string& path, Node node) {
    auto it = nodes_.find(path);
    if (it != nodes_.end()) {
      if (it->second.kind == Kind::kDir && node.kind == Kind::kDir) return Status::Ok();
      return Status::InvalidArgument("two outputs map to the same image path '/" + path + "'");
    }
    if (nodes_.size() >= limits_.max_entries) {
      return Status::InvalidArgument("outputs have more than " +
                                     std::to_string(limits_.max_entries) + " layer entries");
    }
    if (node.kind == Kind::kFile) {
      total_ += node.size;
      if (total_ > limits_.max_total_bytes) {
        return Status::InvalidArgument("outputs exceed the layer size limit of " +
                                       std::to_string(limits_.max_total_bytes) + " bytes");
      }
    }
    nodes_.emplace(path, std::move(node));
    return Status::Ok();
  }

  Status AddParents(const std::string& path) {
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      Status s = Add(path.substr(0, slash), Node{});
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // Adds the thing at host path `src` (already lstat'ed into `st`) at image path `dst`;
  // directories recursively. Symlinks are recorded, never followed.
  Status AddPath(const std::string& src, const struct stat& st, const std::string& dst, int depth) {
    if (depth > 128) return Status::InvalidArgument("output tree is nested too deeply: " + src);
    if (S_ISREG(st.st_mode)) {
      Node n;
      n.kind = Kind::kFile;
      n.source = src;
      n.size = static_cast<uint64_t>(st.st_size);
      n.exec = (st.st_mode & S_IXUSR) != 0;
      return Add(dst, std::move(n));
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(PATH_MAX, '\0');
      ssize_t len = ::readlink(src.c_str(), &target[0], target.size());
      if (len < 0) return Status::Internal(Errno("readlink " + src));
      target.resize(static_cast<size_t>(len));
      Node n;
      n.kind = Kind::kSymlink;
      n.link_target = target;
      return Add(dst, std::move(n));
    }
    if (S_ISDIR(st.st_mode)) {
      Status s = Add(dst, Node{});
      if (!s.ok()) return s;
      std::vector<std::string> names;
      {
        std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(src.c_str()), &::closedir);
        if (!dir) return Status::Internal(Errno("opendir " + src));
        errno = 0;
        while (struct dirent* e = ::readdir(dir.get())) {
          std::string name = e->d_name;
          if (name != "." && name != "..") names.push_back(std::move(name));
        }
        if (errno != 0) return Status::Internal(Errno("readdir " + src));
      }
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        std::string child = src + "/" + name;
        struct stat cst;
        if (::lstat(child.c_str(), &cst) != 0) return Status::Internal(Errno("lstat " + child));
        s = AddPath(child, cst, dst + "/" + name, depth + 1);
        if (!s.ok()) return s;
      }
      return Status::Ok();
    }
    return Status::InvalidArgument(
        "output contains an unsupported file type (device, FIFO or socket): " + src);
  }

  const NodeMap& nodes() const { return nodes_; }

 private:
  const LayerLimits& limits_;
  NodeMap nodes_;
  uint64_t total_ = 0;
};

// Streams tar bytes through SHA-256 (diff_id) and deflate (gzip) into `out`, hashing the
// compressed bytes (digest) in the same pass.
class TarGzStream {
 public:
  explicit TarGzStream(std::string* out) : out_(out) { std::memset(&zs_, 0, sizeof(zs_)); }
  ~TarGzStream() {
    if (initialized_) deflateEnd(&zs_);
  }

  Status Init(int level) {
    if (deflateInit2(&zs_, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return Status::Internal("deflateInit2 failed");
    }
    initialized_ = true;
    std::memset(&header_, 0, sizeof(header_));
    header_.time = 0;  // no mtime
    header_.os = 255;  // "unknown": constant whatever the host
    header_.name = Z_NULL;
    header_.comment = Z_NULL;
    header_.extra = Z_NULL;
    if (deflateSetHeader(&zs_, &header_) != Z_OK)
      return Status::Internal("deflateSetHeader failed");
    buf_.reserve(kBufSize);
    return Status::Ok();
  }

  Status Write(const char* data, size_t n) {
    tar_sha_.Update(data, n);
    while (n > 0) {
      size_t take = std::min(n, kBufSize - buf_.size());
      buf_.append(data, take);
      data += take;
      n -= take;
      if (buf_.size() == kBufSize) {
        Status s = Deflate(Z_NO_FLUSH);
        if (!s.ok()) return s;
      }
    }
    return Status::Ok();
  }
  Status Write(const std::string& s) { return Write(s.data(), s.size()); }

  Status Finish(std::string* diff_hex, std::string* digest_hex) {
    Status s = Deflate(Z_FINISH);
    if (!s.ok()) return s;
    *diff_hex = tar_sha_.HexDigest();
    *digest_hex = gz_sha_.HexDigest();
    return Status::Ok();
  }

 private:
  Status Deflate(int flush) {
    zs_.next_in = reinterpret_cast<Bytef*>(buf_.empty() ? nullptr : &buf_[0]);
    zs_.avail_in = static_cast<uInt>(buf_.size());
    char chunk[64 * 1024];
    while (true) {
      zs_.next_out = reinterpret_cast<Bytef*>(chunk);
      zs_.avail_out = sizeof(chunk);
      int rc = deflate(&zs_, flush);
      if (rc == Z_STREAM_ERROR) return Status::Internal("deflate failed");
      out_->append(chunk, sizeof(chunk) - zs_.avail_out);
      gz_sha_.Update(chunk, sizeof(chunk) - zs_.avail_out);
      if (flush == Z_FINISH) {
        if (rc == Z_STREAM_END) break;
      } else if (zs_.avail_in == 0 && zs_.avail_out != 0) {
        break;
      }
    }
    buf_.clear();
    return Status::Ok();
  }

  std::string* out_;
  z_stream zs_;
  gz_header header_;
  bool initialized_ = false;
  std::string buf_;
  Sha256 tar_sha_;  // uncompressed stream
  Sha256 gz_sha_;   // compressed stream
};

void PutOctal(char* field, size_t width, uint64_t value) {
  // width-1 octal digits, zero padded, then NUL.
  std::string digits(width - 1, '0');
  for (size_t i = width - 1; i > 0 && value > 0; --i) {
    digits[i - 1] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

void PutString(char* field, size_t width, const std::string& s) {
  std::memcpy(field, s.data(), std::min(width, s.size()));
}

std::string HeaderBlock(const std::string& name, char type, unsigned mode, uint64_t size,
                        const std::string& linkname) {
  std::string block(kBlock, '\0');
  char* h = &block[0];
  PutString(h + 0, 100, name);
  PutOctal(h + 100, 8, mode);
  PutOctal(h + 108, 8, 0);  // uid
  PutOctal(h + 116, 8, 0);  // gid
  PutOctal(h + 124, 12, size);
  PutOctal(h + 136, 12, 0);  // mtime
  std::memset(h + 148, ' ', 8);
  h[156] = type;
  PutString(h + 157, 100, linkname);
  std::memcpy(h + 257, "ustar", 6);  // magic incl. NUL
  std::memcpy(h + 263, "00", 2);
  // uname/gname empty; devmajor/devminor zero.
  PutOctal(h + 329, 8, 0);
  PutOctal(h + 337, 8, 0);
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(block[i]);
  char chk[8];
  std::snprintf(chk, sizeof(chk), "%06o", sum);
  std::memcpy(h + 148, chk, 6);
  h[154] = '\0';
  h[155] = ' ';
  return block;
}

std::string PaxRecord(const std::string& key, const std::string& value) {
  // "<len> <key>=<value>\n" where <len> counts the whole record including its own digits.
  size_t body = 1 + key.size() + 1 + value.size() + 1;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string Padding(uint64_t size) {
  size_t rem = static_cast<size_t>(size % kBlock);
  return rem == 0 ? std::string() : std::string(kBlock - rem, '\0');
}

Status WriteHeader(TarGzStream* tar, const std::string& name, char type, unsigned mode,
                   uint64_t size, const std::string& linkname) {
  if (name.size() > 100 || linkname.size() > 100) {
    std::string records;
    if (name.size() > 100) records += PaxRecord("path", name);
    if (linkname.size() > 100) records += PaxRecord("linkpath", linkname);
    Status s = tar->Write(HeaderBlock("PaxHeader", 'x', 0644, records.size(), ""));
    if (s.ok()) s = tar->Write(records);
    if (s.ok()) s = tar->Write(Padding(records.size()));
    if (!s.ok()) return s;
  }
  return tar->Write(HeaderBlock(name.substr(0, 100), type, mode, size, linkname.substr(0, 100)));
}

Status WriteFileData(TarGzStream* tar, const Node& n) {
  int fd = ::open(n.source.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::Internal(Errno("open " + n.source));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != n.size) {
    ::close(fd);
    return Status::Internal("output changed while packing: " + n.source);
  }
  std::string buf(1 << 20, '\0');
  uint64_t left = n.size;
  while (left > 0) {
    ssize_t r = ::read(fd, &buf[0], static_cast<size_t>(std::min<uint64_t>(left, buf.size())));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return r < 0 ? Status::Internal(Errno("read " + n.source))
                   : Status::Internal("output changed while packing: " + n.source);
    }
    Status s = tar->Write(buf.data(), static_cast<size_t>(r));
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
    left -= static_cast<uint64_t>(r);
  }
  ::close(fd);
  return tar->Write(Padding(n.size));
}

}  // namespace

Status WriteLayer(const std::string& workspace, const std::vector<LayerEntry>& entries,
                  int gzip_level, LayerBlob* out, const LayerLimits& limits) {
  if (gzip_level < 0 || gzip_level > 9) {
    return Status::InvalidArgument("gzip level must be 0..9, got " + std::to_string(gzip_level));
  }
  char resolved[PATH_MAX];
  if (::realpath(workspace.c_str(), resolved) == nullptr) {
    return Status::NotFound(Errno("workspace " + workspace));
  }
  const std::string ws = resolved;
  const std::string ws_prefix = ws == "/" ? ws : ws + "/";

  Collector collector(limits);
  for (const LayerEntry& e : entries) {
    std::string from, to;
    Status s = CheckFrom(e.from, &from);
    if (s.ok()) s = CheckTo(e.to, &to);
    if (!s.ok()) return s;
    const std::string host = ws + "/" + from;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        return Status::NotFound("output '" + from + "' does not exist in the workspace");
      }
      return Status::Internal(Errno("lstat " + from));
    }
    // Resolve symlinks anywhere along `from`; the result must stay inside the workspace.
    if (::realpath(host.c_str(), resolved) == nullptr) {
      return Status::InvalidArgument("output '" + from +
                                     "' cannot be resolved (dangling symlink?)");
    }
    const std::string real = resolved;
    if (real.compare(0, ws_prefix.size(), ws_prefix) != 0) {
      return Status::InvalidArgument("output '" + from + "' resolves outside the workspace");
    }
    if (::lstat(real.c_str(), &st) != 0) return Status::Internal(Errno("lstat " + from));
    s = collector.AddParents(to);
    if (s.ok()) s = collector.AddPath(real, st, to, 0);
    if (!s.ok()) return s;
  }

  LayerBlob blob;
  TarGzStream tar(&blob.data);
  Status s = tar.Init(gzip_level);
  if (!s.ok()) return s;
  for (const auto& [path, node] : collector.nodes()) {
    switch (node.kind) {
      case Kind::kDir:
        s = WriteHeader(&tar, path + "/", '5', 0755, 0, "");
        break;
      case Kind::kSymlink:
        s = WriteHeader(&tar, path, '2', 0777, 0, node.link_target);
        break;
      case Kind::kFile:
        s = WriteHeader(&tar, path, '0', node.exec ? 0755 : 0644, node.size, "");
        if (s.ok()) s = WriteFileData(&tar, node);
        break;
    }
    if (!s.ok()) return s;
  }
  s = tar.Write(std::string(2 * kBlock, '\0'));  // end-of-archive marker
  std::string diff_hex, digest_hex;
  if (s.ok()) s = tar.Finish(&diff_hex, &digest_hex);
  if (!s.ok()) return s;
  blob.diff_id = "sha256:" + diff_hex;
  blob.digest = "sha256:" + digest_hex;
  blob.size = blob.data.size();
  *out = std::move(blob);
  return Status::Ok();
}

}  // namespace kiln
