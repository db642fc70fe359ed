// Checkout: keeps a candidate's persistent workspace directory
// (`<state_dir>/domains/<domain>/candidates/<candidate>/src`) exactly equal to a git tree from
// the domain's bare repository, writing only the files that changed so that unchanged files keep
// their mtimes and incremental build caches stay warm.
//
// Files kept next to the workspace (in its parent directory):
//   index          git index for this workspace (GIT_INDEX_FILE); its stat cache is what makes
//                  "write only changed files" work
//   checkout.lock  flock()ed during Update (serializes updates of one workspace across threads
//                  and processes)
//   checked-out    "<id> <tree>\n" of the last completed Update; absent while an Update runs, so
//                  an interrupted Update is detected and the next one does a full reset
//
// How: `git clean -ffdx` (drop untracked files and build outputs), `git read-tree --reset -u
// <tree>` (like `reset --hard`: rewrites files whose content or stat differs from the index,
// deletes files gone from the tree), then a verification (`ls-files --modified --deleted
// --others`). If any step fails or the verification finds a difference (index missing or corrupt,
// work tree in a state git refused to touch), the workspace is emptied and checked out from
// scratch. Git never follows symlinks in the work tree when writing, so a symlink in the tree (or
// one a build left behind) cannot make a checkout write outside the workspace.
//
// Stateless; all methods are static and thread-safe (per-workspace serialization by the lock).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "workspace/git_repo.h"

namespace kiln {

struct CheckoutStats {
  int64_t files_written = 0;  // approximate: paths changed between the previous and new tree,
                              // or every file after a full reset
  bool full_reset = false;    // the workspace was emptied and checked out from scratch
  int64_t elapsed_ms = 0;
};

class Checkout {
 public:
  /// Makes `workspace_dir` (absolute; created if missing) exactly equal to the tree of
  /// `commit_or_tree` (a full 40- or 64-hex commit or tree id in `repo`): changed files written,
  /// deleted files removed, untracked and ignored files removed. `stats` may be null.
  /// Before any tracked file is written, the tree is held to repo.tree_limits()
  /// (workspace/tree_limits.h) without expanding it (issue 18: while untracked files are removed
  /// and the index's stat data refreshed, which change no tracked file).
  /// `known_tree` (optional, issue 18): the tree id of `commit_or_tree` as GitRepo::Resolve
  /// found it; it is trusted (not derived again), saving a git start.
  /// Returns InvalidArgument for a malformed id or relative path, NotFound when the id is not a
  /// commit or tree in `repo`, ResourceExhausted (message naming the limit and its config key;
  /// no tracked file written, the previous checkout still complete; untracked files may be
  /// gone) when the tree exceeds a limit, Internal when git or the file system fails
  /// (the workspace is then in an unspecified state; the next Update recovers with a full reset).
  static Status Update(const GitRepo& repo, const std::string& commit_or_tree,
                       const std::string& workspace_dir, CheckoutStats* stats,
                       const std::string& known_tree = "");

  /// The id passed to the last completed Update of `workspace_dir`. Returns NotFound when
  /// there was none or an Update was interrupted.
  static Status CheckedOut(const std::string& workspace_dir, std::string* id);

  /// Path of the workspace's git index file (`<parent of workspace_dir>/index`).
  static std::string IndexPath(const std::string& workspace_dir);
};

}  // namespace kiln
