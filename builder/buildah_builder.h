// BuildahBuilder: containerfile mode with the real buildah, run unprivileged and apart from kiln
// (docs/security.md).
//
// Build: buildah runs as the domain's build user (build.user, e.g. `kiln-build`; never root,
// never kiln's uid) in rootless mode with `--storage-driver overlay`, under a shell that kiln's
// child starts as PID 1 of new namespaces (issue 18: set up with system calls, ChildConfinement
// in common/subprocess.h, where it used to be `unshare [--net] --pid --fork --kill-child
// --mount-proc` + a mount script + prlimit + setpriv + env, ~15 process starts): a PID namespace
// (RUN steps see no host process; everything they start dies with the build), a network
// namespace with loopback only unless build.network is "host", and a private mount namespace
// in which the candidate's build directory, the domain's cache and the (read-only) source are
// bind-mounted under /run/kiln-build while kiln's state directory, HOME and registry auth file
// are hidden. Then it drops to the build uid (with its groups) with RLIMIT_FSIZE =
// build.max_file_mb and exactly the environment kiln gives it. Each candidate has its own store
// (<storage_dir>/rootless, owned by the build uid): concurrent buildah processes on one store
// race (buildah #5674, #2781, #2521), and a candidate runs one build at a time. Compiler caches
// (`RUN --mount=type=cache`) live under <cache_dir>/rootless (TMPDIR), one per domain.
//
// Base images (issue 15): every image the Containerfile names (builder/containerfile_images.h)
// must pass the domain's base-image policy (config/base_image_policy.h) before anything is
// fetched; a refusal is the agent's fault and names the image and the rule. In the build's
// mount namespace every secret kiln knows of, for every domain (registry auth files, key files
// beside a ca_file or kubeconfig, kubeconfigs, /run/secrets), is hidden (SecretPaths).
//
// The build user never holds a credential: kiln resolves the Containerfile's base images
// (FROM, COPY --from, RUN --mount from=) itself. Base images live in ONE store per domain
// (builder/base_store.h, `<cache_dir>/bases/u<uid>`), shared by all its candidates as a
// read-only additional image store (bind-mounted read-only in every build's namespace, passed
// as `--storage-opt overlay.imagestore=`): a new candidate's first build fetches nothing, no
// base is copied into a candidate's store, and removing a candidate's storage leaves it intact.
// An image the store lacks (or a moved tag) is copied once per domain, under the store's lock,
// with kiln's credential (skopeo, run by kiln) into an OCI layout the build user loads into the
// store (the only process that sees it writable); builds run with --pull=never. Issue 18
// (fifth pass): nothing runs after `buildah build`. Push reads the image straight from the
// candidate's store and the base store (builder/store_image.h: config, layer chain, layer tars
// rebuilt from tar-split + diff files, all untrusted, all verified) and uploads it with kiln's
// credential (builder/store_image_pusher.h): the bases' layers are the registry's own blobs
// (their manifests and configs are fetched once per digest while resolving), new layers plain
// or gzip level 1 per build.compression, manifest last. Only a store the reader does not
// understand is exported by buildah as before (`buildah push <id> oci:...` as the build user,
// then builder/oci_layout_pusher.h); the build log says why.
//
// Per-part timings: BuildResult::timings resolve_ms (base digests and, once per digest, their
// configs), base_prep_ms (shared-store check; fetch + load when missing), build_ms (`buildah
// build`, including its commit); PushResult::timings read_ms (reading the image and its new
// layers from the store, verified), compress_ms (gzip of new layers, when compressing),
// export_ms (only when the fallback export ran).
//
// Thread-safety: Build/Push may run concurrently for different storage_dir values; the
// registry clients are shared under a mutex.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "builder/process_runner.h"
#include "builder/store_image_pusher.h"  // BaseLayerBlob
#include "registry/registry_client.h"

namespace kiln {

class BuildahBuilder : public Builder {
 public:
  /// `runner` must outlive this object. `buildah` is the binary to run. `site` is the whole
  /// config: it gives every domain's base-image policy and the secrets to hide from builds;
  /// without it (tests) the policy knows only the job's own domain and the job's auth file.
  explicit BuildahBuilder(ProcessRunner* runner, std::string buildah = "buildah",
                          std::shared_ptr<const Config> site = nullptr);
  ~BuildahBuilder() override;

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override;
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override;
  /// Issue 20: the image's missing blobs, no manifest (before the push-lane grant); the Push
  /// under the grant then only HEADs them and puts the manifest.
  PushResult UploadBlobs(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                         const CancelToken* cancel) override;
  Status Check() override;

