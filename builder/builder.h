// Builder: turns a prepared source tree into a local image, and pushes it.
//
// Implementations: BuildahBuilder (containerfile mode, real buildah) and FakeBuilder (tests).
// Build and Push block the calling thread: call them from a worker thread, never from an actor.
// Implementations must allow concurrent calls for DIFFERENT storage_dir values; callers
// guarantee one call at a time per storage_dir (the candidate actor owns its storage).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "builder/diagnostics.h"
#include "common/status.h"
#include "config/config.h"
#include "core/cancel_token.h"

namespace kiln {

struct BuildJob {
  std::string build_id;
  std::string domain;
  std::string candidate;
  std::string source_dir;   // the tree to build (absolute)
  std::string storage_dir;  // this candidate's private builder storage (absolute)
  std::string cache_dir;    // this domain's compiler-cache directory (absolute)
  std::string home_dir;     // HOME for the builder process (kiln-owned, holds no credentials)
  BuildConfig build;        // from the domain config
  RegistryConfig registry;  // where the image goes (and where base images come from)
  std::string repository;   // e.g. "loop/app"
  std::string tag;          // e.g. the candidate name
  std::string key;          // build key, recorded as an image label
  std::string commit;       // recorded as an image label ("" when built from a directory)
};

struct BuildResult {
  Status status;                // ok when an image was built
  bool compile_failed = false;  // the build ran and a build step failed (diagnostics apply)
  /// The builder's own classification of a failure when it knows better than the status code
  /// (actors/build_failure.h kinds: "containerfile", "base_image", "output_missing", "test",
  /// "infrastructure", ...); "" lets the candidate decide.
  std::string failure_kind;
  std::string image_id;  // local image id when ok
  std::vector<Diagnostic> diagnostics;
  int64_t elapsed_ms = 0;
  /// Issue 18: where elapsed_ms went, by part ("resolve_ms", "base_prep_ms", "build_ms",
  /// "export_ms" in containerfile mode; "sandbox_ms", "tar_ms", "compress_ms" layered).
  std::map<std::string, int64_t> timings;
};

struct PushResult {
  Status status;
  std::string digest;  // "sha256:<hex>"
  std::string ref;     // "<host:port>/<repository>@sha256:<hex>"
  int64_t elapsed_ms = 0;
  /// Issue 18: parts of elapsed_ms (containerfile: "read_ms", "compress_ms", "export_ms").
  std::map<std::string, int64_t> timings;
};

using OutputFn = std::function<void(std::string_view)>;

class Builder {
 public:
  virtual ~Builder() = default;
  /// Builds job.source_dir into a local image in job.storage_dir. Output goes to `out` as it
  /// arrives. Returns a non-ok status for failures; compile_failed tells build-step failures
  /// (the agent's fault) from infrastructure failures. Cancelled/DeadlineExceeded on cancel or
  /// timeout, after every process of the build is gone and no working container is left.
  virtual BuildResult Build(const BuildJob& job, const OutputFn& out,
                            const CancelToken* cancel) = 0;
  /// Pushes the built image to job.registry as <repository>:<tag> with kiln's credential.
  /// Returns Unavailable when the registry cannot be reached, PermissionDenied when it rejects
  /// the credential. The credential never appears in argv, output or the status message.
  virtual PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                          const CancelToken* cancel) = 0;
  /// Issue 20: uploads the built image's blobs (the ones the registry lacks) to job.registry,
  /// and nothing else: no manifest, no tag moves. The candidate calls it right after a
  /// successful build, before it waits for the push-lane grant; Push, under the grant, then
  /// finds the blobs present (it HEADs each first) and puts only the manifest. Cancellable;
  /// errors as Push's (the caller reports them as a push failure). Default: nothing to do.
  virtual PushResult UploadBlobs(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                                 const CancelToken* cancel) {
    (void)job, (void)built, (void)out, (void)cancel;
    return PushResult{};
  }
  /// Issue 20: whether build `build_id`, found unfinished when kiln started, can still be
  /// carried on (a worker pool: it was dispatched to a worker that may still run it); then
  /// its commit and build key. Build with that id then re-attaches to it (never starts a new
  /// one) or fails with failure_kind "interrupted". Default: no.
  virtual bool Resumable(const std::string& build_id, std::string* commit, std::string* key) {
    (void)build_id, (void)commit, (void)key;
    return false;
  }
  /// Quick self-check for /readyz ("buildah works"). Ok or Unavailable with the reason.
  virtual Status Check() = 0;
};

}  // namespace kiln
