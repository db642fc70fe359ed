#include "builder/buildah_builder.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "builder/base_store.h"
#include "builder/containerfile_images.h"
#include "builder/oci_image.h"
#include "builder/oci_layout_pusher.h"
#include "builder/step_cache_policy.h"
#include "builder/store_image.h"
#include "builder/store_image_pusher.h"
#include "common/file_util.h"
#include "common/safe_remove.h"
#include "config/base_image_policy.h"
#include "config/host_checks.h"
#include "registry/registry_client.h"

namespace kiln {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr char kOciRef[] = "img";
constexpr int kExitLoad = 201;  // the load script could not load a base image

std::string ReadSmallFile(const std::string& path) {
  std::string s;
  ReadFile(path, &s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The last meaningful lines of buildah output, for error messages.
std::string LastLines(const std::string& text, size_t n) {
  size_t pos = text.size();
  size_t count = 0;
  while (pos > 0 && count < n) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    if (nl + 1 < pos) ++count;
    pos = nl;
  }
  std::string s = text.substr(pos);
  while (!s.empty() && (s.front() == '\n')) s.erase(0, 1);
  while (!s.empty() && (s.back() == '\n')) s.pop_back();
  return s;
}

bool IsHexDigest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Splits "host/repo[:tag][@sha256:x]" into host, repository and reference (tag or digest).
bool SplitImage(const std::string& image, std::string* host, std::string* repo, std::string* ref) {
  size_t slash = image.find('/');
  if (slash == std::string::npos) return false;
  *host = image.substr(0, slash);
  std::string rest = image.substr(slash + 1);
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    *ref = rest.substr(at + 1);
    rest = rest.substr(0, at);
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos) rest = rest.substr(0, colon);
  } else {
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find('/', colon) == std::string::npos) {
      *ref = rest.substr(colon + 1);
      rest = rest.substr(0, colon);
    } else {
      *ref = "latest";
    }
  }
  *repo = rest;
  return !host->empty() && !repo->empty() && !ref->empty();
}

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

// Owned by `uid:gid` with `mode`; created when missing. Refuses a symlink.
// buildah re-executes itself from a sealed memfd to start a step; under concurrent builds the
// kernel sometimes answers EBUSY ("sealing memfd copy: Device or resource busy") and the step
// fails before the candidate's command ran. Nothing of the candidate's is involved: retried.
bool TransientRuntimeFailure(const std::string& output) {
  return output.find("sealing memfd copy") != std::string::npos;
}

Status OwnedDir(const std::string& dir, uid_t uid, gid_t gid, mode_t mode) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::Internal("cannot create directory " + dir);
  if ((st.st_uid != uid || st.st_gid != gid) && ::lchown(dir.c_str(), uid, gid) != 0)
    return Status::Internal("cannot chown " + dir);
  if ((st.st_mode & 07777) != mode && ::chmod(dir.c_str(), mode) != 0)
    return Status::Internal("cannot chmod " + dir);
  return Status::Ok();
}

// chown -R without following symlinks (files kiln wrote for the build user).
void ChownTree(const std::string& dir, uid_t uid, gid_t gid) {
  std::error_code ec;
  ::lchown(dir.c_str(), uid, gid);
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    ::lchown(it->path().c_str(), uid, gid);
}

// Image names present in a containers/storage overlay store (kiln reads the build user's file:
// untrusted, size-bounded, only used to decide whether to load a base image again).
std::set<std::string> StoredImageNames(const std::string& root) {
  std::string text;
  if (!ReadFileBeneath(root, "overlay-images/images.json", 64 << 20, &text).ok()) return {};
  return StoredImageNamesFromJson(text);
}

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

// The state directory when `storage` is <state>/domains/<d>/candidates/<c>/storage, else the
// candidate directory (storage's parent).
std::string StateDirOf(const std::string& storage) {
  fs::path p(storage);
  fs::path cand = p.parent_path();
  fs::path cands = cand.parent_path();
  fs::path dom = cands.parent_path();
  fs::path doms = dom.parent_path();
  if (p.filename() == "storage" && cands.filename() == "candidates" && doms.filename() == "domains")
    return doms.parent_path().string();
  return cand.string();
}

}  // namespace

struct BuildahBuilder::BuildUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

BuildahBuilder::BuildahBuilder(ProcessRunner* runner, std::string buildah,
                               std::shared_ptr<const Config> site)
    : runner_(runner), buildah_(std::move(buildah)), site_(std::move(site)) {}
BuildahBuilder::~BuildahBuilder() = default;

