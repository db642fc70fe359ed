#include "deploy/local_deployer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/file_util.h"
#include "common/sha256.h"
#include "deploy/launch_spec.h"
#include "deploy/netns_dialer.h"
#include "deploy/rootfs_extractor.h"
#include "deploy/sandbox_process.h"
#include "deploy/task_thread.h"
#include "deploy/tcp_forwarder.h"

namespace kiln {
namespace {

// Reads a small regular file of an extracted root without following symlinks anywhere on the
// way (the image's author controls them); "" when it is absent, a symlink or too large.
std::string ReadRootFile(const std::string& root, const std::string& rel) {
  int dir = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return "";
  std::string out;
  size_t start = 0;
  while (dir >= 0) {
    size_t slash = rel.find('/', start);
    std::string part =
        rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    bool last = slash == std::string::npos;
    int fd =
        ::openat(dir, part.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? 0 : O_DIRECTORY));
    ::close(dir);
    dir = -1;
    if (fd < 0) break;
    if (!last) {
      dir = fd;
      start = slash + 1;
      continue;
    }
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (1 << 20)) {
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
  }
  return out;
}

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kInfoFd = 3;
constexpr std::chrono::milliseconds kProbeTimeout{1000};

DeployResult Failed(const char* reason, std::string message) {
  DeployResult r;
  r.state = DeployState::kFailed;
  r.reason = reason;
  r.message = std::move(message);
  return r;
}

std::string WithOutput(std::string msg, const std::string& tail) {
  if (tail.empty()) return msg + " (no output)";
  return msg + "; last output:\n" + tail;
}

// Issue 15: gives the extracted root to the sandbox's host user, not following symlinks. Runs
// before the sandbox starts (nothing of that user can reach the root yet).
Status OwnRoot(const std::string& root, const SandboxUser& user) {
  std::error_code ec;
  if (::lchown(root.c_str(), user.uid, user.gid) != 0)
    return Status::Internal("cannot give the extracted root to the sandbox user");
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (::lchown(it->path().c_str(), user.uid, user.gid) != 0)
      return Status::Internal("cannot give the extracted root to the sandbox user");
  }
  if (ec) return Status::Internal("cannot walk the extracted root: " + ec.message());
  return Status::Ok();
}

std::string Seconds(std::chrono::milliseconds ms) {
  std::ostringstream o;
  o << static_cast<double>(ms.count()) / 1000.0 << " s";
  return o.str();
}

}  // namespace

struct LocalDeployer::Candidate {
  std::string image;
  std::string rootfs;
  std::unique_ptr<SandboxProcess> proc;
  std::shared_ptr<NetnsDialer> dialer;
};

struct LocalDeployer::Fetched {
  json config;
  std::vector<std::string> layers;  // blob digests, bottom first
};

LocalDeployer::LocalDeployer(std::string domain, LocalDeploy config, RegistryEndpoint registry,
                             std::string work_dir, LocalDeployerOptions opts)
    : domain_(std::move(domain)),
      config_(std::move(config)),
      work_dir_(std::move(work_dir)),
      opts_(opts),
      registry_(std::make_unique<RegistryClient>(std::move(registry), opts.registry)),
      forwarder_(std::make_unique<TcpForwarder>(config_.port)),
      launcher_(std::make_unique<TaskThread>()) {
  // Sandboxes of an earlier kiln process died with it (--die-with-parent), except a sandbox
  // init bwrap had cloned but not yet released when kiln was killed: it waits forever. Every
  // staged root of this deployer starts with its tag, so those are found by their arguments.
  KillProcessesWithArgPrefix(std::string(kLocalSandboxStageDir) + "/" + SandboxTag() + "-");
  KillProcessesWithArgPrefix((fs::path(work_dir_) / "rootfs" / (SandboxTag() + "-")).string());
  // Their roots.
  std::error_code ec;
  fs::remove_all(fs::path(work_dir_) / "rootfs", ec);
  // Blobs and image records an earlier kiln was writing when it was killed.
  RemoveOrphanTempFiles((fs::path(work_dir_) / "blobs" / "sha256").string());
  RemoveOrphanTempFiles((fs::path(work_dir_) / "images").string());
}

