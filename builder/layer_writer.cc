#include "builder/layer_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "common/names.h"
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

// The tar stream: hashed (the diff_id) and passed on to a sink (if any) in the same pass.
class TarBuffer {
 public:
  explicit TarBuffer(ByteSink* sink) : sink_(sink) {}
  Status Write(const char* data, size_t n) {
    sha_.Update(data, n);
    return sink_ ? sink_->Write(data, n) : Status::Ok();
  }
  Status Write(const std::string& s) { return Write(s.data(), s.size()); }
  std::string HexDigest() { return sha_.HexDigest(); }

 private:
  ByteSink* sink_;
  Sha256 sha_;
};

// Appends to a string (PackLayerTar).
class StringSink : public ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  Status Write(const char* data, size_t n) override {
    out_->append(data, n);
    return Status::Ok();
  }

 private:
  std::string* out_;
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

Status WriteHeader(TarBuffer* tar, const std::string& name, char type, unsigned mode, uint64_t size,
                   const std::string& linkname) {
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

Status WriteFileData(TarBuffer* tar, const Node& n) {
  int fd = ::open(n.source.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::Internal(Errno("open " + n.source));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != n.size) {
    ::close(fd);
    return Status::Internal("output changed while packing: " + n.source);
  }
  // One read of each file, in pieces: never more than one piece in memory.
  std::unique_ptr<char[]> buf(new char[kBufSize]);
  Status s;
  uint64_t left = n.size;
  while (s.ok() && left > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(left, kBufSize));
    ssize_t r = ::read(fd, buf.get(), want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      s = Status::Internal(Errno("read " + n.source));
    } else if (r == 0) {
      s = Status::Internal("output changed while packing: " + n.source);
    } else {
      left -= static_cast<uint64_t>(r);
      s = tar->Write(buf.get(), static_cast<size_t>(r));
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  return tar->Write(Padding(n.size));
}

// One chunk of the parallel deflate: raw deflate of tar[begin, end), primed with the 32 KiB
// before `begin` as dictionary, ended with a sync flush (byte-aligned, not final) or, for the
// last chunk, the final block.
struct Chunk {
  size_t begin = 0, end = 0;
  std::string out;
  uLong crc = 0;
  Status status;
  bool done = false;
};

void DeflateChunk(std::string_view tar, int level, bool last, Chunk* c) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (deflateInit2(&zs, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    c->status = Status::Internal("deflateInit2 failed");
    return;
  }
  constexpr size_t kWindow = 32 * 1024;
  if (c->begin > 0) {
    size_t from = c->begin > kWindow ? c->begin - kWindow : 0;
    if (deflateSetDictionary(&zs, reinterpret_cast<const Bytef*>(tar.data() + from),
                             static_cast<uInt>(c->begin - from)) != Z_OK) {
      deflateEnd(&zs);
      c->status = Status::Internal("deflateSetDictionary failed");
      return;
    }
  }
  const size_t len = c->end - c->begin;
  c->out.resize(deflateBound(&zs, static_cast<uLong>(len)) + 64);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(tar.data() + c->begin));
  zs.avail_in = static_cast<uInt>(len);
  zs.next_out = reinterpret_cast<Bytef*>(&c->out[0]);
  zs.avail_out = static_cast<uInt>(c->out.size());
  int rc = deflate(&zs, last ? Z_FINISH : Z_SYNC_FLUSH);
  bool ok = last ? rc == Z_STREAM_END : (rc == Z_OK && zs.avail_in == 0 && zs.avail_out > 0);
  c->out.resize(c->out.size() - zs.avail_out);
  deflateEnd(&zs);
  if (!ok) {
    c->status = Status::Internal("deflate failed");
    return;
  }
  c->crc = crc32(0L, reinterpret_cast<const Bytef*>(tar.data() + c->begin), static_cast<uInt>(len));
  c->status = Status::Ok();
}

void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

Status StreamLayerTar(const std::string& workspace, const std::vector<LayerEntry>& entries,
                      ByteSink* sink, std::string* diff_id, const LayerLimits& limits) {
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

  TarBuffer tar(sink);
  Status s;
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
  if (!s.ok()) return s;
  *diff_id = "sha256:" + tar.HexDigest();
  return Status::Ok();
}

Status PackLayerTar(const std::string& workspace, const std::vector<LayerEntry>& entries,
                    LayerTar* out, const LayerLimits& limits) {
  LayerTar result;
  StringSink sink(&result.data);
  Status s = StreamLayerTar(workspace, entries, &sink, &result.diff_id, limits);
  if (!s.ok()) return s;
  *out = std::move(result);
  return Status::Ok();
}

Status CompressLayer(std::string_view tar, const std::string& diff_id, const CompressOptions& opts,
                     LayerBlob* out) {
  if (opts.level < 0 || opts.level > 9) {
    return Status::InvalidArgument("gzip level must be 0..9, got " + std::to_string(opts.level));
  }
  if (opts.chunk_bytes < 64 * 1024 || opts.chunk_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument("chunk size must be 64 KiB..1 GiB");
  }
  const size_t n = tar.empty() ? 1 : (tar.size() + opts.chunk_bytes - 1) / opts.chunk_bytes;
  std::vector<Chunk> chunks(n);
  for (size_t i = 0; i < n; ++i) {
    chunks[i].begin = i * opts.chunk_bytes;
    chunks[i].end = std::min(tar.size(), (i + 1) * opts.chunk_bytes);
  }
  int threads = opts.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::min(threads, 16)), n));

  // Workers take chunks in order; this thread hashes and appends finished chunks in order, so
  // compression, hashing and copying overlap.
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  int running = threads;  // guarded by mu
  auto work = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Chunk& c = chunks[i];
      DeflateChunk(tar, opts.level, i + 1 == n, &c);
      if (!c.status.ok()) failed = true;
      std::lock_guard<std::mutex> l(mu);
      c.done = true;
      cv.notify_all();
    }
    std::lock_guard<std::mutex> l(mu);
    --running;
    cv.notify_all();
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);

  LayerBlob blob;
  // gzip header (RFC 1952): no name/comment/extra, mtime 0, XFL by level, OS 255 ("unknown").
  const char xfl = opts.level == 9 ? 2 : (opts.level == 1 ? 4 : 0);
  const char header[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, xfl, '\xff'};
  size_t guess = tar.size() / 2 + 64;
  blob.data.reserve(guess);
  blob.data.append(header, sizeof(header));
  Sha256 sha;
  sha.Update(header, sizeof(header));
  uLong crc = crc32(0L, Z_NULL, 0);
  Status st;
  for (size_t i = 0; i < n; ++i) {
    Chunk& c = chunks[i];
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return c.done || running == 0; });
      if (!c.done) {
        st = Status::Internal("deflate failed");
        break;
      }
    }
    if (!c.status.ok()) {
      st = c.status;
      break;
    }
    sha.Update(c.out.data(), c.out.size());
    blob.data.append(c.out);
    std::string().swap(c.out);
    crc = crc32_combine(crc, c.crc, static_cast<z_off_t>(c.end - c.begin));
  }
  if (!st.ok()) failed = true;
  for (auto& t : pool) t.join();
  if (!st.ok()) return st;
  std::string trailer;
  PutLe32(&trailer, static_cast<uint32_t>(crc));
  PutLe32(&trailer, static_cast<uint32_t>(tar.size() & 0xffffffffu));
  sha.Update(trailer.data(), trailer.size());
  blob.data += trailer;
  blob.digest = "sha256:" + sha.HexDigest();
  blob.diff_id = diff_id;
  blob.size = blob.data.size();
  *out = std::move(blob);
  return Status::Ok();
}