std::string BuildahBuilder::RegistryHost(const std::string& url) {
  std::string s = url;
  auto p = s.find("://");
  if (p != std::string::npos) s = s.substr(p + 3);
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::vector<ChildMount> BuildahBuilder::BaseStoreMounts(const std::string& store, bool writable) {
  const std::string at = std::string(kSandboxRoot) + "/bases";
  std::vector<ChildMount> m = {{store, at, "", MS_BIND, "", /*make_target=*/true}};
  if (!writable) m.push_back({"", at, "", MS_REMOUNT | MS_BIND | MS_RDONLY, "", false});
  return m;
}

std::string BuildahBuilder::ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

void BuildahBuilder::ScanContainerfile(const std::string& text, std::vector<std::string>* workdirs,
                                       std::vector<std::string>* froms) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string word;
    ls >> word;
    word = Upper(word);
    std::string arg;
    ls >> arg;
    if (word == "WORKDIR" && !arg.empty() && arg[0] == '/' && workdirs) {
      if (arg.back() != '/') arg += '/';
      workdirs->push_back(arg);
    } else if (word == "FROM" && froms) {
      while (arg.rfind("--", 0) == 0 && ls >> arg) {
      }
      if (!arg.empty()) froms->push_back(arg);
    }
  }
}

std::vector<std::string> BuildahBuilder::BaseImages(
    const std::string& text, const std::map<std::string, std::string>& args) {
  std::vector<std::string> images;
  for (const ContainerfileImage& i : ContainerfileImages(text, args)) images.push_back(i.image);
  return images;
}

void BuildahBuilder::SecretPaths(const Config* site, const BuildJob& job,
                                 std::vector<std::string>* files, std::vector<std::string>* dirs) {
  Config local;  // without the whole config: the job's own registry
  local.registries[job.registry.name] = job.registry;
  HostFacts facts;
  facts.list_dir = ListRegularFiles;
  std::set<std::string> f;
  for (const auto& [key, file] : SecretFiles(site ? *site : local, facts)) f.insert(file);
  if (site)
    for (const auto& [key, file] : SecretFiles(local, facts)) f.insert(file);
  files->assign(f.begin(), f.end());
  dirs->assign({"/run/secrets", "/var/run/secrets"});
}

Status BuildahBuilder::LookupUser(const std::string& name, BuildUser* user) const {
  struct passwd pw;
  struct passwd* res = nullptr;
  char buf[4096];
  if (::getpwnam_r(name.c_str(), &pw, buf, sizeof buf, &res) != 0 || res == nullptr)
    return Status::Unavailable("build user '" + name +
                               "' does not exist (scripts/setup.sh creates it; see "
                               "`kiln check-config`)");
  if (pw.pw_uid == 0 || pw.pw_gid == 0 || pw.pw_uid == ::geteuid())
    return Status::Unavailable("build user '" + name + "' must be neither root nor kiln's uid");
  user->name = name;
  user->uid = pw.pw_uid;
  user->gid = pw.pw_gid;
  return Status::Ok();
}

RegistryClient* BuildahBuilder::Client(const RegistryConfig& reg) {
  return clients_.Get(RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file});
}

Status BuildahBuilder::PrepareDirs(const BuildJob& job, const BuildUser& user) {
  // kiln's own directories: root only.
  for (const auto& d : {job.storage_dir, job.cache_dir}) {
    Status st = OwnedDir(d, ::geteuid(), ::getegid(), 0700);
    if (!st.ok()) return st;
  }
  // The build user's: its store, HOME, runtime dir, export and import layouts; the source is
  // bind-mounted on src (read-only) inside the namespace.
  const std::string b = job.storage_dir + "/rootless";
  for (const char* sub :
       {"", "/root", "/run", "/run-bases", "/home", "/xdg", "/oci", "/bases", "/src"}) {
    Status st = OwnedDir(b + sub, user.uid, user.gid, 0700);
    if (!st.ok()) return st;
  }
  Status st = OwnedDir(job.cache_dir + "/rootless", user.uid, user.gid, 0700);
  if (!st.ok()) return st;
  // The domain's shared base store (builder/base_store.h): kiln's directory, the build user's
  // store inside it; builds get it read-only.
  const BaseStorePaths bs = BaseStoreFor(job.cache_dir, user.uid);
  st = OwnedDir(bs.dir, ::geteuid(), ::getegid(), 0700);
  if (st.ok()) st = OwnedDir(bs.store, user.uid, user.gid, 0700);
  if (!st.ok()) return st;
  std::error_code ec;
  fs::create_directories(kSandboxRoot, ec);
  ::chmod(kSandboxRoot, 0755);
  return Status::Ok();
}