LocalDeployer::~LocalDeployer() { Shutdown(); }

std::string LocalDeployer::SandboxTag() const {
  // Unique per state directory and domain (two kilns never share a state directory).
  return Sha256Hex(work_dir_).substr(0, 10);
}

Status LocalDeployer::Current(std::string* image) {
  std::lock_guard<std::mutex> lock(mu_);
  // A candidate whose process has died serves nothing: a redeploy of it starts it again.
  *image = current_ && !current_->proc->Exited() ? current_->image : "";
  return Status::Ok();
}

int LocalDeployer::serving_pid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ && current_->proc ? current_->proc->sandbox_pid() : 0;
}

void LocalDeployer::Shutdown() {
  std::unique_ptr<Candidate> cur;
  {
    std::unique_lock<std::mutex> lock(mu_);
    shutdown_ = true;
    cv_.wait(lock, [this] { return !deploying_; });  // a running Deploy() sees shutdown_ and ends
    cur = std::move(current_);
  }
  forwarder_->Stop();
  StopCandidate(std::move(cur));
  launcher_->Stop();
}

bool LocalDeployer::Interrupted(const CancelToken* cancel) const {
  if (cancel && cancel->cancelled()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

void LocalDeployer::StopCandidate(std::unique_ptr<Candidate> cand) {
  if (!cand) return;
  if (cand->dialer) cand->dialer->Close();
  if (cand->proc) cand->proc->Stop(opts_.stop_grace);
  cand->proc.reset();
  std::error_code ec;
  if (!cand->rootfs.empty()) fs::remove_all(cand->rootfs, ec);
}

void LocalDeployer::Drain(const Candidate& cand) {
  if (!cand.dialer) return;
  auto deadline = Clock::now() + opts_.drain;
  while (cand.dialer->connections() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

DeployResult LocalDeployer::Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                                   const CancelToken* cancel) {
  auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_)
      return Failed("Unavailable", "the local deploy target of " + domain_ + " is shut down");
    deploying_ = true;
  }
  DeployProgressFn say = [&progress](const std::string& line) {
    if (progress) progress(line);
  };
  DeployResult r = DeployLocked(req, say, cancel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    deploying_ = false;
  }
  cv_.notify_all();
  r.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  return r;
}

DeployResult LocalDeployer::DeployLocked(const DeployRequest& req, const DeployProgressFn& progress,
                                         const CancelToken* cancel) {
  ImageRef ref;
  if (Status st = ParseImageRef(req.image, &ref); !st.ok()) return Failed("Invalid", st.message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ && current_->image == req.image && !current_->proc->Exited()) {
      DeployResult r;
      r.state = DeployState::kRolledOut;
      r.changed = false;
      r.message = req.image + " is already serving on 127.0.0.1:" + std::to_string(config_.port);
      return r;
    }
  }
  if (Status st = forwarder_->Listen(); !st.ok()) return Failed("Unavailable", st.message());
  if (ref.host != registry_->host())
    return Failed("ImageFetchFailed",
                  "image " + req.image + " is not in the domain's registry " + registry_->host());

  progress("fetching layers");
  Fetched img;
  // Issue 19: every registry request of the fetch ends by the deploy's fetch bound.
  RegistryDeadlineScope fetch_deadline(std::chrono::steady_clock::now() + opts_.fetch_timeout,
                                       "the local deploy's image fetch limit (" +
                                           std::to_string(opts_.fetch_timeout.count() / 1000) +
                                           " s)");
  if (Status st = FetchImage(ref.repository, ref.digest, progress, cancel, &img); !st.ok()) {
    if (st.code() == Status::Code::kCancelled) return Failed("Cancelled", "deploy cancelled");
    return Failed("ImageFetchFailed", "fetching " + req.image + ": " + st.message());
  }

  LaunchSpec spec;
  if (Status st = DecideLaunch(img.config, config_.port, &spec); !st.ok())
    return Failed("StartFailed", st.message());

  auto cand = std::make_unique<Candidate>();
  cand->image = req.image;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cand->rootfs = (fs::path(work_dir_) / "rootfs" /
                    (SandboxTag() + "-" + std::to_string(++seq_) + "-" + ref.digest.substr(7, 12)))
                       .string();
  }
  std::error_code ec;
  fs::remove_all(cand->rootfs, ec);
  fs::create_directories(cand->rootfs, ec);
  // Only kiln may look into the roots: what a candidate writes there (even a setuid file; the
  // sandbox mounts them nosuid) must not be reachable by other host users.
  if (!ec) fs::permissions(fs::path(work_dir_) / "rootfs", fs::perms::owner_all, ec);
  if (ec) return Failed("StartFailed", "cannot create " + cand->rootfs + ": " + ec.message());
  fs::permissions(cand->rootfs, fs::perms(0755), ec);

  progress("extracting " + std::to_string(img.layers.size()) + " layers");
  ExtractStats stats;
  ExtractLimits limits;  // Issue 15: deploy.local.max_rootfs_mb bounds the extracted root
  limits.max_total_bytes = static_cast<uint64_t>(config_.max_rootfs_mb) << 20;
  for (const auto& digest : img.layers) {
    std::string blob;
    Status st = FetchBlob(ref.repository, digest, &blob);
    if (st.ok()) st = ApplyLayer(cand->rootfs, blob, &stats, limits);
    if (!st.ok()) {
      StopCandidate(std::move(cand));  // removes the partial root
      if (stats.too_large)
        return Failed("ImageFetchFailed",
                      "image " + req.image + " has more than deploy.local.max_rootfs_mb (" +
                          std::to_string(config_.max_rootfs_mb) +
                          " MiB) of files; nothing was started and the serving candidate is "
                          "untouched: make the image smaller or raise deploy.local.max_rootfs_mb");
      return Failed("ImageFetchFailed", "layer " + digest + ": " + st.message());
    }
  }
  Status prep = PrepareMountPoints(cand->rootfs);
  if (prep.ok())
    prep = EnsureDirectoryInRoot(cand->rootfs, spec.cwd);  // as docker: WorkingDir is created
  if (prep.ok() && (!spec.user_name.empty() || !spec.group_name.empty()))
    prep = ResolveUserNames(ReadRootFile(cand->rootfs, "etc/passwd"),
                            ReadRootFile(cand->rootfs, "etc/group"), &spec);
  if (Status st = prep; !st.ok()) {
    StopCandidate(std::move(cand));
    return Failed("StartFailed", st.message());
  }
  if (stats.neutralized > 0)
    progress(std::to_string(stats.neutralized) +
             " layer entries tried to leave the root; kept inside it");
  if (Interrupted(cancel)) {
    StopCandidate(std::move(cand));
    return Failed("Cancelled", "deploy cancelled");
  }

  // Issue 15: limits; as root, bwrap runs as deploy.local.user, which owns the root's files
  // (the program, never uid 0, may write its own root as before).
  LocalSandboxOptions sbo;
  sbo.limits.max_processes = config_.limits.max_processes;
  sbo.limits.max_memory_bytes = config_.limits.max_memory_mb << 20;
  sbo.limits.max_file_bytes = config_.max_file_mb << 20;
  if (::geteuid() == 0) {
    SandboxUser user;
    Status st = LookupSandboxUser(config_.user, &user);
    if (st.ok()) st = OwnRoot(cand->rootfs, user);
    if (!st.ok()) {
      StopCandidate(std::move(cand));
      return Failed("StartFailed", "deploy.local.user: " + st.message());
    }
    sbo.host_user = user;
    sbo.fallback = user;
    fs::create_directories(sbo.stage_dir, ec);
    ::chmod(sbo.stage_dir.c_str(), 0755);
  } else {
    sbo.fallback = SandboxUser{::geteuid(), ::getegid()};
  }

  DeployResult result;
  if (!StartAndCheck(cand.get(), LocalSandboxArgv(spec, cand->rootfs, kInfoFd, sbo), progress,
                     cancel, &result)) {
    result.changed = cand->proc != nullptr;  // a process was started (and is stopped now)
    StopCandidate(std::move(cand));
    return result;
  }

  // Healthy: new connections go to the new candidate, then the old one goes away.
  forwarder_->SetTarget(cand->dialer);
  std::unique_ptr<Candidate> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(current_);
    current_ = std::move(cand);
  }
  progress("healthy, switched");
  if (old) {
    Drain(*old);
    progress("stopping " + old->image);
    StopCandidate(std::move(old));
  }
  result.state = DeployState::kRolledOut;
  result.changed = true;
  result.message = req.image + " serving on 127.0.0.1:" + std::to_string(config_.port);
  return result;
}

