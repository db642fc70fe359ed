#include "builder/layered_builder.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "builder/layer_writer.h"
#include "builder/registry_client.h"
#include "builder/sandbox_command.h"
#include "common/sha256.h"

namespace kiln {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr char kOciConfigType[] = "application/vnd.oci.image.config.v1+json";
constexpr char kOciLayerGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";

std::string Digest(const std::string& data) { return "sha256:" + Sha256Hex(data); }

// Docker schema2 layer/config media types map onto their OCI equivalents (same bytes).
std::string OciLayerType(const std::string& t) {
  if (t == "application/vnd.docker.image.rootfs.diff.tar.gzip") return kOciLayerGzip;
  if (t == "application/vnd.docker.image.rootfs.diff.tar") return "application/vnd.oci.image.layer.v1.tar";
  return t;
}
}  // namespace

struct LayeredBuilder::Base {
  std::string host, repo, digest;
  json manifest;  // OCI or docker v2 image manifest (not an index)
  json config;
};

struct LayeredBuilder::Prepared {
  std::string base_repo;
  std::vector<std::pair<std::string, size_t>> base_layers;  // digest, size (already in base repo)
  LayerBlob layer;
  std::string config;      // JSON bytes
  std::string config_digest;
  std::string manifest;    // JSON bytes
};

LayeredBuilder::LayeredBuilder(ProcessRunner* runner) : runner_(runner) {}
LayeredBuilder::~LayeredBuilder() = default;

Status LayeredBuilder::ParseBaseRef(const std::string& ref, std::string* host, std::string* repo,
                                    std::string* digest) {
  auto at = ref.find("@sha256:");
  auto slash = ref.find('/');
  if (at == std::string::npos || slash == std::string::npos || slash > at)
    return Status::InvalidArgument("base_image must be <host:port>/<repository>@sha256:<digest>");
  *host = ref.substr(0, slash);
  *repo = ref.substr(slash + 1, at - slash - 1);
  *digest = ref.substr(at + 1);
  if (repo->empty() || !IsSha256Hex(digest->substr(7)))
    return Status::InvalidArgument("base_image must be <host:port>/<repository>@sha256:<digest>");
  return Status::Ok();
}

RegistryClient* LayeredBuilder::Client(const RegistryConfig& reg) {
  std::lock_guard<std::mutex> l(mu_);
  auto& c = clients_[reg.url];
  if (!c) c = std::make_unique<RegistryClient>(RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file});
  return c.get();
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
  if (!st.ok()) return Status(st.code() == Status::Code::kNotFound ? Status::NotFound("base image " + base_ref + " cannot be resolved: " + st.message()) : st);
  auto m = json::parse(body, nullptr, false);
  if (m.is_discarded() || !m.is_object()) return Status::Internal("base image manifest is not JSON");
  if (m.contains("manifests")) {  // an index: pick linux/amd64
    std::string pick;
    for (const auto& e : m["manifests"]) {
      auto p = e.value("platform", json::object());
      if (p.value("os", "") == "linux" && p.value("architecture", "") == "amd64") pick = e.value("digest", "");
    }
    if (pick.empty()) return Status::NotFound("base image index has no linux/amd64 manifest");
    st = c->GetManifest(base->repo, pick, &body, &type, &digest);
    if (!st.ok()) return st;
    m = json::parse(body, nullptr, false);
    if (m.is_discarded() || !m.is_object()) return Status::Internal("base image manifest is not JSON");
  }
  if (!m.contains("config") || !m.contains("layers")) return Status::Internal("base image manifest has no config/layers");
  std::string cfg;
  st = c->GetBlob(base->repo, m["config"].value("digest", ""), &cfg);
  if (!st.ok()) return st;
  base->config = json::parse(cfg, nullptr, false);
  if (base->config.is_discarded() || !base->config.is_object()) return Status::Internal("base image config is not JSON");
  base->manifest = std::move(m);
  std::lock_guard<std::mutex> l(mu_);
  bases_[base_ref] = base;
  *out = base;
  return Status::Ok();
}