Status BuildahBuilder::PrepareBases(const BuildJob& job, const BuildUser& user,
                                    const std::string& containerfile,
                                    std::vector<std::string>* in_use, bool* agent_fault,
                                    const OutputFn& out, const CancelToken* cancel,
                                    std::map<std::string, int64_t>* timings) {
  const std::string host = RegistryHost(job.registry.url);
  std::map<std::string, std::string> args = job.build.containerfile.build_args;
  args["KILN_REGISTRY"] = host;
  std::vector<std::string> images = BaseImages(containerfile, args);
  // The policy decides before anything is fetched (no registry call, no skopeo).
  const BaseImagePolicy policy =
      site_ && site_->domains.count(job.domain)
          ? BaseImagePolicy::ForDomain(*site_, job.domain)
          : BaseImagePolicy(job.domain, host, job.repository, job.build.base_images, {});
  for (const std::string& image : images) {
    Status st = policy.Check(image);
    if (!st.ok()) {
      *agent_fault = true;
      return st;
    }
  }
  // 1. Resolve every base image to its registry digest (a moved tag is loaded again).
  const auto t_resolve = std::chrono::steady_clock::now();
  RegistryClient* client = Client(job.registry);
  std::vector<BaseWant> wanted;
  std::map<std::string, std::string> source;         // image -> "docker://..." reference for skopeo
  std::map<std::string, BaseLayerBlob> base_layers;  // by diff_id
  for (const std::string& image : images) {
    std::string ihost, repo, ref;
    if (!SplitImage(image, &ihost, &repo, &ref) || RegistryHostOf(ihost) != RegistryHostOf(host)) {
      *agent_fault = true;
      return Status::FailedPrecondition(
          "base image '" + image + "' is not in the domain's registry " + host +
          ": builds have no network, kiln provides base images from " + host + " only");
    }
    std::string body, type, digest;
    Status st = client->GetManifest(repo, ref, &body, &type, &digest);
    if (!st.ok()) {
      if (st.code() == Status::Code::kNotFound) {
        *agent_fault = true;
        return Status::FailedPrecondition("base image '" + image + "' not found in registry " +
                                          host);
      }
      if (st.code() == Status::Code::kPermissionDenied)
        return Status::PermissionDenied("registry " + host +
                                        " rejected kiln's credential (check the registry's "
                                        "auth_file) while resolving base image " +
                                        image);
      return Status::Unavailable("registry " + host +
                                 " is unreachable while resolving base image " + image + ": " +
                                 st.message());
    }
    const bool digest_ref = ref.rfind("sha256:", 0) == 0;
    // Issue 18: which of the base's layers the registry already holds (for Push).
    for (auto& [diff_id, blob] : BaseLayers(client, repo, body, digest))
      base_layers.emplace(diff_id, std::move(blob));
    source[image] = "docker://" + host + "/" + repo + (digest_ref ? "@" : ":") + ref;
    wanted.push_back({image, digest});
    in_use->push_back(BaseStoreName(image));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (push_bases_.size() > 1024 && !push_bases_.count(job.storage_dir))
      push_bases_.clear();  // removed candidates' entries; a push without one only reuses less
    push_bases_[job.storage_dir] = std::move(base_layers);
  }
  (*timings)["resolve_ms"] = MsSince(t_resolve);
  // 2. The domain's shared store has them (the common case: no lock, no process)?
  const auto t_bases = std::chrono::steady_clock::now();
  const BaseStorePaths bs = BaseStoreFor(job.cache_dir, user.uid);
  std::vector<BaseWant> missing =
      MissingBases(wanted, ParseBaseMarker(ReadSmallFile(bs.marker)), StoredImageNames(bs.store));
  if (missing.empty()) {
    (*timings)["base_prep_ms"] = MsSince(t_bases);
    return Status::Ok();
  }
  // 3. Fill it, once per domain: under the store's lock, look again (another candidate of the
  // domain may just have loaded them), fetch with kiln's credential into OCI layouts, load them
  // into the store as the build user (the only time it is writable), then record the digests.
  FileLock lock(bs.lock, LOCK_EX);  // blocks: worker threads only
  if (!lock.held()) return Status::Internal("cannot lock the domain's base image store");
  std::map<std::string, std::string> marker = ParseBaseMarker(ReadSmallFile(bs.marker));
  missing = MissingBases(wanted, marker, StoredImageNames(bs.store));
  const std::string b = job.storage_dir + "/rootless";
  std::vector<std::string> layouts;
  auto clear_layouts = [&] {
    for (const auto& l : layouts) RemoveTreeBeneath(job.storage_dir, "rootless/" + l);
  };
  std::ostringstream load;  // the build user's script: every layout into the shared store
  auto q = ShellQuote;
  const std::string m = kSandboxRoot;
  load << "bl() { " << q(buildah_) << " --root " << q(m + "/bases") << " --runroot "
       << q(m + "/c/run-bases") << " --storage-driver overlay \"$@\"; }\n";
  for (size_t n = 0; n < missing.size(); ++n) {
    const std::string& image = missing[n].image;
    if (cancel && cancel->cancelled()) {
      clear_layouts();
      return Status::Cancelled("build cancelled");
    }
    const std::string rel = "bases/" + std::to_string(n);
    const std::string dir = b + "/" + rel;
    std::error_code ec;
    // bases/ is the build user's: never follow a link it planted.
    Status rm = RemoveTreeBeneath(job.storage_dir, "rootless/" + rel);
    if (!rm.ok()) return Status::Internal("cannot clear the base image layout: " + rm.message());
    layouts.push_back(rel);
    if (out) out("kiln: fetching base image " + image + " into the domain's base store\n");
    // kiln's own tool with kiln's credential; the build user only ever sees the layout.
    ProcessSpec spec;
    spec.argv = {"skopeo", "copy", "--quiet", "--retry-times", "2"};
    if (job.registry.url.rfind("http://", 0) == 0) spec.argv.push_back("--src-tls-verify=false");
    if (job.registry.auth_file)
      spec.argv.insert(spec.argv.end(), {"--src-authfile", *job.registry.auth_file});
    if (job.registry.ca_file) {
      std::string cert_dir = job.storage_dir + "/certs.d";
      fs::create_directories(cert_dir, ec);
      fs::copy_file(*job.registry.ca_file, cert_dir + "/ca.crt",
                    fs::copy_options::overwrite_existing, ec);
      spec.argv.insert(spec.argv.end(), {"--src-cert-dir", cert_dir});
    }
    spec.argv.insert(spec.argv.end(), {source[image], "oci:" + dir + ":" + kOciRef});
    spec.env = std::map<std::string, std::string>{{"PATH", kPath}, {"HOME", job.storage_dir}};
    spec.timeout = std::chrono::seconds(600);
    // Issue 19: the base fetch counts against the build's deadline (RegistryDeadlineScope).
    auto left = RegistryDeadlineLeft();
    if (left && *left < spec.timeout) spec.timeout = std::max(*left, std::chrono::milliseconds(1));
    ProcessResult r = runner_->Run(spec, nullptr, cancel);
    if (r.cancelled || !r.start_status.ok() || r.exit_code != 0) clear_layouts();
    if (r.cancelled) return Status::Cancelled("build cancelled");
    if (!r.start_status.ok())
      return Status::Unavailable("cannot run skopeo: " + r.start_status.message());
    if (r.timed_out)  // issue 19
      return Status::Unavailable("registry " + host + " did not deliver base image " + image +
                                 " within the build's timeout");
    if (r.exit_code != 0) {
      const std::string& o = r.output;
      if (o.find("unauthorized") != std::string::npos ||
          o.find("authentication required") != std::string::npos)
        return Status::PermissionDenied("registry " + host +
                                        " rejected kiln's credential while fetching " + image);
      return Status::Unavailable("could not fetch base image " + image + " from registry " + host +
                                 ": " + LastLines(o, 1));
    }
    ChownTree(dir, user.uid, user.gid);
    const std::string local = "localhost" + m + "/c/" + rel;  // the name `pull oci:<dir>` gives
    load << "id=$(bl pull -q " << q("oci:" + m + "/c/" + rel + ":" + kOciRef) << ") || { echo "
         << q("kiln: could not load base image " + image) << " >&2; exit " << kExitLoad << "; }\n"
         << "bl tag \"$id\" " << q(BaseStoreName(image)) << " || exit " << kExitLoad << "\n"
         << "bl rmi " << q(local) << " >/dev/null 2>&1 || true\n";
  }
  if (!missing.empty()) {
    ProcessSpec spec = SandboxSpec(job, user, load.str(), /*bases_writable=*/true);
    spec.timeout = std::chrono::seconds(600);
    ProcessResult r = runner_->Run(spec, out, cancel);
    clear_layouts();
    if (r.cancelled) return Status::Cancelled("build cancelled");
    if (!r.start_status.ok())
      return Status::Unavailable("cannot run buildah: " + r.start_status.message());
    if (r.exit_code != 0)
      return Status::Unavailable("builder could not load a base image: " + LastLines(r.output, 1));
    for (const BaseWant& w : missing) marker[w.image] = w.digest;
    // A hint (a lost marker only means loading again): atomic, not fsynced.
    WriteFileAtomic(bs.marker, BaseMarkerText(marker), 0644, Durability::kAtomicOnly);
  }
  (*timings)["base_prep_ms"] = MsSince(t_bases);
  return Status::Ok();
}

