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

#include "common/status.h"
#include "core/diagnostic.h"

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
  /// The domain's git remote as the agent reaches it (config GitRemoteUrl), for the exact
  /// `git push` command of not_pushed; "" gives a placeholder.
  std::string remote{};
  /// The end of the build's output (a few KiB), read for host failures only (ENOSPC, ...).
  std::string log_tail{};
};

struct FailureView {
  std::string error;
  std::string error_kind;
  std::string next_step;
};

/// Decides the agent-facing wording of a failure. Never returns an empty field.
FailureView DescribeFailure(const FailureFacts& facts);

/// The host failure the output of a build shows ("no space left on device", "read-only file
/// system", "input/output error", "disk quota exceeded"; not ENOMEM, which a sandbox's memory
/// limit causes), in the
/// agent's words ("kiln's build host ran out of disk space"); "" when none. Such a build is
/// `infrastructure`, not the agent's compile or test failure.
std::string HostFailureIn(const std::string& output);

/// The next step for a kind (also used when a restored record has only its kind). `remote`:
/// see FailureFacts::remote. The token is never in it: the command shows `<your token>`.
std::string NextStepFor(const std::string& kind, const std::string& candidate,
                        const std::string& remote = "");

/// `git -c http.extraHeader="Authorization: Bearer <your token>" push <remote>
/// HEAD:refs/heads/<candidate>` (placeholders for empty parts).
std::string GitPushCommand(const std::string& remote, const std::string& candidate);

/// `text` with each of `hidden` (non-empty strings) replaced by "<kiln>" and every
/// http:// or https:// URL replaced by "<internal address>".
std::string ScrubHostDetails(std::string text, const std::vector<std::string>& hidden);

}  // namespace kiln