BuildResult LayeredBuilder::Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) {
  BuildResult res;
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!job.build.layered) {
    res.status = Status::InvalidArgument("domain has no build.layered section");
    return res;
  }
  const LayeredBuild& lb = *job.build.layered;
  std::shared_ptr<const Base> base;
  Status st = ResolveBase(job.registry, lb.base_image, &base);
  if (!st.ok()) {
    res.status = st;
    return res;
  }
  // 1. The compile command, sandboxed.
  SandboxSpec sb;
  sb.workspace = job.source_dir;
  sb.command = lb.command;
  sb.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin:/usr/lib/go/bin"}, {"HOME", "/tmp"}, {"LANG", "C.UTF-8"}};
  for (const auto& [k, v] : lb.env) sb.env[k] = v;
  std::error_code ec;
  for (const auto& [var, name] : lb.caches) {
    std::string dir = job.cache_dir + "/layered/" + name;
    fs::create_directories(dir, ec);
    sb.caches[var] = dir;
  }
  sb.network = job.build.containerfile.network;
  st = ValidateSandboxSpec(sb);
  if (!st.ok()) {
    res.status = st;
    return res;
  }
  ProcessSpec spec;
  spec.argv = BwrapArgv(sb);
  spec.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}};
  spec.timeout = std::chrono::seconds(job.build.timeout_s);
  if (out) out("kiln: layered build: " + [&] { std::string s; for (auto& a : lb.command) s += a + " "; return s; }() + "\n");
  ProcessResult r = runner_->Run(spec, out, cancel);
  if (!r.start_status.ok()) {
    res.status = Status::Unavailable("cannot run the sandbox: " + r.start_status.message());
    return res;
  }
  if (r.cancelled || r.timed_out) {
    res.status = r.cancelled ? Status::Cancelled("build cancelled")
                             : Status::DeadlineExceeded("build timed out after " + std::to_string(job.build.timeout_s) + " s");
    return res;
  }
  if (r.exit_code != 0) {
    DiagnosticsOptions dopts;
    dopts.source_roots = {"/workspace/"};
    res.diagnostics = ParseDiagnostics(r.output, dopts);
    res.compile_failed = true;
    res.status = Status::FailedPrecondition("build command failed (exit " + std::to_string(r.exit_code) + ")");
    res.elapsed_ms = elapsed();
    return res;
  }
  // 2. The outputs as one layer.
  auto prep = std::make_shared<Prepared>();
  std::vector<LayerEntry> entries;
  for (const auto& o : lb.outputs) entries.push_back({o.from, o.to});
  st = WriteLayer(job.source_dir, entries, 1, &prep->layer);
  if (!st.ok()) {
    res.status = Status::FailedPrecondition("outputs: " + st.message());
    res.compile_failed = true;
    return res;
  }
  // 3. Config and manifest.
  json cfg = base->config;
  json& c = cfg["config"];
  if (!c.is_object()) c = json::object();
  if (!lb.entrypoint.empty()) {
    c["Entrypoint"] = lb.entrypoint;
    c.erase("Cmd");
  }
  c["Labels"] = c.value("Labels", json::object());
  if (!c["Labels"].is_object()) c["Labels"] = json::object();
  c["Labels"]["kiln.build-key"] = job.key;
  c["Labels"]["kiln.candidate"] = job.candidate;
  if (!job.commit.empty()) c["Labels"]["kiln.commit"] = job.commit;
  cfg["created"] = "1970-01-01T00:00:00Z";
  if (!cfg["rootfs"].is_object()) cfg["rootfs"] = {{"type", "layers"}, {"diff_ids", json::array()}};
  cfg["rootfs"]["diff_ids"].push_back(prep->layer.diff_id);
  if (cfg.contains("history") && cfg["history"].is_array())
    cfg["history"].push_back({{"created", "1970-01-01T00:00:00Z"}, {"created_by", "kiln layered build"}});
  prep->config = cfg.dump();
  prep->config_digest = Digest(prep->config);
  json layers = json::array();
  for (const auto& l : base->manifest["layers"]) {
    prep->base_layers.emplace_back(l.value("digest", ""), l.value("size", size_t{0}));
    layers.push_back({{"mediaType", OciLayerType(l.value("mediaType", kOciLayerGzip))},
                      {"digest", l.value("digest", "")},
                      {"size", l.value("size", size_t{0})}});
  }
  layers.push_back({{"mediaType", kOciLayerGzip}, {"digest", prep->layer.digest}, {"size", prep->layer.size}});
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", kOciManifestType},
                   {"config", {{"mediaType", kOciConfigType}, {"digest", prep->config_digest}, {"size", prep->config.size()}}},
                   {"layers", layers}};
  prep->manifest = manifest.dump();
  prep->base_repo = base->repo;
  res.image_id = Sha256Hex(prep->manifest);
  if (out) out("kiln: layer " + prep->layer.digest + " (" + std::to_string(prep->layer.size) + " bytes)\n");
  {
    std::lock_guard<std::mutex> l(mu_);
    // Keyed by the candidate's storage: a candidate runs one build at a time, so a newer build
    // replaces an image that was never pushed (cancelled, superseded) instead of leaking it.
    prepared_[job.storage_dir] = {res.image_id, prep};
  }
  res.status = Status::Ok();
  res.elapsed_ms = elapsed();
  return res;
}

PushResult LayeredBuilder::Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                                const CancelToken* cancel) {
  PushResult res;
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const Prepared> prep;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = prepared_.find(job.storage_dir);
    if (it != prepared_.end() && it->second.first == built.image_id) {
      prep = it->second.second;
      prepared_.erase(it);
    }
  }
  if (!prep) {
    res.status = Status::Internal("no prepared image for this build");
    return res;
  }
  RegistryClient* c = Client(job.registry);
  const std::string& repo = job.repository;
  auto ensure = [&](const std::string& digest, const std::string* data) -> Status {
    if (cancel && cancel->cancelled()) return Status::Cancelled("push cancelled");
    bool exists = false;
    Status st = c->BlobExists(repo, digest, &exists);
    if (!st.ok() || exists) return st;
    if (!data) {  // a base layer: mount it from the base repository
      bool mounted = false;
      st = c->MountBlob(repo, digest, prep->base_repo, &mounted);
      if (!st.ok()) return st;
      if (mounted) return Status::Ok();
      std::string blob;
      st = c->GetBlob(prep->base_repo, digest, &blob);
      if (!st.ok()) return st;
      return c->PutBlob(repo, digest, blob);
    }
    if (out) out("kiln: uploading " + digest + "\n");
    return c->PutBlob(repo, digest, *data);
  };
  Status st;
  for (const auto& [d, size] : prep->base_layers)
    if (!(st = ensure(d, nullptr)).ok()) break;
  if (st.ok()) st = ensure(prep->layer.digest, &prep->layer.data);
  if (st.ok()) st = ensure(prep->config_digest, &prep->config);
  std::string digest;
  if (st.ok()) st = c->PutManifest(repo, job.tag, kOciManifestType, prep->manifest, &digest);
  res.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) {
    res.status = st;
    return res;
  }
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