std::map<std::string, BaseLayerBlob> BuildahBuilder::BaseLayers(RegistryClient* client,
                                                                const std::string& repo,
                                                                const std::string& manifest,
                                                                const std::string& digest) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = base_layers_.find(repo + "@" + digest);
    if (it != base_layers_.end()) return it->second;
  }
  // Once per base digest: its config (a few KB) for the diff_ids. Without it, Push reads and
  // uploads (or HEADs) the base layers from the store instead.
  const std::string config_digest = BaseConfigDigest(manifest);
  std::string config;
  if (config_digest.empty() || !client->GetBlob(repo, config_digest, &config).ok()) return {};
  std::map<std::string, BaseLayerBlob> layers = BaseLayerBlobs(repo, manifest, config);
  std::lock_guard<std::mutex> l(mu_);
  if (base_layers_.size() > 256) base_layers_.clear();  // moved tags leave old digests behind
  base_layers_[repo + "@" + digest] = layers;
  return layers;
}

std::string BuildahBuilder::StoreFunction() const {
  const std::string m = kSandboxRoot;
  return "b() { " + ShellQuote(buildah_) + " --root " + ShellQuote(m + "/c/root") + " --runroot " +
         ShellQuote(m + "/c/run") + " --storage-driver overlay --storage-opt " +
         ShellQuote("overlay.imagestore=" + m + "/bases") + " \"$@\"; }\n";
}