bool LocalDeployer::StartAndCheck(Candidate* cand, const std::vector<std::string>& argv,
                                  const DeployProgressFn& progress, const CancelToken* cancel,
                                  DeployResult* result) {
  progress("starting");
  auto t0 = Clock::now();
  auto deadline = t0 + opts_.start_timeout;
  Status st;
  std::unique_ptr<SandboxProcess> proc;
  // Forked on the launcher thread: --die-with-parent follows the forking thread.
  if (!launcher_->Run([&] {
        st = SandboxProcess::Start(argv, kInfoFd, opts_.output_tail_bytes, opts_.start_timeout,
                                   &proc);
      }))
    st = Status::Unavailable("the local deploy target is shut down");
  if (!st.ok()) {
    *result = Failed("StartFailed", "cannot start the sandbox: " + st.message());
    return false;
  }
  cand->proc = std::move(proc);
  st = NetnsDialer::Open(cand->proc->sandbox_pid(), &cand->dialer);
  if (!st.ok()) {
    // Usually the process already exited (a crash at start-up): report that, with its output.
    // Waits (up to 1 s) for the supervision to end: the exit, and the output's last words.
    cand->proc->DrainOutput(std::chrono::seconds(1));
    int code = 0;
    const bool exited = cand->proc->Exited(&code);
    std::string what =
        exited ? "the process exited with status " + std::to_string(code) + " before it was healthy"
               : "cannot enter the candidate's network: " + st.message();
    *result = Failed("StartFailed", WithOutput(what, cand->proc->OutputTail()));
    return false;
  }

  progress("waiting for " + config_.health_path);
  std::string last = "no answer yet";
  for (;;) {
    if (Interrupted(cancel)) {
      *result = Failed("Cancelled", "deploy cancelled; the previous candidate keeps serving");
      return false;
    }
    int code = 0;
    if (cand->proc->Exited(&code)) {
      cand->proc->DrainOutput(std::chrono::milliseconds(500));
      *result =
          Failed("StartFailed", WithOutput("the process exited with status " +
                                               std::to_string(code) + " before it was healthy",
                                           cand->proc->OutputTail()));
      return false;
    }
    int fd = -1;
    Status c = cand->dialer->Connect(config_.port, kProbeTimeout, &fd);
    if (c.ok()) {
      int status = 0;
      c = HttpGetStatus(fd, config_.health_path, kProbeTimeout, &status);
      close(fd);
      if (c.ok() && status == 200) return true;
      last = c.ok() ? "HTTP " + std::to_string(status) : c.message();
    } else {
      last = c.message();
    }
    if (Clock::now() >= deadline) {
      *result = Failed("HealthCheckFailed",
                       WithOutput("GET " + config_.health_path + " on port " +
                                      std::to_string(config_.port) + " did not answer 200 within " +
                                      Seconds(opts_.start_timeout) + " (last: " + last + ")",
                                  cand->proc->OutputTail()));
      return false;
    }
    std::this_thread::sleep_for(opts_.poll_interval);
  }
}

