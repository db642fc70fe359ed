// Plain data types shared by the scheduler core, the candidate actor, the tool layer and the
// state store (kiln_core_types, the vocabulary library at the bottom of the graph).
// Value types; no CAF. A BuildOutcome is immutable once published (shared as
// shared_ptr<const BuildOutcome>), so it may be read from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostic.h"

namespace kiln {

using BuildId = std::string;

/// Final states are succeeded, failed, cancelled, interrupted.
enum class BuildStatus {
  kQueued,
  kResolving,
  kRunning,
  kPushing,
  kSucceeded,
  kFailed,
  kCancelled,
  kInterrupted
};

/// Wire name: queued, running (resolving/running/pushing are all "running" on the wire, with
/// `phase` telling which), succeeded, failed, cancelled, interrupted.
const char* StatusWireName(BuildStatus s);
const char* PhaseName(BuildStatus s);
bool IsFinal(BuildStatus s);
/// The exact name of every status ("queued", "resolving", "running", "pushing", "succeeded",
/// "failed", "cancelled", "interrupted"), as the state journal stores it; and back (nullopt for
/// any other text).
const char* BuildStatusName(BuildStatus s);
std::optional<BuildStatus> BuildStatusFromName(std::string_view name);

struct BuildTimings {
  int64_t queued_ms = 0;
  int64_t build_ms = 0;
  int64_t push_ms = 0;
  int64_t total_ms = 0;
  // Issue 18 (per-part timings): where the time went, by part ("checkout_ms", "resolve_ms",
  // "base_prep_ms", "build_ms", "export_ms", "push_ms"; layered: "sandbox_ms", "tar_ms",
  // "compress_ms"). Shown as timings.parts; empty for cache hits and old records.
  std::map<std::string, int64_t> parts;
};

/// What one build execution produced. Shared between deduplicated waiters and the cache.
struct BuildOutcome {
  BuildStatus status = BuildStatus::kFailed;
  std::string image_ref;  // "<host:port>/<repo>@sha256:<hex>" when succeeded
  std::string digest;     // "sha256:<hex>"
  std::vector<Diagnostic> diagnostics;
  std::string log_tail;    // last lines of the log
  std::string error;       // human-readable failure reason (never a credential)
  std::string error_kind;  // actors/build_failure.h vocabulary, set with `error`
  BuildId built_by;        // the build id that actually ran
  std::string commit;      // what was built
  int64_t build_ms = 0;
  int64_t push_ms = 0;
};
using OutcomePtr = std::shared_ptr<const BuildOutcome>;

/// A validated build request. `source_dir` is set only by the trusted CLI path (`kiln build`);
/// agents always build from the domain's git repository.
struct BuildRequest {
  std::string candidate;
  std::optional<std::string> ref;
  std::optional<std::string> commit;
  bool wait = true;
  std::optional<std::string> source_dir;
  /// Issue 18: started by kiln when a push to the candidate's branch landed (never set from an
  /// agent's arguments).
  bool on_push = false;
};

}  // namespace kiln