ProcessSpec BuildahBuilder::SandboxSpec(const BuildJob& job, const BuildUser& user,
                                        const std::string& inner_script,
                                        bool bases_writable) const {
  const std::string m = kSandboxRoot;
  const std::string b = job.storage_dir + "/rootless";
  // Issue 18: kiln's child sets all of this up with system calls (ChildConfinement) and execs
  // the build user's shell; before, it was `unshare --net --pid --fork --mount-proc` -> sh ->
  // ip, ~10 mount/mkdir, prlimit, setpriv, env: ~15 process starts per build.
  ChildConfinement c;
  // buildah runs as PID 1's child in its own PID namespace with its own /proc: when it exits or
  // is killed, the kernel kills every process its RUN steps started, even ones that left the
  // process group; its mounts vanish with the mount namespace.
  c.new_pid_namespace = true;
  c.new_mount_namespace = true;
  c.mount_proc = true;
  // Loopback only: build steps can talk to themselves, to nothing else.
  c.new_net_namespace = job.build.network != "host";
  // A private tree the build user can reach: its directory, its domain's cache, the source.
  c.mounts = {{"kiln-build", m, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m", false},
              {b, m + "/c", "", MS_BIND, "", true},
              {job.cache_dir + "/rootless", m + "/cache", "", MS_BIND, "", true},
              {job.source_dir, m + "/c/src", "", MS_BIND, "", false},
              {"", m + "/c/src", "", MS_REMOUNT | MS_BIND | MS_RDONLY, "", false}};
  // The domain's shared base store: read-only for builds (they can neither change nor delete a
  // base image in it); writable only for kiln's own load script (PrepareBases).
  for (ChildMount& x : BaseStoreMounts(BaseStoreFor(job.cache_dir, user.uid).store, bases_writable))
    c.mounts.push_back(std::move(x));
  using When = ChildMount::When;
  auto hide_dir = [&](const std::string& d) {
    c.mounts.push_back(
        {"kiln-hidden", d, "tmpfs", MS_RDONLY, "size=4k,mode=0700", false, When::kIfDirectory});
  };
  // Hide kiln's state, HOME and credential from anything that gets out of buildah's chroot.
  std::set<std::string> hide = {StateDirOf(job.storage_dir)};
  if (!job.home_dir.empty()) hide.insert(job.home_dir);
  for (const auto& h : hide) hide_dir(h);
  // Every secret kiln knows of, of every domain (not just this one's registry credential).
  std::vector<std::string> secret_files, secret_dirs;
  SecretPaths(site_.get(), job, &secret_files, &secret_dirs);
  for (const auto& f : secret_files)
    c.mounts.push_back({"/dev/null", f, "", MS_BIND, "", false, When::kIfRegularFile});
  for (const auto& d : secret_dirs) hide_dir(d);
  const int64_t fsize = job.build.max_file_mb * 1024 * 1024;
  c.rlimits = {{RLIMIT_FSIZE, static_cast<uint64_t>(fsize)}};
  // The build user with its own groups (as `setpriv --init-groups`); no no_new_privs: rootless
  // buildah needs the setuid newuidmap/newgidmap helpers.
  c.user = std::make_pair(user.uid, user.gid);
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(user.name.c_str(), user.gid, groups.data(), &n) >= 0) {
    groups.resize(static_cast<size_t>(n));
    c.groups = groups;
  } else {
    c.groups = {user.gid};
  }
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", inner_script};
  spec.env = std::map<std::string, std::string>{{"PATH", kPath},
                                                {"HOME", m + "/c/home"},
                                                {"XDG_RUNTIME_DIR", m + "/c/xdg"},
                                                {"TMPDIR", m + "/cache"},
                                                {"LANG", "C.UTF-8"},
                                                {"BUILDAH_LAYERS", "true"},
                                                {"STORAGE_DRIVER", "overlay"},
                                                {"BUILDAH_ISOLATION", "chroot"}};
  spec.cwd = "/";
  spec.confine = std::move(c);
  return spec;
}

