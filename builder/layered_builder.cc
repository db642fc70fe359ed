#include "builder/layered_builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <vector>

#include "builder/layer_writer.h"
#include "builder/oci_image.h"
#include "builder/oci_layout_pusher.h"
#include "builder/outputs_cache.h"
#include "builder/sandbox_command.h"
#include "common/sha256.h"
#include "registry/registry_client.h"

namespace kiln {
namespace fs = std::filesystem;
using json = nlohmann::json;
namespace {

// `out` for the pushing threads: one line at a time (nothing when `out` is empty).
std::function<void(const std::string&)> OneLineAtATime(const OutputFn& out, std::mutex* mu) {
  return [&out, mu](const std::string& line) {
    if (!out) return;
    std::lock_guard<std::mutex> l(*mu);
    out(line);
  };
}
using Clock = std::chrono::steady_clock;
int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Gives `dir` and everything below it to uid:gid without following symlinks; entries already
// owned are only stat'ed, so after the first build this is one lstat per entry. Runs while no
// process of the build user can reach the tree (before the sandbox starts).
Status OwnTree(const std::string& dir, uid_t uid, gid_t gid) {
  auto own = [&](const char* p) {
    struct stat st;
    if (::lstat(p, &st) != 0) return false;
    return (st.st_uid == uid && st.st_gid == gid) || ::lchown(p, uid, gid) == 0;
  };
  if (!own(dir.c_str())) return Status::Internal("cannot give " + dir + " to the build user");
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!own(it->path().c_str()))
      return Status::Internal("cannot give " + it->path().string() + " to the build user");
  }
  if (ec) return Status::Internal("cannot walk " + dir + ": " + ec.message());
  return Status::Ok();
}
// Counts what passes through to `next`.
class CountingSink : public ByteSink {
 public:
  explicit CountingSink(ByteSink* next) : next_(next) {}
  Status Write(const char* data, size_t n) override {
    bytes_ += n;
    Status s = next_->Write(data, n);
    failed_ = failed_ || !s.ok();
    return s;
  }
  uint64_t bytes() const { return bytes_; }
  bool failed() const { return failed_; }

 private:
  ByteSink* next_;
  uint64_t bytes_ = 0;
  bool failed_ = false;
};
}  // namespace

struct LayeredBuilder::Base {
  std::string host, repo, digest;
  json manifest;  // OCI or docker v2 image manifest (not an index)
  json config;
};

struct LayeredBuilder::Prepared {
  std::string base_repo;
  LayerBlob layer;
  OciImage image;
};

LayeredBuilder::LayeredBuilder(ProcessRunner* runner, LayeredBuilderOptions opts)
    : runner_(runner), opts_(opts) {}

LayeredBuilder::~LayeredBuilder() {
  std::vector<std::future<void>> pending;
  {
    std::lock_guard<std::mutex> l(mu_);
    pending.swap(background_);
  }
  for (auto& f : pending) f.wait();
}

OutputsCache* LayeredBuilder::Cache(const std::string& cache_dir) {
  if (opts_.outputs_cache_bytes == 0 || cache_dir.empty()) return nullptr;
  std::lock_guard<std::mutex> l(mu_);
  auto& c = caches_[cache_dir];
  if (!c) c = std::make_unique<OutputsCache>(cache_dir + "/outputs", opts_.outputs_cache_bytes);
  return c.get();
}

Status LayeredBuilder::ParseBaseRef(const std::string& ref, std::string* host, std::string* repo,
                                    std::string* digest) {
  auto at = ref.find("@sha256:");
  auto slash = ref.find('/');
  if (at == std::string::npos || slash == std::string::npos || slash > at)
    return Status::InvalidArgument("base_image must be <host:port>/<repository>@sha256:<digest>");
  *host = ref.substr(0, slash);
  *repo = ref.substr(slash + 1, at - slash - 1);
  *digest = ref.substr(at + 1);
  if (repo->empty() || !IsSha256Digest(*digest))
    return Status::InvalidArgument("base_image must be <host:port>/<repository>@sha256:<digest>");
  return Status::Ok();
}

