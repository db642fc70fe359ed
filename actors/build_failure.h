// BuildFailure: the one vocabulary in which a failed build reaches the agent. A pure function
// of what happened (stage, the builder's status, whether the agent's code or config caused it,
// diagnostics) to three fields every failed result carries:
//   error      one sentence, what happened, in the agent's terms (the builder's own message is
//              kept, with host paths and internal addresses removed);
//   error_kind compile | test | containerfile | base_image | output_missing | tree_too_large |
//              timeout | cancelled | superseded | not_pushed | invalid_argument |
//              infrastructure;
//   next_step  what the agent should do next ("not your code: ..." for infrastructure).
// No CAF, no I/O; values only. Thread-safe (no state).
#pragma once

#include <string>
#include <vector>

#include "builder/diagnostics.h"
#include "common/status.h"

namespace kiln {

struct FailureFacts {
  /// Where the build stopped: "resolve" (ref -> commit), "checkout", "build" or "push".
  std::string stage;
  /// The failing step's status (its message is the builder's own words).
  Status status;
  /// True when the build ran and the agent's code or Containerfile made it fail.
  bool agent_fault = false;
  /// The builder's own classification when it has one (one of the kinds above), else "".
  std::string hint;
  std::vector<Diagnostic> diagnostics;
  std::string candidate;
  /// Host details that must never reach the agent (state directory, kubeconfig path, ...):
  /// every occurrence in a message is replaced.
  std::vector<std::string> hidden;
};

struct FailureView {
  std::string error;
  std::string error_kind;
  std::string next_step;
};

/// Decides the agent-facing wording of a failure. Never returns an empty field.
FailureView DescribeFailure(const FailureFacts& facts);

/// The next step for a kind (also used when a restored record has only its kind).
std::string NextStepFor(const std::string& kind, const std::string& candidate);

/// `text` with each of `hidden` (non-empty strings) replaced by "<kiln>" and every
/// http:// or https:// URL replaced by "<internal address>".
std::string ScrubHostDetails(std::string text, const std::vector<std::string>& hidden);

}  // namespace kiln
