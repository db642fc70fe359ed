#include "builder/buildah_builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace fs = std::filesystem;

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool IsHttp(const std::string& url) { return url.rfind("http://", 0) == 0; }

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

Status PushFailure(const ProcessResult& r, const std::string& registry) {
  const std::string& o = r.output;
  auto has = [&](const char* s) { return o.find(s) != std::string::npos; };
  if (has("unauthorized") || has("authentication required") || has("401 Unauthorized") ||
      has("denied"))
    return Status::PermissionDenied("registry " + registry +
                                    " rejected kiln's credential (check the registry's auth_file)");
  if (has("connection refused") || has("no such host") || has("i/o timeout") ||
      has("connection reset") || has("EOF"))
    return Status::Unavailable("registry " + registry + " is unreachable: " + LastLines(o, 1));
  return Status::Unavailable("push to " + registry + " failed (exit " +
                             std::to_string(r.exit_code) + "): " + LastLines(o, 2));
}

// buildah could not start the build (typically: pulling a base image failed). Names the
// registry problem when there is one; the last line names the image and registry host.
Status PrepareFailure(const std::string& o) {
  auto has = [&](const char* s) { return o.find(s) != std::string::npos; };
  if (has("unauthorized") || has("authentication required") || has("401 Unauthorized"))
    return Status::PermissionDenied("builder could not pull a base image: the registry rejected "
                                    "kiln's credential: " + LastLines(o, 1));
  if (has("connection refused") || has("no such host") || has("i/o timeout") ||
      has("connection reset"))
    return Status::Unavailable("builder could not pull a base image: registry unreachable: " +
                               LastLines(o, 1));
  return Status::Unavailable("builder could not prepare the build: " + LastLines(o, 1));
}

}  // namespace

BuildahBuilder::BuildahBuilder(ProcessRunner* runner, std::string buildah)
    : runner_(runner), buildah_(std::move(buildah)) {}

