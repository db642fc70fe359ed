// BuildahBuilder: containerfile mode with the real buildah.
//
// Each call runs `buildah` with a private storage (job.storage_dir/root, /run) so that builds of
// different candidates never share a store: concurrent buildah builds on one store race
// (buildah #5674, #2781, #2521), and a candidate runs one build at a time. Compiler caches
// (`RUN --mount=type=cache`) live under job.cache_dir (buildah's TMPDIR), one per domain.
// The registry credential reaches buildah only as an --authfile path; RUN steps never see it.
//
// Thread-safety: Build/Push may run concurrently for different storage_dir values.
#pragma once

#include <memory>
#include <string>

#include "builder/builder.h"
#include "builder/process_runner.h"

namespace kiln {

class BuildahBuilder : public Builder {
 public:
  /// `runner` must outlive this object. `buildah` is the binary to run.
  explicit BuildahBuilder(ProcessRunner* runner, std::string buildah = "buildah");

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override;
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override;
  Status Check() override;

  /// The registry's "host:port" from its URL ("http://127.0.0.1:5000" -> "127.0.0.1:5000").
  static std::string RegistryHost(const std::string& url);
  /// The WORKDIR values and FROM images named in a Containerfile (for diagnostics and keys).
  static void ScanContainerfile(const std::string& text, std::vector<std::string>* workdirs,
                                std::vector<std::string>* froms);

 private:
  std::vector<std::string> StorageArgs(const BuildJob& job) const;
  std::map<std::string, std::string> Env(const BuildJob& job) const;
  void RemoveWorkingContainers(const BuildJob& job);

  ProcessRunner* runner_;
  std::string buildah_;
};

}  // namespace kiln
