// OnPushPolicy (issue 18, build on push): the pure decisions of starting builds when a git push
// lands, and of letting a following build_candidate join such a build.
//
//   - PushBuilds: which builds a push starts. One per updated refs/heads/<candidate> whose
//     <candidate> is a valid candidate name (invalid names are ignored here: the push itself is
//     governed by the pre-receive rules), in the push's ref order, deletions skipped, a branch
//     named twice counted once (its last value). Nothing when the domain has on_push off.
//   - JoinsPushBuild: whether a build_candidate request joins the candidate's latest build
//     started on push (same build id, `joined: true`) instead of starting a new one.
//
// No CAF, no I/O, no clock. Thread-safe (no state).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/build_types.h"

namespace kiln {

/// One ref a push updated, as verified in the repository after git accepted the push.
struct PushedRef {
  std::string ref;     // "refs/heads/<branch>" (or any other ref the push named)
  std::string commit;  // the ref's new value (40 or 64 hex); all zeros for a deletion
};

/// The builds a push of `refs` starts: BuildRequests with `on_push` set, `commit` pinned to the
/// pushed value and `wait` false. Empty when `enabled` is false.
std::vector<BuildRequest> PushBuilds(const std::vector<PushedRef>& refs, bool enabled);

/// What a candidate knows of its latest build started on push.
struct PushBuildFacts {
  std::string candidate;      // the candidate's name (= its branch)
  std::string pushed_commit;  // the commit the push set the branch to
  BuildStatus status = BuildStatus::kQueued;
  bool latest = true;    // no other build of the candidate was requested after it
  bool claimed = false;  // a build_candidate already joined it
};

/// True when `req` (an agent's build_candidate) asks for what the push build builds: the
/// pushed commit (given in full or abbreviated), or no commit with no ref or the candidate's
/// own branch (its head is the pushed commit, as every later push starts a newer push build).
/// A running push build is joined by every such call; a finished one only by the first call
/// (the one that stands for the agent's call after its push: later calls are new requests, as
/// without build on push, e.g. a cache hit). A cancelled or interrupted push build, or one
/// followed by another request, is not joined.
bool JoinsPushBuild(const PushBuildFacts& build, const BuildRequest& req);

}  // namespace kiln