void BuildahBuilder::RemoveWorkingContainers(const BuildJob& job, const BuildUser& user) {
  const std::string m = kSandboxRoot;
  ProcessSpec spec = SandboxSpec(job, user, StoreFunction() + "b rm --all\n");
  spec.timeout = std::chrono::seconds(30);
  runner_->Run(spec, nullptr, nullptr);
}

BuildResult BuildahBuilder::Build(const BuildJob& job, const OutputFn& out,
                                  const CancelToken* cancel) {
  BuildResult res;
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t0)
        .count();
  };
  const auto& cf = job.build.containerfile;
  std::string file = job.source_dir + "/" + cf.file;
  if (!fs::is_regular_file(file)) {
    res.status = Status::InvalidArgument("Containerfile '" + cf.file + "' not found in the source");
    res.compile_failed = true;
    return res;
  }
  BuildUser user;
  Status st = LookupUser(job.build.user, &user);
  if (st.ok()) st = PrepareDirs(job, user);
  if (!st.ok()) {
    res.status = st;
    return res;
  }
  const std::string text = ReadSmallFile(file);
  std::vector<std::string> bases;  // their names in the shared base store
  bool agent_fault = false;
  st = PrepareBases(job, user, text, &bases, &agent_fault, out, cancel, &res.timings);
  if (!st.ok() && agent_fault && out) out("kiln: " + st.message() + "\n");
  if (!st.ok()) {
    res.status = st;
    res.compile_failed = agent_fault;
    res.elapsed_ms = elapsed();
    return res;
  }
  const std::string b = job.storage_dir + "/rootless";
  const std::string m = kSandboxRoot;
  const std::string iid_in = m + "/c/iid";
  std::error_code ec;
  fs::remove(b + "/iid", ec);

  auto q = ShellQuote;
  std::ostringstream in;
  // The candidate's own store, with the domain's base store as a read-only image store.
  in << StoreFunction();
  // Base images an older kiln loaded into the candidate's own store would shadow the shared
  // ones: untag them once (their layers go with the candidate's next prune).
  {
    const std::set<std::string> own = StoredImageNames(b + "/root");
    for (const std::string& name : bases)
      if (own.count(name)) in << "b rmi " << q(name) << " >/dev/null 2>&1 || true\n";
  }
  std::error_code ec_marker;
  fs::remove(job.storage_dir + "/kiln-bases.json", ec_marker);
  std::string host = RegistryHost(job.registry.url);
  std::string src = m + "/c/src";
  // --force-rm: a failed step must not leave its working container in the candidate's storage.
  // Issue 18: buildah's step cache only where a step can be reused (builder/step_cache_policy.h).
  std::map<std::string, std::string> step_args = cf.build_args;
  step_args.emplace("KILN_REGISTRY", host);
  const StepCacheDecision step_cache = DecideStepCache(text, step_args, cf.step_cache);
  if (out)
    out("kiln: " + std::string(step_cache.use_layers ? "step cache on: " : "step cache off: ") +
        step_cache.reason + "\n");
  std::vector<std::string> a = {
      "build",        "--isolation",
      "chroot",       step_cache.use_layers ? "--layers" : "--layers=false",
      "--force-rm",   "--pull=never",
      "-f",           src + "/" + cf.file,
      "--iidfile",    iid_in,
      "--build-arg",  "KILN_REGISTRY=" + host,
      "--annotation", "io.kiln.build-key=" + job.key,
      "--annotation", "io.kiln.candidate=" + job.candidate};
  // Manifest annotations, not config labels (issue 18): buildah 1.28 turns every --label into
  // a LABEL step of its own, committed as one more layer on every build (the build key changes
  // each time, so those steps never hit the layer cache); annotations cost nothing, and the
  // same content gives the same config (as in layered mode).
  if (!job.commit.empty())
    a.insert(a.end(), {"--annotation", "org.opencontainers.image.revision=" + job.commit});
  if (cf.target) a.insert(a.end(), {"--target", *cf.target});
  for (const auto& [k, v] : cf.build_args) a.insert(a.end(), {"--build-arg", k + "=" + v});
  a.insert(a.end(), {"-t", host + "/" + job.repository + ":" + job.tag, src + "/" + cf.context});
  in << "b";
  for (const auto& x : a) in << " " << q(x);
  in << " || exit $?\n";
  ProcessSpec spec = SandboxSpec(job, user, in.str());
  spec.timeout = std::chrono::seconds(job.build.timeout_s);
  // Issue 18: nothing after `buildah build`: Push reads the image from the store itself.
  const auto t_build = std::chrono::steady_clock::now();
  ProcessResult r = runner_->Run(spec, out, cancel);
  if (r.start_status.ok() && !r.cancelled && !r.timed_out && r.exit_code != 0 &&
      TransientRuntimeFailure(r.output)) {
    // buildah's runtime could not start a step (see TransientRuntimeFailure): once more, from
    // the layer cache, before anyone is told the build failed.
    RemoveWorkingContainers(job, user);
    if (out) out("kiln: buildah could not start a build step (transient); retrying once\n");
    r = runner_->Run(spec, out, cancel);
  }
  res.timings["build_ms"] = MsSince(t_build);
  res.elapsed_ms = elapsed();
  if (!r.start_status.ok()) {
    res.status = Status::Unavailable("cannot run buildah: " + r.start_status.message());
    return res;
  }
  if (r.cancelled || r.timed_out) {
    RemoveWorkingContainers(job, user);
    res.status = r.cancelled ? Status::Cancelled("build cancelled")
                             : Status::DeadlineExceeded("build timed out after " +
                                                        std::to_string(job.build.timeout_s) + " s");
    return res;
  }
  if (r.exit_code != 0) {
    std::vector<std::string> workdirs;
    ScanContainerfile(text, &workdirs, nullptr);
    DiagnosticsOptions dopts;
    dopts.source_roots = workdirs;
    for (const char* root : {"/src/", "/workspace/", "/go/src/", "/app/"})
      dopts.source_roots.push_back(root);
    // Issue 16: repo-relative paths (the source's host path, go.mod's module) and the step.
    dopts.repo_root = job.source_dir;
    std::string go_mod;
    if (ReadFileBeneath(job.source_dir, "go.mod", 64 << 10, &go_mod).ok())
      dopts.go_module = GoModulePath(go_mod);
    res.diagnostics = ParseDiagnostics(r.output, dopts);
    const std::string& o = r.output;
    bool infra = o.find("error creating build container") != std::string::npos &&
                 o.find("image not known") == std::string::npos;
    res.compile_failed = !infra;
    const std::optional<FailedStep> step = FindFailedStep(o);
    // A failure outside a RUN step (a parse error, COPY of a missing path) is the Containerfile's.
    if (!infra && (!step || !IsRunInstruction(step->instruction)))
      res.failure_kind = "containerfile";
    res.status =
        infra ? Status::Unavailable("builder could not prepare the build: " + LastLines(o, 1))
        : step
            ? Status::FailedPrecondition(DescribeFailedStep(*step))
            : Status::FailedPrecondition("build failed (exit " + std::to_string(r.exit_code) + ")");
    return res;
  }
  std::string iid;
  st = ReadFileBeneath(b, "iid", 1024, &iid);
  while (!iid.empty() && (iid.back() == '\n' || iid.back() == ' ')) iid.pop_back();
  if (iid.rfind("sha256:", 0) == 0) iid = iid.substr(7);
  if (!st.ok() || !IsHexDigest(iid)) {
    res.status = Status::Internal("buildah succeeded but wrote no image id");
    return res;
  }
  res.image_id = iid;
  res.status = Status::Ok();
  return res;
}