RegistryClient* LayeredBuilder::Client(const RegistryConfig& reg) {
  return clients_.Get(RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file});
}

Status LayeredBuilder::ResolveBase(const RegistryConfig& reg, const std::string& base_ref,
                                   std::shared_ptr<const Base>* out) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = bases_.find(base_ref);
    if (it != bases_.end()) {
      *out = it->second;
      return Status::Ok();
    }
  }
  auto base = std::make_shared<Base>();
  Status st = ParseBaseRef(base_ref, &base->host, &base->repo, &base->digest);
  if (!st.ok()) return st;
  RegistryClient* c = Client(reg);
  if (c->host() != base->host)
    return Status::InvalidArgument("base_image host " + base->host +
                                   " is not the domain's registry " + c->host());
  std::string body, type, digest;
  st = c->GetManifest(base->repo, base->digest, &body, &type, &digest);
  if (!st.ok())
    return Status(
        st.code() == Status::Code::kNotFound
            ? Status::NotFound("base image " + base_ref + " cannot be resolved: " + st.message())
            : st);
  auto m = json::parse(body, nullptr, false);
  if (m.is_discarded() || !m.is_object())
    return Status::Internal("base image manifest is not JSON");
  if (m.contains("manifests")) {  // an index: pick linux/amd64
    std::string pick;
    for (const auto& e : m["manifests"]) {
      auto p = e.value("platform", json::object());
      if (p.value("os", "") == "linux" && p.value("architecture", "") == "amd64")
        pick = e.value("digest", "");
    }
    if (pick.empty()) return Status::NotFound("base image index has no linux/amd64 manifest");
    st = c->GetManifest(base->repo, pick, &body, &type, &digest);
    if (!st.ok()) return st;
    m = json::parse(body, nullptr, false);
    if (m.is_discarded() || !m.is_object())
      return Status::Internal("base image manifest is not JSON");
  }
  if (!m.contains("config") || !m.contains("layers"))
    return Status::Internal("base image manifest has no config/layers");
  std::string cfg;
  st = c->GetBlob(base->repo, m["config"].value("digest", ""), &cfg);
  if (!st.ok()) return st;
  base->config = json::parse(cfg, nullptr, false);
  if (base->config.is_discarded() || !base->config.is_object())
    return Status::Internal("base image config is not JSON");
  base->manifest = std::move(m);
  std::lock_guard<std::mutex> l(mu_);
  bases_[base_ref] = base;
  *out = base;
  return Status::Ok();
}