  /// The registry's "host:port" from its URL ("http://127.0.0.1:5000" -> "127.0.0.1:5000").
  static std::string RegistryHost(const std::string& url);
  /// The WORKDIR values and FROM images named in a Containerfile (for diagnostics and keys).
  static void ScanContainerfile(const std::string& text, std::vector<std::string>* workdirs,
                                std::vector<std::string>* froms);
  /// The images a Containerfile pulls (FROM, COPY --from=, RUN --mount=...,from=), with
  /// ARG/build-arg substitution ($X, ${X}, ${X:-default}); stage names, stage numbers and
  /// `scratch` are left out. `args` are the build args (they override ARG defaults).
  static std::vector<std::string> BaseImages(const std::string& text,
                                             const std::map<std::string, std::string>& args);
  /// The files and directories to hide in a build's mount namespace: every registry auth_file,
  /// every kubeconfig, key files beside them and beside every ca_file (config/host_checks.h
  /// SecretFiles), and /run/secrets, /var/run/secrets (the in-cluster service-account token).
  /// From `site` (every domain) when given, plus the job's registry.
  static void SecretPaths(const Config* site, const BuildJob& job, std::vector<std::string>* files,
                          std::vector<std::string>* dirs);
  /// The build sandbox's mounts of the domain's base store `store` on <kSandboxRoot>/bases:
  /// read-only (every build) unless `writable` (kiln's load script).
  static std::vector<ChildMount> BaseStoreMounts(const std::string& store, bool writable);
  /// `s` single-quoted for /bin/sh.
  static std::string ShellQuote(const std::string& s);

  /// Mount point of the per-build private tree inside the build's mount namespace.
  static constexpr const char* kSandboxRoot = "/run/kiln-build";

 private:
  struct BuildUser;
  Status LookupUser(const std::string& name, BuildUser* user) const;
  Status PrepareDirs(const BuildJob& job, const BuildUser& user);
  /// Resolves the Containerfile's base images and makes sure the domain's shared base store
  /// holds each at its current digest (loading the missing ones under the store's lock).
  /// `in_use` gets their names in the store; `timings` gets resolve_ms and base_prep_ms.
  Status PrepareBases(const BuildJob& job, const BuildUser& user, const std::string& containerfile,
                      std::vector<std::string>* in_use, bool* agent_fault, const OutputFn& out,
                      const CancelToken* cancel, std::map<std::string, int64_t>* timings);
  /// The build user's `inner_script` in the build's namespace; the domain's base store is
  /// mounted on <kSandboxRoot>/bases, read-only unless `bases_writable` (kiln's load script).
  ProcessSpec SandboxSpec(const BuildJob& job, const BuildUser& user,
                          const std::string& inner_script, bool bases_writable = false) const;
  void RemoveWorkingContainers(const BuildJob& job, const BuildUser& user);
  /// The fallback export (a store StoreImageReader does not understand): `buildah push <iid>
  /// oci:<storage>/rootless/oci:img` as the build user.
  Status Export(const BuildJob& job, const BuildUser& user, const std::string& iid,
                const CancelToken* cancel);
  /// Push and UploadBlobs: the image from the store (or the fallback export); `blobs_only`
  /// uploads the missing blobs and puts no manifest.
  PushResult PushImage(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                       const CancelToken* cancel, bool blobs_only);
  /// The shell function `b` running buildah on the candidate's store (base store beside it).
  std::string StoreFunction() const;
  /// The layers of base `repo` at manifest `digest` by diff_id (its config fetched once per
  /// digest, then cached); empty when the manifest is not an image manifest or the fetch fails.
  std::map<std::string, BaseLayerBlob> BaseLayers(RegistryClient* client, const std::string& repo,
                                                  const std::string& manifest,
                                                  const std::string& digest);
  RegistryClient* Client(const RegistryConfig& reg);

  ProcessRunner* runner_;
  std::string buildah_;
  std::shared_ptr<const Config> site_;
  std::mutex mu_;
  RegistryClients clients_;
  // Issue 18: base layers the registry holds, by "<repo>@<manifest digest>"; guarded by mu_.
  std::map<std::string, std::map<std::string, BaseLayerBlob>> base_layers_;
  // The last build's base layers (by diff_id) per storage_dir, for its Push; guarded by mu_.
  std::map<std::string, std::map<std::string, BaseLayerBlob>> push_bases_;
  // By storage dir: the compressed layers the blob stage made, for the push under the grant.
  std::map<std::string, std::map<std::string, OciDescriptor>> push_compressed_;
};

}  // namespace kiln