namespace {

// A failed upload to `host` in the agent's terms (never the credential).
Status PushFailure(const std::string& host, const Status& st) {
  switch (st.code()) {
    case Status::Code::kPermissionDenied:
      return Status::PermissionDenied("registry " + host +
                                      " rejected kiln's credential (check the registry's "
                                      "auth_file)");
    case Status::Code::kUnavailable:
      return Status::Unavailable("registry " + host + " is unreachable: " + st.message());
    case Status::Code::kCancelled:
      return Status::Cancelled("push cancelled");
    default:
      return Status::Internal("push to " + host + " failed: " + st.message());
  }
}

}  // namespace

Status BuildahBuilder::Export(const BuildJob& job, const BuildUser& user, const std::string& iid,
                              const CancelToken* cancel) {
  // Gzip level 1, or level 0 (stored blocks: buildah 1.28 ignores --disable-compression here)
  // when the layers need no compression (a loopback registry).
  const char* level = StoreLayersUncompressed(job.build.compression, job.registry.url) ? "0" : "1";
  const std::string m = kSandboxRoot;
  const std::string script = StoreFunction() + "b push --quiet --compression-level " + level + " " +
                             ShellQuote(iid) + " " + ShellQuote("oci:" + m + "/c/oci:" + kOciRef) +
                             "\n";
  ProcessSpec spec = SandboxSpec(job, user, script);
  spec.timeout = std::chrono::seconds(job.build.timeout_s);
  ProcessResult r = runner_->Run(spec, nullptr, cancel);
  if (r.cancelled) return Status::Cancelled("push cancelled");
  if (!r.start_status.ok())
    return Status::Unavailable("cannot run buildah: " + r.start_status.message());
  if (r.timed_out || r.exit_code != 0)
    return Status::Unavailable("builder could not export the image: " + LastLines(r.output, 1));
  return Status::Ok();
}