BuildResult LayeredBuilder::Build(const BuildJob& job, const OutputFn& out,
                                  const CancelToken* cancel) {
  BuildResult res;
  const auto t0 = Clock::now();
  if (!job.build.layered) {
    res.status = Status::InvalidArgument("domain has no build.layered section");
    return res;
  }
  const LayeredBuild& lb = *job.build.layered;
  // The base image (two small GETs, once per process) resolves while the compile runs.
  auto resolved = std::make_shared<std::pair<Status, std::shared_ptr<const Base>>>();
  std::future<void> base_future =
      std::async(std::launch::async, [this, resolved, reg = job.registry, ref = lb.base_image,
                                      deadline = CurrentRegistryDeadline()] {
        RegistryDeadlineScope in_time(deadline);  // issue 19: the build's deadline, on this thread
        resolved->first = ResolveBase(reg, ref, &resolved->second);
      });
  auto park_base = [&] {  // the build ends early: never keep its caller waiting on the registry
    std::lock_guard<std::mutex> l(mu_);
    background_.erase(std::remove_if(background_.begin(), background_.end(),
                                     [](const std::future<void>& f) {
                                       return f.wait_for(std::chrono::seconds(0)) ==
                                              std::future_status::ready;
                                     }),
                      background_.end());
    background_.push_back(std::move(base_future));
  };
  // 1. The compile command, sandboxed.
  SandboxSpec sb;
  sb.workspace = job.source_dir;
  sb.command = lb.command;
  sb.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin:/usr/lib/go/bin"},
            {"HOME", "/tmp"},
            {"LANG", "C.UTF-8"}};
  for (const auto& [k, v] : lb.env) sb.env[k] = v;
  std::error_code ec;
  for (const auto& [var, name] : lb.caches) {
    std::string dir = job.cache_dir + "/layered/" + name;
    fs::create_directories(dir, ec);
    sb.caches[var] = dir;
  }
  sb.network = job.build.containerfile.network;
  // Issue 15: limits always; as root, the command runs as the unprivileged build user, which
  // owns the workspace and the caches it writes.
  sb.limits.max_processes = job.build.limits.max_processes;
  sb.limits.max_memory_bytes = job.build.limits.max_memory_mb << 20;
  sb.limits.max_file_bytes = job.build.max_file_mb << 20;
  Status st;
  if (::geteuid() == 0) {
    SandboxUser user;
    st = LookupSandboxUser(job.build.user, &user);
    if (st.ok()) {
      sb.user = user;
      fs::create_directories(sb.stage_dir, ec);
      ::chmod(sb.stage_dir.c_str(), 0755);
      st = OwnTree(job.source_dir, user.uid, user.gid);
    }
    for (const auto& [var, dir] : sb.caches) {
      if (st.ok()) st = OwnTree(dir, user.uid, user.gid);
    }
    if (!st.ok()) {
      park_base();
      res.status = st.code() == Status::Code::kUnavailable
                       ? st
                       : Status::Internal("cannot prepare the build sandbox: " + st.message());
      return res;
    }
  }
  st = ValidateSandboxSpec(sb);
  if (!st.ok()) {
    park_base();
    res.status = st;
    return res;
  }
  ProcessSpec spec;
  SandboxLaunch launch = SandboxLaunchFor(sb);  // issue 18: no process starts before bwrap
  spec.argv = std::move(launch.argv);
  spec.confine = std::move(launch.confine);
  spec.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}};
  spec.timeout = std::chrono::seconds(job.build.timeout_s);
  if (out)
    out("kiln: layered build: " +
        [&] {
          std::string s;
          for (auto& a : lb.command) s += a + " ";
          return s;
        }() +
        "\n");
  ProcessResult r = runner_->Run(spec, out, cancel);
  const int64_t sandbox_ms = MsSince(t0);
  if (!r.start_status.ok()) {
    park_base();
    res.status = Status::Unavailable("cannot run the sandbox: " + r.start_status.message());
    return res;
  }
  if (r.cancelled || r.timed_out) {
    park_base();
    res.status = r.cancelled ? Status::Cancelled("build cancelled")
                             : Status::DeadlineExceeded("build timed out after " +
                                                        std::to_string(job.build.timeout_s) + " s");
    return res;
  }
  if (r.exit_code != 0) {
    park_base();
    DiagnosticsOptions dopts;
    dopts.source_roots = {"/workspace/"};
    dopts.repo_root = job.source_dir;  // issue 16: repo-relative paths, go test packages
    std::string go_mod;
    if (ReadFileBeneath(job.source_dir, "go.mod", 64 << 10, &go_mod).ok())
      dopts.go_module = GoModulePath(go_mod);
    res.diagnostics = ParseDiagnostics(r.output, dopts);
    res.compile_failed = true;
    res.status = Status::FailedPrecondition("build command failed (exit " +
                                            std::to_string(r.exit_code) + ")");
    res.elapsed_ms = MsSince(t0);
    return res;
  }
  // 2. The outputs as one layer, streamed (Issue 15: never whole in memory): a first pass
  // hashes the tar (diff_id); the outputs cache serves the compressed blob when these exact
  // outputs were packed before; otherwise a second pass streams tar -> parallel gzip -> sha256
  // into the cache entry's file (or a temporary file), checking the tar did not change.
  auto prep = std::make_shared<Prepared>();
  const auto t1 = Clock::now();
  std::vector<LayerEntry> entries;
  for (const auto& o : lb.outputs) entries.push_back({o.from, o.to});
  std::string diff_id;
  // Issue 16: a declared output the command did not write is named (repository-relative).
  for (const auto& o : lb.outputs) {
    struct stat ost;
    if (::lstat((job.source_dir + "/" + o.from).c_str(), &ost) != 0 && errno == ENOENT) {
      park_base();
      res.status = Status::FailedPrecondition(
          "outputs: the build command did not write the declared output '" + o.from +
          "' (build.layered.outputs)");
      res.compile_failed = true;
      res.failure_kind = "output_missing";
      res.elapsed_ms = MsSince(t0);
      return res;
    }
  }
  const bool raw = StoreLayersUncompressed(job.build.compression, job.registry.url);
  bool file_failed = false;  // raw: kiln's own layer file failed (not the outputs)
  if (raw) {
    // Issue 18: the uncompressed tar is the blob (its digest is the diff_id): one pass reads
    // every output once, hashes it and writes it to the layer file; nothing else to pack.
    std::string dir =
        job.storage_dir.empty() ? fs::temp_directory_path().string() : job.storage_dir;
    fs::create_directories(dir, ec);
    BlobProducer produce = [&](ByteSink* sink, std::string* digest, uint64_t* size) {
      CountingSink counted(sink);
      Status s = StreamLayerTar(job.source_dir, entries, &counted, digest);
      *size = counted.bytes();
      file_failed = counted.failed();
      return s;
    };
    file_failed = true;  // until the producer runs: WriteTempBlob could not make the file
    st = WriteTempBlob(dir, "", produce, &prep->layer);
    if (st.ok()) prep->layer.diff_id = diff_id = prep->layer.digest;
  } else {
    st = StreamLayerTar(job.source_dir, entries, nullptr, &diff_id);
  }
  if (!st.ok()) {
    park_base();
    // An I/O failure of kiln's own layer file is not the agent's to fix.
    const bool ours = raw && file_failed;
    res.status = ours ? st : Status::FailedPrecondition("outputs: " + st.message());
    res.compile_failed = !ours;
    return res;
  }
  const int64_t tar_ms = MsSince(t1);
  const auto t2 = Clock::now();
  OutputsCache* cache = raw ? nullptr : Cache(job.cache_dir);
  const bool hit = raw || (cache && cache->LookupFile(diff_id, &prep->layer));
  if (!hit) {
    CompressOptions copts;
    copts.level = opts_.gzip_level;
    copts.threads = opts_.compress_threads;
    BlobProducer produce = [&](ByteSink* sink, std::string* digest, uint64_t* size) {
      GzipLayerWriter gz(copts, sink);
      std::string again;
      Status s = StreamLayerTar(job.source_dir, entries, &gz, &again);
      if (s.ok()) s = gz.Finish(digest, size);
      if (s.ok() && again != diff_id)
        s = Status::FailedPrecondition("outputs: changed while packing");
      return s;
    };
    if (cache) {
      st = cache->StoreStream(diff_id, produce, &prep->layer);
    } else {
      std::string dir =
          job.storage_dir.empty() ? fs::temp_directory_path().string() : job.storage_dir;
      fs::create_directories(dir, ec);
      st = WriteTempBlob(dir, diff_id, produce, &prep->layer);
    }
    if (!st.ok()) {
      park_base();
      res.status = st;
      return res;
    }
  }
  const int64_t gzip_ms = MsSince(t2);
  // 3. Config and manifest on the base.
  base_future.get();
  const Status base_st = resolved->first;
  const std::shared_ptr<const Base> base = resolved->second;
  if (!base_st.ok()) {
    res.status = base_st;
    return res;
  }
  OciImageSpec ispec;
  ispec.layer = {raw ? kOciLayerTar : kOciLayerTarGzip, prep->layer.digest, prep->layer.size};
  ispec.layer_diff_id = prep->layer.diff_id;
  ispec.entrypoint = lb.entrypoint;
  ispec.labels["kiln.candidate"] = job.candidate;
  if (!job.key.empty()) ispec.annotations["io.kiln.build-key"] = job.key;
  if (!job.commit.empty()) ispec.annotations["org.opencontainers.image.revision"] = job.commit;
  st = MakeOciImage(base->manifest, base->config, ispec, &prep->image);
  if (!st.ok()) {
    res.status = Status::Internal("base image " + lb.base_image + ": " + st.message());
    return res;
  }
  prep->base_repo = base->repo;
  res.image_id = prep->image.manifest_digest.substr(7);
  if (out) {
    out("kiln: layer " + prep->layer.digest + " (" + std::to_string(prep->layer.size) + " bytes" +
        (raw   ? ", uncompressed"
         : hit ? ", from the outputs cache"
               : "") +
        ")\n");
    out("kiln: timings: sandbox " + std::to_string(sandbox_ms) + " ms, tar " +
        std::to_string(tar_ms) + " ms" +
        (raw ? std::string()
             : std::string(hit ? ", cache lookup " : ", gzip ") + std::to_string(gzip_ms) + " ms") +
        "\n");
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    // Keyed by the candidate's storage: a candidate runs one build at a time, so a newer build
    // replaces an image that was never pushed (cancelled, superseded) instead of leaking it.
    prepared_[job.storage_dir] = {res.image_id, prep};
  }
  res.status = Status::Ok();
  res.elapsed_ms = MsSince(t0);
  res.timings = {{"sandbox_ms", sandbox_ms}, {"tar_ms", tar_ms}};
  if (!raw) res.timings["compress_ms"] = gzip_ms;
  return res;
}