Status WriteLayer(const std::string& workspace, const std::vector<LayerEntry>& entries,
                  int gzip_level, LayerBlob* out, const LayerLimits& limits) {
  if (gzip_level < 0 || gzip_level > 9) {
    return Status::InvalidArgument("gzip level must be 0..9, got " + std::to_string(gzip_level));
  }
  LayerTar tar;
  Status s = PackLayerTar(workspace, entries, &tar, limits);
  if (!s.ok()) return s;
  CompressOptions opts;
  opts.level = gzip_level;
  return CompressLayer(tar.data, tar.diff_id, opts, out);
}

// ---- Issue 15: BlobFile and the streaming compressor ----

BlobFile::~BlobFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status BlobFile::ReadAll(std::string* out) const {
  std::string data(static_cast<size_t>(size_), '\0');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t r = ::pread(fd_, &data[done], data.size() - done, static_cast<off_t>(offset_ + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::Internal(Errno("read layer blob"));
    if (r == 0) return Status::Internal("layer blob file is shorter than recorded");
    done += static_cast<size_t>(r);
  }
  *out = std::move(data);
  return Status::Ok();
}

struct GzipLayerWriter::Job {
  std::string buf;  // dictionary + chunk input
  Chunk chunk;
  std::thread worker;
};

GzipLayerWriter::GzipLayerWriter(const CompressOptions& opts, ByteSink* out)
    : opts_(opts), out_(out) {
  if (opts_.level < 0 || opts_.level > 9) {
    status_ =
        Status::InvalidArgument("gzip level must be 0..9, got " + std::to_string(opts_.level));
  } else if (opts_.chunk_bytes < 64 * 1024 || opts_.chunk_bytes > (size_t{1} << 30)) {
    status_ = Status::InvalidArgument("chunk size must be 64 KiB..1 GiB");
  }
  if (opts_.threads <= 0)
    opts_.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opts_.threads = std::min(opts_.threads, 16);
  crc_ = crc32(0L, Z_NULL, 0);
}

GzipLayerWriter::~GzipLayerWriter() {
  for (auto& j : inflight_)
    if (j->worker.joinable()) j->worker.join();
}

void GzipLayerWriter::Account() {
  size_t held = cur_.capacity() + dict_.size();
  for (const auto& j : inflight_) held += j->buf.size() + j->chunk.out.capacity();
  peak_ = std::max(peak_, held);
}

Status GzipLayerWriter::Write(const char* data, size_t n) {
  if (!status_.ok()) return status_;
  if (!started_) {
    started_ = true;
    // gzip header as CompressLayer's.
    const char xfl = opts_.level == 9 ? 2 : (opts_.level == 1 ? 4 : 0);
    const char header[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, xfl, '\xff'};
    sha_.Update(header, sizeof(header));
    out_bytes_ += sizeof(header);
    status_ = out_->Write(header, sizeof(header));
    if (!status_.ok()) return status_;
    cur_.reserve(opts_.chunk_bytes);
  }
  while (n > 0) {
    if (cur_.size() == opts_.chunk_bytes) {  // full, and more follows: not the last chunk
      status_ = Dispatch(false);
      if (!status_.ok()) return status_;
    }
    size_t take = std::min(n, opts_.chunk_bytes - cur_.size());
    cur_.append(data, take);
    data += take;
    n -= take;
  }
  Account();
  return Status::Ok();
}

Status GzipLayerWriter::Dispatch(bool last) {
  auto job = std::make_unique<Job>();
  job->buf.reserve(dict_.size() + cur_.size());
  job->buf = dict_;
  job->buf += cur_;
  job->chunk.begin = dict_.size();
  job->chunk.end = job->buf.size();
  constexpr size_t kWindow = 32 * 1024;
  dict_.assign(cur_, cur_.size() > kWindow ? cur_.size() - kWindow : 0, std::string::npos);
  in_bytes_ += cur_.size();
  cur_.clear();
  Job* raw = job.get();
  const int level = opts_.level;
  job->worker =
      std::thread([raw, level, last] { DeflateChunk(raw->buf, level, last, &raw->chunk); });
  inflight_.push_back(std::move(job));
  Account();
  while (inflight_.size() >= static_cast<size_t>(opts_.threads) || (last && !inflight_.empty())) {
    Status s = DrainFront();
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status GzipLayerWriter::DrainFront() {
  std::unique_ptr<Job> job = std::move(inflight_.front());
  inflight_.pop_front();
  job->worker.join();
  Account();
  if (!job->chunk.status.ok()) return job->chunk.status;
  const std::string& o = job->chunk.out;
  sha_.Update(o.data(), o.size());
  out_bytes_ += o.size();
  crc_ =
      crc32_combine(crc_, job->chunk.crc, static_cast<z_off_t>(job->chunk.end - job->chunk.begin));
  return out_->Write(o.data(), o.size());
}

Status GzipLayerWriter::Finish(std::string* digest, uint64_t* size) {
  if (!started_) {
    Status s = Write("", 0);
    if (!s.ok()) return s;
  }
  if (!status_.ok()) return status_;
  status_ = Dispatch(true);  // drains everything
  if (!status_.ok()) return status_;
  std::string trailer;
  PutLe32(&trailer, static_cast<uint32_t>(crc_));
  PutLe32(&trailer, static_cast<uint32_t>(in_bytes_ & 0xffffffffu));
  sha_.Update(trailer.data(), trailer.size());
  out_bytes_ += trailer.size();
  status_ = out_->Write(trailer.data(), trailer.size());
  if (!status_.ok()) return status_;
  *digest = "sha256:" + sha_.HexDigest();
  *size = out_bytes_;
  status_ = Status::FailedPrecondition("gzip stream already finished");
  return Status::Ok();
}

}  // namespace kiln
