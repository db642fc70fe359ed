// GitRepo: one domain's bare repository (`<state_dir>/domains/<domain>/repo.git`), the target of
// the agent's `git push`. kiln only reads from it (resolving branches and commits); the git
// smart-HTTP endpoint writes to it.
//
// Ownership: created by Open, owned by the caller through unique_ptr. The GitRunner it uses is
// not owned and must outlive it.
// Thread-safety: all methods are const in effect and may be called concurrently from several
// threads (each runs its own git process; git supports concurrent readers).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "workspace/git_runner.h"
#include "workspace/tree_limits.h"

namespace kiln {

/// What a build request's ref/commit resolved to.
struct ResolvedSource {
  std::string commit;  // full hex commit id
  std::string tree;    // full hex tree id of that commit (the content key of the source)
};

class GitRepo {
 public:
  /// Opens the bare repository at `path` (absolute), creating it on first use with kiln's
  /// config (fsck on receive and transfer, no reflogs, no auto-gc, no reachable-SHA1 wants,
  /// non-fast-forward pushes and deletes allowed). Creation is atomic (built in a temporary
  /// sibling directory, then renamed), so concurrent Opens of one path from several threads
  /// or processes are safe. Returns InvalidArgument for a relative path, FailedPrecondition
  /// when `path` exists but is not a bare repository, Unavailable/Internal when git fails.
  static Status Open(const std::string& path, std::unique_ptr<GitRepo>* out);
  /// Same, with an explicit runner (tests record or fault-inject git calls). `runner` is not
  /// owned and must outlive the repository.
  static Status Open(const std::string& path, GitRunner* runner, std::unique_ptr<GitRepo>* out);

  GitRepo(const GitRepo&) = delete;
  GitRepo& operator=(const GitRepo&) = delete;

  /// Resolves what to build. If `commit` is given it wins and `ref` is ignored: it must be
  /// 4..40 (or 64) lowercase hex naming exactly one commit in the repository (abbreviations
  /// allowed when unique; never interpreted as a branch name). Otherwise the branch
  /// `ref` (or, when absent, the branch named `candidate`) is resolved as refs/heads/<branch>
  /// only: never tags, remotes, HEAD, reflog or revision syntax.
  /// Returns InvalidArgument for a malformed commit/ref (git is not run), NotFound for a
  /// missing or ambiguous commit or a missing branch (with a `git push` hint), Unavailable or
  /// Internal when git fails.
  Status Resolve(const std::optional<std::string>& ref, const std::optional<std::string>& commit,
                 const std::string& candidate, ResolvedSource* out) const;

  /// Lists all branches as (branch name without "refs/heads/", commit id), sorted by name.
  /// Returns Unavailable/Internal when git fails.
  Status ListBranches(std::vector<std::pair<std::string, std::string>>* out) const;

  /// Runs git against this repository (`--git-dir` and HOME filled in). The caller must have
  /// validated every argument. Returns what GitRunner::Run returns.
  Status RunGit(GitCommand cmd, GitResult* result) const;

  /// The repository's absolute path.
  const std::string& path() const { return path_; }

  /// Limits every checkout of this repository's trees is held to (workspace/checkout.h;
  /// defaults: TreeLimits()). Set it before sharing the repository between threads.
  void set_tree_limits(const TreeLimits& limits) { tree_limits_ = limits; }
  const TreeLimits& tree_limits() const { return tree_limits_; }

 private:
  GitRepo(std::string path, GitRunner* runner) : path_(std::move(path)), runner_(runner) {}
  static Status Create(const std::string& path, GitRunner* runner);
  Status ResolveCommit(const std::string& commit, ResolvedSource* out) const;
  Status ResolveBranch(const std::string& branch, ResolvedSource* out) const;
  /// Sets out->tree from out->commit.
  Status FillTree(ResolvedSource* out) const;
  /// Issue 18: `rev`^{commit} and its tree in one git start; *found false when there is none.
  Status PeelCommit(const std::string& rev, ResolvedSource* out, bool* found) const;
  /// Runs git and turns a non-zero exit into Internal("<what>: <stderr line>").
  Status RunChecked(const std::string& what, GitCommand cmd, GitResult* result) const;

  const std::string path_;
  GitRunner* const runner_;
  TreeLimits tree_limits_;
};

}  // namespace kiln