std::shared_ptr<const LayeredBuilder::Prepared> LayeredBuilder::Find(const BuildJob& job,
                                                                     const BuildResult& built,
                                                                     bool take) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = prepared_.find(job.storage_dir);
  if (it == prepared_.end() || it->second.first != built.image_id) return nullptr;
  std::shared_ptr<const Prepared> prep = it->second.second;
  if (take) prepared_.erase(it);
  return prep;
}

Status LayeredBuilder::EnsureBlobs(const BuildJob& job, const Prepared& prep,
                                   const std::function<void(const std::string&)>& say,
                                   const CancelToken* cancel, int* uploads_out) {
  RegistryClient* c = Client(job.registry);
  const std::string& repo = job.repository;
  std::atomic<int> uploads{0};
  // One blob: HEAD, then (base layers) a cross-repository mount, then an upload if still missing.
  auto ensure = [&](const std::string& digest, const std::string* data) -> Status {
    if (cancel && cancel->cancelled()) return Status::Cancelled("push cancelled");
    bool exists = false;
    Status st = c->BlobExists(repo, digest, &exists);
    if (!st.ok() || exists) return st;
    if (!data) {
      bool mounted = false;
      st = c->MountBlob(repo, digest, prep.base_repo, &mounted);
      if (!st.ok() || mounted) return st;
      std::string blob;
      st = c->GetBlob(prep.base_repo, digest, &blob);
      if (!st.ok()) return st;
      ++uploads;
      return c->PutBlob(repo, digest, std::move(blob));
    }
    say("kiln: uploading " + digest + "\n");
    ++uploads;
    if (data == &prep.layer.data && prep.layer.file) {
      // The registry client uploads from memory: the layer is read only for its upload.
      // kiln hashed these bytes as it wrote them (the blob file is kiln's own): no second hash.
      std::string blob;
      st = prep.layer.file->ReadAll(&blob);
      return st.ok() ? c->PutBlob(repo, digest, std::move(blob), /*verify=*/false) : st;
    }
    return c->PutBlob(repo, digest, *data, /*verify=*/false);
  };
  // Every blob concurrently (the client is thread-safe). Each thread carries the build's
  // registry deadline (issue 19: a stalled registry fails the push within build.timeout_s,
  // not after the client's own timeouts).
  const RegistryDeadline deadline = CurrentRegistryDeadline();
  auto ensure_in_time = [&](const std::string& digest, const std::string* data) {
    RegistryDeadlineScope in_time(deadline);
    return ensure(digest, data);
  };
  std::vector<std::future<Status>> blobs;
  for (const auto& d : prep.image.base_layers)
    blobs.push_back(std::async(std::launch::async, ensure_in_time, d.digest, nullptr));
  blobs.push_back(
      std::async(std::launch::async, ensure_in_time, prep.layer.digest, &prep.layer.data));
  blobs.push_back(std::async(std::launch::async, ensure_in_time, prep.image.config_desc.digest,
                             &prep.image.config));
  Status st;
  for (auto& f : blobs) {
    Status s = f.get();
    if (st.ok() && !s.ok()) st = s;
  }
  if (uploads_out) *uploads_out = uploads.load();
  return st;
}