PushResult BuildahBuilder::Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                                const CancelToken* cancel) {
  return PushImage(job, built, out, cancel, /*blobs_only=*/false);
}

PushResult BuildahBuilder::UploadBlobs(const BuildJob& job, const BuildResult& built,
                                       const OutputFn& out, const CancelToken* cancel) {
  return PushImage(job, built, out, cancel, /*blobs_only=*/true);
}

PushResult BuildahBuilder::PushImage(const BuildJob& job, const BuildResult& built,
                                     const OutputFn& out, const CancelToken* cancel,
                                     bool blobs_only) {
  PushResult res;
  auto t0 = std::chrono::steady_clock::now();
  std::string host = RegistryHost(job.registry.url);
  RegistryClient* client = Client(job.registry);
  BuildUser user;
  Status st = LookupUser(job.build.user, &user);
  if (!st.ok()) {
    res.status = st;
    return res;
  }
  // Issue 18: straight from the candidate's store (and the domain's base store), no export.
  OciPushResult r;
  {
    const auto t_read = std::chrono::steady_clock::now();
    StoreLimits limits;
    limits.max_file_bytes = static_cast<uint64_t>(job.build.max_file_mb) << 20;
    StoreImageReader reader(
        {job.storage_dir + "/rootless/root", BaseStoreFor(job.cache_dir, user.uid).store}, limits);
    StoreImage image;
    r.status = reader.ReadImage(built.image_id, &image);
    res.timings["read_ms"] = MsSince(t_read);
    if (r.status.ok()) {
      StorePushRequest req;
      req.repository = job.repository;
      req.tag = job.tag;
      req.compress = !StoreLayersUncompressed(job.build.compression, job.registry.url);
      req.blobs_only = blobs_only;
      req.annotations = {{"io.kiln.build-key", job.key}, {"io.kiln.candidate", job.candidate}};
      if (!job.commit.empty()) req.annotations["org.opencontainers.image.revision"] = job.commit;
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = push_bases_.find(job.storage_dir);
        if (it != push_bases_.end()) req.base_layers = it->second;
        auto c = push_compressed_.find(job.storage_dir);
        if (c != push_compressed_.end()) {
          if (!blobs_only) req.compressed = c->second;
          push_compressed_.erase(c);
        }
      }
      r = PushStoreImage(client, reader, image, req, out, cancel);
      if (blobs_only && r.status.ok() && !r.compressed.empty()) {
        std::lock_guard<std::mutex> l(mu_);
        if (push_compressed_.size() > 1024) push_compressed_.clear();  // only reuses less
        push_compressed_[job.storage_dir] = std::move(r.compressed);
      }
      res.timings["read_ms"] += r.read_ms;
      if (req.compress) res.timings["compress_ms"] = r.compress_ms;
    }
  }
  if (r.status.code() == Status::Code::kFailedPrecondition) {
    // A store kiln does not understand: buildah exports it (as before issue 18's fifth pass).
    if (out) out("kiln: " + r.status.message() + "; exporting the image with buildah instead\n");
    const auto t_export = std::chrono::steady_clock::now();
    st = Export(job, user, built.image_id, cancel);
    res.timings["export_ms"] = MsSince(t_export);
    OciPushRequest req;
    req.layout_dir = job.storage_dir + "/rootless/oci";
    req.ref_name = kOciRef;
    req.expect_config_digest = "sha256:" + built.image_id;
    req.repository = job.repository;
    req.tag = job.tag;
    req.blobs_only = blobs_only;
    if (!st.ok()) {  // buildah's failure, not the registry's
      res.status = st;
      res.elapsed_ms = MsSince(t0);
      return res;
    }
    r = PushOciLayout(client, req, out, cancel);
    if (r.status.ok() && !blobs_only) PruneOciLayout(req.layout_dir, req.ref_name);
  }
  res.elapsed_ms = MsSince(t0);
  if (!r.status.ok()) {
    res.status = PushFailure(host, r.status);
    return res;
  }
  res.status = Status::Ok();
  if (blobs_only) return res;  // no manifest, no tag moved
  res.digest = r.digest;
  res.ref = host + "/" + job.repository + "@" + res.digest;
  res.status = Status::Ok();
  return res;
}

Status BuildahBuilder::Check() {
  ProcessSpec spec;
  spec.argv = {buildah_, "version"};
  spec.env = std::map<std::string, std::string>{{"PATH", kPath}};
  spec.timeout = std::chrono::seconds(10);
  ProcessResult r = runner_->Run(spec, nullptr, nullptr);
  if (!r.start_status.ok()) return Status::Unavailable("buildah: " + r.start_status.message());
  if (r.exit_code != 0)
    return Status::Unavailable("buildah version exited " + std::to_string(r.exit_code));
  return Status::Ok();
}

}  // namespace kiln
