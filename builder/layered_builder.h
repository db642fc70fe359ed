// LayeredBuilder: the layered fast path (as `ko` does for Go, for any compiled language).
//
// Build: runs the domain's `command` in the candidate's workspace inside bubblewrap (no
// network, read-only /usr, the workspace writable, the domain's named caches mounted; nothing
// else of the host: no credentials, no other candidate, no state directory), packs the declared
// `outputs` into one deterministic tar+gzip layer, and prepares an OCI image: the pinned base
// image's layers + the new layer, the base config with the entrypoint and kiln's labels.
// Push: uploads only the blobs the registry lacks (cross-repository mount of base layers where
// the registry allows), the manifest last, under the candidate's tag.
//
// Thread-safety: Build/Push may run concurrently for different builds. Base manifests/configs
// are fetched once per process and cached (they are addressed by digest).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "builder/builder.h"
#include "builder/process_runner.h"

namespace kiln {

class RegistryClient;

class LayeredBuilder : public Builder {
 public:
  /// `runner` must outlive this object.
  explicit LayeredBuilder(ProcessRunner* runner);
  ~LayeredBuilder() override;

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override;
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override;
  Status Check() override;

  /// Splits "<host:port>/<repo>@sha256:<hex>". Returns InvalidArgument when malformed.
  static Status ParseBaseRef(const std::string& ref, std::string* host, std::string* repo,
                             std::string* digest);

 private:
  struct Prepared;
  struct Base;
  RegistryClient* Client(const RegistryConfig& reg);
  Status ResolveBase(const RegistryConfig& reg, const std::string& base_ref,
                     std::shared_ptr<const Base>* out);

  ProcessRunner* runner_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<RegistryClient>> clients_;   // by registry url
  std::map<std::string, std::shared_ptr<const Base>> bases_;         // by base ref
  // storage_dir -> (image id, prepared image): at most one unpushed image per candidate.
  std::map<std::string, std::pair<std::string, std::shared_ptr<const Prepared>>> prepared_;
};

}  // namespace kiln