std::string BuildahBuilder::RegistryHost(const std::string& url) {
  std::string s = url;
  auto p = s.find("://");
  if (p != std::string::npos) s = s.substr(p + 3);
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

void BuildahBuilder::ScanContainerfile(const std::string& text, std::vector<std::string>* workdirs,
                                       std::vector<std::string>* froms) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string word;
    ls >> word;
    for (auto& c : word) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
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

std::vector<std::string> BuildahBuilder::StorageArgs(const BuildJob& job) const {
  return {buildah_,        "--root",           job.storage_dir + "/root", "--runroot",
          job.storage_dir + "/run", "--storage-driver", "overlay"};
}

std::map<std::string, std::string> BuildahBuilder::Env(const BuildJob& job) const {
  // Exactly this environment: nothing of kiln's own environment (tokens, cloud credentials)
  // reaches buildah or the RUN steps it executes.
  return {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
          {"HOME", job.home_dir},
          {"TMPDIR", job.cache_dir},
          {"LANG", "C.UTF-8"},
          {"BUILDAH_LAYERS", "true"},
          {"STORAGE_DRIVER", "overlay"}};
}

void BuildahBuilder::RemoveWorkingContainers(const BuildJob& job) {
  ProcessSpec spec;
  spec.argv = StorageArgs(job);
  spec.argv.insert(spec.argv.end(), {"rm", "--all"});
  spec.env = Env(job);
  spec.timeout = std::chrono::seconds(30);
  runner_->Run(spec, nullptr, nullptr);
}

BuildResult BuildahBuilder::Build(const BuildJob& job, const OutputFn& out,
                                  const CancelToken* cancel) {
  BuildResult res;
  const auto& cf = job.build.containerfile;
  std::error_code ec;
  for (const auto& d : {job.storage_dir, job.cache_dir, job.home_dir}) fs::create_directories(d, ec);
  std::string file = job.source_dir + "/" + cf.file;
  std::string context = job.source_dir + "/" + cf.context;
  if (!fs::is_regular_file(file)) {
    res.status = Status::InvalidArgument("Containerfile '" + cf.file + "' not found in the source");
    res.compile_failed = true;
    return res;
  }
  std::string iidfile = job.storage_dir + "/iid-" + job.build_id;
  fs::remove(iidfile, ec);

  std::string host = RegistryHost(job.registry.url);
  ProcessSpec spec;
  // buildah runs as PID 1 of its own PID namespace (with its own /proc and mount namespace):
  // when it exits or is killed, the kernel kills every process its RUN steps started, even
  // ones that left the process group, and its mounts vanish with the namespace.
  spec.argv = {"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"};
  for (auto& a : StorageArgs(job)) spec.argv.push_back(a);
  // --force-rm: a failed step must not leave its working container in the candidate's storage.
  std::vector<std::string> a = {"build", "--isolation", "chroot", "--layers", "--force-rm",
                                "--pull=missing", "--retry", "1", "-f", file, "--iidfile", iidfile,
                                "--build-arg", "KILN_REGISTRY=" + host,
                                "--label", "kiln.build-key=" + job.key,
                                "--label", "kiln.candidate=" + job.candidate};
  if (!job.commit.empty()) a.insert(a.end(), {"--label", "kiln.commit=" + job.commit});
  if (IsHttp(job.registry.url)) a.push_back("--tls-verify=false");
  if (job.registry.auth_file) a.insert(a.end(), {"--authfile", *job.registry.auth_file});
  if (job.registry.ca_file) {
    // buildah wants a directory of certificates.
    std::string cert_dir = job.home_dir + "/certs.d";
    fs::create_directories(cert_dir, ec);
    fs::copy_file(*job.registry.ca_file, cert_dir + "/ca.crt", fs::copy_options::overwrite_existing, ec);
    a.insert(a.end(), {"--cert-dir", cert_dir});
  }
  if (cf.target) a.insert(a.end(), {"--target", *cf.target});
  for (const auto& [k, v] : cf.build_args) a.insert(a.end(), {"--build-arg", k + "=" + v});
  a.insert(a.end(), {"-t", host + "/" + job.repository + ":" + job.tag, context});
  spec.argv.insert(spec.argv.end(), a.begin(), a.end());
  spec.env = Env(job);
  spec.cwd = job.source_dir;
  spec.timeout = std::chrono::seconds(job.build.timeout_s);

  ProcessResult r = runner_->Run(spec, out, cancel);
  res.elapsed_ms = r.elapsed.count();
  if (!r.start_status.ok()) {
    res.status = Status::Unavailable("cannot run buildah: " + r.start_status.message());
    return res;
  }
  if (r.cancelled || r.timed_out) {
    RemoveWorkingContainers(job);
    res.status = r.cancelled ? Status::Cancelled("build cancelled")
                             : Status::DeadlineExceeded("build timed out after " +
                                                        std::to_string(job.build.timeout_s) + " s");
    return res;
  }
  if (r.exit_code != 0) {
    std::vector<std::string> workdirs;
    ScanContainerfile(ReadSmallFile(file), &workdirs, nullptr);
    DiagnosticsOptions dopts;
    dopts.source_roots = workdirs;
    for (const char* root : {"/src/", "/workspace/", "/go/src/", "/app/"}) dopts.source_roots.push_back(root);
    res.diagnostics = ParseDiagnostics(r.output, dopts);
    const std::string& o = r.output;
    bool infra = o.find("error creating build container") != std::string::npos ||
                 o.find("initializing source") != std::string::npos ||
                 o.find("pinging container registry") != std::string::npos;
    res.compile_failed = !infra;
    res.status = infra ? PrepareFailure(o)
                       : Status::FailedPrecondition("build failed (exit " +
                                                    std::to_string(r.exit_code) + ")");
    return res;
  }
  res.image_id = ReadSmallFile(iidfile);
  fs::remove(iidfile, ec);
  if (res.image_id.empty()) {
    res.status = Status::Internal("buildah succeeded but wrote no image id");
    return res;
  }
  res.status = Status::Ok();
  return res;
}

PushResult BuildahBuilder::Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                                const CancelToken* cancel) {
  PushResult res;
  std::string host = RegistryHost(job.registry.url);
  std::string digestfile = job.storage_dir + "/digest-" + job.build_id;
  std::error_code ec;
  fs::remove(digestfile, ec);
  ProcessSpec spec;
  spec.argv = StorageArgs(job);
  std::vector<std::string> a = {"push", "--retry", "2", "--retry-delay", "500ms", "--digestfile",
                                digestfile};
  if (IsHttp(job.registry.url)) a.push_back("--tls-verify=false");
  if (job.registry.auth_file) a.insert(a.end(), {"--authfile", *job.registry.auth_file});
  if (job.registry.ca_file) a.insert(a.end(), {"--cert-dir", job.home_dir + "/certs.d"});
  a.insert(a.end(), {built.image_id, "docker://" + host + "/" + job.repository + ":" + job.tag});
  spec.argv.insert(spec.argv.end(), a.begin(), a.end());
  spec.env = Env(job);
  spec.timeout = std::chrono::seconds(300);
  ProcessResult r = runner_->Run(spec, out, cancel);
  res.elapsed_ms = r.elapsed.count();
  if (!r.start_status.ok()) {
    res.status = Status::Unavailable("cannot run buildah: " + r.start_status.message());
    return res;
  }
  if (r.cancelled) {
    res.status = Status::Cancelled("push cancelled");
    return res;
  }
  if (r.timed_out) {
    res.status = Status::DeadlineExceeded("push to " + host + " timed out");
    return res;
  }
  if (r.exit_code != 0) {
    res.status = PushFailure(r, host);
    return res;
  }
  res.digest = ReadSmallFile(digestfile);
  fs::remove(digestfile, ec);
  if (res.digest.rfind("sha256:", 0) != 0) {
    res.status = Status::Internal("push succeeded but no digest was reported");
    return res;
  }
  res.ref = host + "/" + job.repository + "@" + res.digest;
  res.status = Status::Ok();
  return res;
}

Status BuildahBuilder::Check() {
  ProcessSpec spec;
  spec.argv = {buildah_, "version"};
  spec.env = std::map<std::string, std::string>{
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  spec.timeout = std::chrono::seconds(10);
  ProcessResult r = runner_->Run(spec, nullptr, nullptr);
  if (!r.start_status.ok()) return Status::Unavailable("buildah: " + r.start_status.message());
  if (r.exit_code != 0) return Status::Unavailable("buildah version exited " + std::to_string(r.exit_code));
  return Status::Ok();
}

}  // namespace kiln