PushResult LayeredBuilder::UploadBlobs(const BuildJob& job, const BuildResult& built,
                                       const OutputFn& out, const CancelToken* cancel) {
  PushResult res;
  const auto t0 = Clock::now();
  std::shared_ptr<const Prepared> prep = Find(job, built, false);
  if (!prep) {
    res.status = Status::Internal("no prepared image for this build");
    return res;
  }
  std::mutex out_mu;
  const auto say = OneLineAtATime(out, &out_mu);
  int uploads = 0;
  res.status = EnsureBlobs(job, *prep, say, cancel, &uploads);
  res.elapsed_ms = MsSince(t0);
  if (res.status.ok())
    say("kiln: blobs: " + std::to_string(uploads) + " upload(s) before the push lane, " +
        std::to_string(res.elapsed_ms) + " ms\n");
  return res;
}

PushResult LayeredBuilder::Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                                const CancelToken* cancel) {
  PushResult res;
  const auto t0 = Clock::now();
  std::shared_ptr<const Prepared> prep = Find(job, built, true);
  if (!prep) {
    res.status = Status::Internal("no prepared image for this build");
    return res;
  }
  RegistryClient* c = Client(job.registry);
  const std::string& repo = job.repository;
  std::mutex out_mu;
  const auto say = OneLineAtATime(out, &out_mu);
  // What the tag points at now, while the blobs are HEADed (after UploadBlobs: all present).
  const RegistryDeadline deadline = CurrentRegistryDeadline();
  auto current = std::async(std::launch::async, [&] {
    RegistryDeadlineScope in_time(deadline);
    std::string body, type, digest;
    Status st = c->GetManifest(repo, job.tag, &body, &type, &digest);
    return st.ok() ? digest : std::string();
  });
  int uploads = 0;
  Status st = EnsureBlobs(job, *prep, say, cancel, &uploads);
  const std::string tag_digest = current.get();
  const std::string& want = prep->image.manifest_digest;
  // The manifest last, and only when every blob is there: a failed push never moves the tag.
  std::string digest;
  bool manifest_put = false;
  if (st.ok() && cancel && cancel->cancelled()) st = Status::Cancelled("push cancelled");
  if (st.ok()) {
    if (tag_digest == want) {
      digest = want;
      say("kiln: " + job.tag + " already points at " + want + ": nothing to push\n");
    } else {
      st = c->PutManifest(repo, job.tag, kOciManifestType, prep->image.manifest, &digest);
      manifest_put = true;
      if (st.ok() && digest != want)
        st = Status::Internal("registry stored the manifest as " + digest + ", expected " + want);
    }
  }
  res.elapsed_ms = MsSince(t0);
  if (!st.ok()) {
    res.status = st;
    return res;
  }
  say("kiln: push: " + std::to_string(uploads) + " blob upload(s), manifest " +
      (manifest_put ? "put" : "unchanged") + ", " + std::to_string(res.elapsed_ms) + " ms\n");
  res.digest = digest;
  res.ref = c->host() + "/" + repo + "@" + digest;
  res.status = Status::Ok();
  return res;
}

Status LayeredBuilder::Check() {
  ProcessSpec spec;
  spec.argv = {"bwrap", "--version"};
  spec.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}};
  spec.timeout = std::chrono::seconds(10);
  ProcessResult r = runner_->Run(spec, nullptr, nullptr);
  if (!r.start_status.ok() || r.exit_code != 0) return Status::Unavailable("bwrap does not run");
  return Status::Ok();
}

}  // namespace kiln