Status LocalDeployer::FetchBlob(const std::string& repo, const std::string& digest,
                                std::string* data) {
  if (!IsSha256Digest(digest)) return Status::InvalidArgument("bad layer digest " + digest);
  fs::path dir = fs::path(work_dir_) / "blobs" / "sha256";
  fs::path file = dir / digest.substr(7);
  {
    std::ifstream in(file, std::ios::binary);
    if (in) {
      std::string cached((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (Sha256Hex(cached) == digest.substr(7)) {
        *data = std::move(cached);
        return Status::Ok();
      }
    }
  }
  if (Status st = registry_->GetBlob(repo, digest, data); !st.ok()) return st;
  std::error_code ec;
  fs::create_directories(dir, ec);
  // The cache is best effort: a failed write only means fetching again.
  WriteFileAtomic(file.string(), *data, 0644, Durability::kAtomicOnly);
  return Status::Ok();
}

Status LocalDeployer::FetchImage(const std::string& repo, const std::string& digest,
                                 const DeployProgressFn& progress, const CancelToken* cancel,
                                 Fetched* out) {
  std::string body, media_type, got;
  if (Status st = registry_->GetManifest(repo, digest, &body, &media_type, &got); !st.ok())
    return st;
  json m = json::parse(body, nullptr, false);
  if (m.is_discarded() || !m.is_object())
    return Status::InvalidArgument("the manifest is not JSON");
  if (m.contains("manifests")) {  // an index / manifest list: pick linux/amd64
    std::string pick;
    if (m["manifests"].is_array()) {
      for (const auto& e : m["manifests"]) {
        if (!e.is_object() || !e.contains("platform") || !e["platform"].is_object()) continue;
        if (e["platform"].value("os", "") == "linux" &&
            e["platform"].value("architecture", "") == "amd64") {
          pick = e.value("digest", "");
          break;
        }
      }
    }
    if (pick.empty()) return Status::NotFound("the image index has no linux/amd64 manifest");
    if (Status st = registry_->GetManifest(repo, pick, &body, &media_type, &got); !st.ok())
      return st;
    m = json::parse(body, nullptr, false);
    if (m.is_discarded() || !m.is_object())
      return Status::InvalidArgument("the manifest is not JSON");
  }
  if (!m.contains("config") || !m["config"].is_object() || !m.contains("layers") ||
      !m["layers"].is_array())
    return Status::InvalidArgument("the manifest has no config or layers");
  std::string cfg;
  if (Status st = registry_->GetBlob(repo, m["config"].value("digest", ""), &cfg); !st.ok())
    return st;
  out->config = json::parse(cfg, nullptr, false);
  if (out->config.is_discarded() || !out->config.is_object())
    return Status::InvalidArgument("the image config is not JSON");
  out->layers.clear();
  for (const auto& l : m["layers"]) {
    if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string())
      return Status::InvalidArgument("a manifest layer has no digest");
    out->layers.push_back(l["digest"].get<std::string>());
  }
  // Issue 19: which cached blobs this image uses (<work_dir>/images/<hex>.json), so that the
  // storage collector keeps the blobs of the deployed and latest images (storage/inventory.h).
  if (IsSha256Digest(digest)) {
    std::error_code ec;
    fs::create_directories(fs::path(work_dir_) / "images", ec);
    WriteFileAtomic((fs::path(work_dir_) / "images" / (digest.substr(7) + ".json")).string(),
                    json{{"image", digest}, {"layers", out->layers}}.dump(), 0644,
                    Durability::kAtomicOnly);
  }
  size_t i = 0;
  for (const auto& d : out->layers) {
    if (Interrupted(cancel)) return Status::Cancelled("deploy cancelled");
    std::string blob;
    if (Status st = FetchBlob(repo, d, &blob); !st.ok()) return st;
    progress("layer " + std::to_string(++i) + "/" + std::to_string(out->layers.size()) + " " +
             d.substr(0, 19) + " (" + std::to_string(blob.size()) + " bytes)");
  }
  return Status::Ok();
}

}  // namespace kiln
