#include "builder/oci_layout_pusher.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/sha256.h"

namespace kiln {
namespace {
using json = nlohmann::json;

constexpr size_t kMaxIndexBytes = 1 << 20;
constexpr size_t kMaxManifestBytes = 4 << 20;
constexpr size_t kMaxBlobBytes = size_t{1} << 30;
constexpr size_t kPushThreads = 3;  // blobs in flight at once (issue 18)

std::string BlobPath(const std::string& digest) { return "blobs/sha256/" + digest.substr(7); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

std::vector<std::string> Split(const std::string& rel) {
  std::vector<std::string> parts;
  std::stringstream ss(rel);
  std::string p;
  while (std::getline(ss, p, '/')) parts.push_back(p);
  return parts;
}

}  // namespace

Status ReadFileBeneath(const std::string& dir, const std::string& rel, size_t max_bytes,
                       std::string* data) {
  std::vector<std::string> parts = Split(rel);
  if (parts.empty()) return Status::InvalidArgument("empty path");
  for (const auto& p : parts)
    if (p.empty() || p == "." || p == "..") return Status::InvalidArgument("bad path " + rel);
  Fd cur(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (cur.get() < 0) return Status::NotFound("cannot open " + dir + ": " + std::strerror(errno));
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int fd = ::openat(cur.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return errno == ENOENT ? Status::NotFound(rel + " not found in the image layout")
                             : Status::InvalidArgument(rel + ": " + std::strerror(errno));
    cur.reset(fd);
  }
  Fd f(::openat(cur.get(), parts.back().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (f.get() < 0)
    return errno == ENOENT ? Status::NotFound(rel + " not found in the image layout")
                           : Status::InvalidArgument(rel + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return Status::InvalidArgument(rel + " is not a regular file");
  if (static_cast<size_t>(st.st_size) > max_bytes)
    return Status::ResourceExhausted(rel + " is larger than " + std::to_string(max_bytes) +
                                     " bytes");
  data->clear();
  data->reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal("reading " + rel + ": " + std::strerror(errno));
    if (n == 0) break;
    if (data->size() + static_cast<size_t>(n) > max_bytes)
      return Status::ResourceExhausted(rel + " grew beyond " + std::to_string(max_bytes) +
                                       " bytes");
    data->append(buf, static_cast<size_t>(n));
  }
  return Status::Ok();
}

namespace {

struct Manifest {
  std::string digest, media_type, body;
  std::vector<std::string> blobs;  // config first, then layers
};

Status LoadManifest(const OciPushRequest& req, Manifest* m) {
  std::string index_text;
  Status st = ReadFileBeneath(req.layout_dir, "index.json", kMaxIndexBytes, &index_text);
  if (!st.ok()) return st;
  json index = json::parse(index_text, nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index["manifests"].is_array())
    return Status::InvalidArgument("index.json of the image layout is malformed");
  const json* pick = nullptr;
  for (const auto& e : index["manifests"]) {
    if (!e.is_object()) continue;
    auto ann = e.value("annotations", json::object());
    if (ann.is_object() && ann.value("org.opencontainers.image.ref.name", "") == req.ref_name)
      pick = &e;
  }
  if (!pick) return Status::NotFound("image layout has no image named " + req.ref_name);
  m->digest = pick->value("digest", "");
  m->media_type = pick->value("mediaType", "");
  if (!IsSha256Digest(m->digest)) return Status::InvalidArgument("index.json: malformed digest");
  if (m->media_type != kOciManifestType && m->media_type != kDockerManifestType)
    return Status::InvalidArgument("index.json: unsupported manifest type " + m->media_type);
  st = ReadFileBeneath(req.layout_dir, BlobPath(m->digest), kMaxManifestBytes, &m->body);
  if (!st.ok()) return st;
  json man = json::parse(m->body, nullptr, false);
  if (man.is_discarded() || !man.is_object() || !man["config"].is_object() ||
      !man["layers"].is_array())
    return Status::InvalidArgument("manifest of the image layout is malformed");
  m->blobs.push_back(man["config"].value("digest", ""));
  for (const auto& l : man["layers"])
    m->blobs.push_back(l.is_object() ? l.value("digest", "") : "");
  for (const auto& d : m->blobs)
    if (!IsSha256Digest(d)) return Status::InvalidArgument("manifest: malformed blob digest");
  if (!req.expect_config_digest.empty() && m->blobs[0] != req.expect_config_digest)
    return Status::Internal("the image layout holds " + m->blobs[0] + ", not the built image " +
                            req.expect_config_digest);
  return Status::Ok();
}

}  // namespace

Status RunBlobTasks(const std::vector<std::function<Status()>>& tasks, const CancelToken* cancel) {
  // Issue 18: at most kPushThreads at a time (each upload holds its blob in memory); the first
  // failure stops the others from starting new tasks.
  std::mutex mu;  // guards status
  Status status;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto fail = [&](Status st) {
    std::lock_guard<std::mutex> l(mu);
    if (status.ok()) status = std::move(st);
    failed = true;
  };
  // Each thread carries the caller's registry deadline (issue 19).
  const RegistryDeadline deadline = CurrentRegistryDeadline();
  auto worker = [&] {
    RegistryDeadlineScope in_time(deadline);
    for (size_t i = next++; i < tasks.size() && !failed; i = next++) {
      if (cancel && cancel->cancelled()) return fail(Status::Cancelled("push cancelled"));
      Status st = tasks[i]();
      if (!st.ok()) return fail(std::move(st));
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min(tasks.size(), kPushThreads);
  for (size_t i = 1; i < n; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (status.ok() && cancel && cancel->cancelled()) return Status::Cancelled("push cancelled");
  return status;
}

OciPushResult PushOciLayout(RegistryClient* client, const OciPushRequest& req,
                            const std::function<void(std::string_view)>& out,
                            const CancelToken* cancel) {
  OciPushResult res;
  Manifest m;
  res.status = LoadManifest(req, &m);
  if (!res.status.ok()) return res;
  // Issue 18: the blobs concurrently (HEAD, then read + upload when missing), at most
  // kPushThreads at a time (each upload holds its blob in memory); the first failure stops
  // the others from starting new blobs. The manifest goes last, only when every blob is there.
  std::vector<std::string> todo;
  {
    std::set<std::string> seen;
    for (const auto& d : m.blobs)
      if (seen.insert(d).second) todo.push_back(d);
  }
  std::mutex mu;  // guards res.uploaded_blobs and `out`
  std::vector<std::function<Status()>> tasks;
  for (const std::string& d : todo)
    tasks.push_back([&, d]() -> Status {
      bool exists = false;
      Status st = client->BlobExists(req.repository, d, &exists);
      if (!st.ok() || exists) return st;
      std::string data;
      st = ReadFileBeneath(req.layout_dir, BlobPath(d), kMaxBlobBytes, &data);
      if (!st.ok()) return st;
      if (out) {
        std::lock_guard<std::mutex> l(mu);
        out("kiln: uploading " + d + " (" + std::to_string(data.size()) + " bytes)\n");
      }
      st = client->PutBlob(req.repository, d, data);  // verifies sha256(data) == d
      if (!st.ok()) return st;
      std::lock_guard<std::mutex> l(mu);
      ++res.uploaded_blobs;
      return st;
    });
  res.status = RunBlobTasks(tasks, cancel);
  if (!res.status.ok()) return res;
  if (req.blobs_only) return res;
  std::string digest;
  res.status = client->PutManifest(req.repository, req.tag, m.media_type, m.body, &digest);
  if (!res.status.ok()) return res;
  if (digest != m.digest) {
    res.status =
        Status::Internal("registry computed manifest digest " + digest + ", expected " + m.digest);
    return res;
  }
  res.digest = digest;
  return res;
}

void PruneOciLayout(const std::string& layout_dir, const std::string& ref_name) {
  OciPushRequest req;
  req.layout_dir = layout_dir;
  req.ref_name = ref_name;
  Manifest m;
  if (!LoadManifest(req, &m).ok()) return;
  std::set<std::string> keep(m.blobs.begin(), m.blobs.end());
  keep.insert(m.digest);
  Fd dir(::open((layout_dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (dir.get() < 0) return;
  Fd blobs(::openat(dir.get(), "blobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (blobs.get() < 0) return;
  int sfd = ::openat(blobs.get(), "sha256", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (sfd < 0) return;
  int sfd2 = ::dup(sfd);
  DIR* d = ::fdopendir(sfd2);
  if (!d) {
    ::close(sfd2);
    ::close(sfd);
    return;
  }
  std::vector<std::string> remove;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (!keep.count("sha256:" + n)) remove.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : remove) ::unlinkat(sfd, n.c_str(), 0);  // never follows a symlink
  ::close(sfd);
}

}  // namespace kiln
