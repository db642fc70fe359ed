// LayeredBuilder: the layered fast path (as `ko` does for Go, for any compiled language).
//
// Build: runs the domain's `command` in the candidate's workspace inside bubblewrap (no
// network, read-only /usr, the workspace writable, the domain's named caches mounted; nothing
// else of the host: no credentials, no other candidate, no state directory), packs the declared
// `outputs` into one deterministic tar+gzip layer, and prepares an OCI image: the pinned base
// image's layers + the new layer, the base config with the entrypoint and kiln's labels.
// The base image resolves concurrently with the compile. Issue 18: when `build.compression`
// asks for no compression (`none`, or `auto` with a loopback registry), the layer is the plain
// tar, written in the same pass that hashes it (digest = diff_id; no outputs cache). Otherwise
// the layer's compressed blob comes from
// the domain's OutputsCache (`<cache_dir>/outputs`, keyed by diff_id, LRU-bounded) when the
// same outputs were packed before; otherwise it is compressed on several threads. The config
// holds nothing per build (build key and commit are manifest annotations), so the same outputs
// give the same config blob.
// Push: HEADs (and mounts or uploads) every blob concurrently while reading the tag's current
// manifest digest; the manifest goes last, only when every blob is there, and is skipped when
// the tag already points at the same digest. A failed push never moves the tag.
// UploadBlobs (issue 20, before the push-lane grant): the same blob step without the manifest;
// the Push under the grant then finds every blob by its HEAD and puts only the manifest.
//
// Ownership: owns its registry clients (one per registry url), the cached base images, the
// outputs caches (one per domain cache dir) and at most one prepared image per candidate;
// `runner` is borrowed. The destructor waits for background base lookups.
// Thread-safety: Build/Push may run concurrently for different builds (one at a time per
// storage_dir, as Builder requires); all shared maps are guarded by `mu_`. Base
// manifests/configs are fetched once per process and cached (they are addressed by digest).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "builder/builder.h"
#include "builder/process_runner.h"
#include "registry/registry_client.h"

namespace kiln {

class OutputsCache;

struct LayeredBuilderOptions {
  /// Size bound of each domain's outputs cache; 0 disables it.
  uint64_t outputs_cache_bytes = uint64_t{1} << 30;
  /// gzip level of new layers (1 = fastest; the output is still deterministic).
  int gzip_level = 1;
  /// Compression threads; 0 = one per hardware thread.
  int compress_threads = 0;
};

class LayeredBuilder : public Builder {
 public:
  /// `runner` must outlive this object.
  explicit LayeredBuilder(ProcessRunner* runner, LayeredBuilderOptions opts = {});
  ~LayeredBuilder() override;

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override;
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override;
  PushResult UploadBlobs(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                         const CancelToken* cancel) override;
  Status Check() override;

  /// Splits "<host:port>/<repo>@sha256:<hex>". Returns InvalidArgument when malformed.
  static Status ParseBaseRef(const std::string& ref, std::string* host, std::string* repo,
                             std::string* digest);

 private:
  struct Prepared;
  struct Base;
  RegistryClient* Client(const RegistryConfig& reg);
  OutputsCache* Cache(const std::string& cache_dir);
  /// The prepared image of `built` in job's storage (taken out of prepared_ when `take`).
  std::shared_ptr<const Prepared> Find(const BuildJob& job, const BuildResult& built, bool take);
  /// HEADs every blob of `prep` concurrently and mounts or uploads the missing ones; counts
  /// the uploads in `uploads`. `say` is called one line at a time.
  Status EnsureBlobs(const BuildJob& job, const Prepared& prep,
                     const std::function<void(const std::string&)>& say, const CancelToken* cancel,
                     int* uploads);
  Status ResolveBase(const RegistryConfig& reg, const std::string& base_ref,
                     std::shared_ptr<const Base>* out);

  ProcessRunner* runner_;
  const LayeredBuilderOptions opts_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<OutputsCache>> caches_;  // by domain cache dir
  std::vector<std::future<void>> background_;                    // base lookups of failed builds
  RegistryClients clients_;
  std::map<std::string, std::shared_ptr<const Base>> bases_;  // by base ref
  // storage_dir -> (image id, prepared image): at most one unpushed image per candidate.
  std::map<std::string, std::pair<std::string, std::shared_ptr<const Prepared>>> prepared_;
};

}  // namespace kiln
