#include "core/build_types.h"

namespace kiln {

// The wire collapses the in-flight phases into "running"; every other name is the status's own.
const char* StatusWireName(BuildStatus s) {
  switch (s) {
    case BuildStatus::kResolving:
    case BuildStatus::kRunning:
    case BuildStatus::kPushing:
      return "running";
    default:
      return BuildStatusName(s);
  }
}

const char* PhaseName(BuildStatus s) {
  switch (s) {
    case BuildStatus::kQueued:
      return "queued";
    case BuildStatus::kResolving:
      return "resolving";
    case BuildStatus::kRunning:
      return "building";
    case BuildStatus::kPushing:
      return "pushing";
    default:
      return StatusWireName(s);
  }
}

const char* BuildStatusName(BuildStatus s) {
  switch (s) {
    case BuildStatus::kQueued:
      return "queued";
    case BuildStatus::kResolving:
      return "resolving";
    case BuildStatus::kRunning:
      return "running";
    case BuildStatus::kPushing:
      return "pushing";
    case BuildStatus::kSucceeded:
      return "succeeded";
    case BuildStatus::kFailed:
      return "failed";
    case BuildStatus::kCancelled:
      return "cancelled";
    case BuildStatus::kInterrupted:
      return "interrupted";
  }
  return "failed";
}

std::optional<BuildStatus> BuildStatusFromName(std::string_view name) {
  for (BuildStatus s : {BuildStatus::kQueued, BuildStatus::kResolving, BuildStatus::kRunning,
                        BuildStatus::kPushing, BuildStatus::kSucceeded, BuildStatus::kFailed,
                        BuildStatus::kCancelled, BuildStatus::kInterrupted})
    if (name == BuildStatusName(s)) return s;
  return std::nullopt;
}

bool IsFinal(BuildStatus s) {
  return s == BuildStatus::kSucceeded || s == BuildStatus::kFailed ||
         s == BuildStatus::kCancelled || s == BuildStatus::kInterrupted;
}

}  // namespace kiln
