// TreeLimits: bounds on what a pushed commit's tree expands to when checked out (issue 15, "git
// bomb"), evaluated WITHOUT expanding the tree.
//
// receive.maxInputSize bounds the compressed pack only: a tiny pack can name one large blob
// thousands of times, or nest trees (T2 lists T1 100 times, T1 lists a blob 100 times, ...) so
// that the checkout is exponentially larger than the push. TreeLimitChecker walks the distinct
// tree objects once each (memoized by tree id: a tree's bytes and entry count are computed once
// and reused wherever it appears), reads blob sizes from object headers (never blob contents),
// and stops as soon as a lower bound of the expansion exceeds a limit. Its work is bounded by
// the number of distinct objects it reads, which the entry limit bounds in turn (every distinct
// entry appears at least once in the expansion), so an exponential bomb is refused after
// reading a handful of objects.
//
// Objects are read through an ObjectSource; GitObjectSource batches them into a few
// `git cat-file --batch` / `--batch-check` runs (one per tree level and chunk of ids, not one
// per object) through the project's GitRunner.
//
// The same evaluator runs in the pre-receive hook (`kiln git-hook pre-receive`, see
// app/git_hook_command.h) and before every checkout (workspace/checkout.h).
//
// Thread-safety: TreeLimits and the free functions are plain values / pure. A TreeLimitChecker
// and a GitObjectSource are single-threaded (use one per evaluation); GitObjectSource's run
// function must be callable from the evaluating thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "workspace/git_runner.h"

namespace kiln {

/// Limits on a checked-out tree and on one push. Plain value type; the defaults suit source
/// repositories. Config keys: push.max_tree_bytes, push.max_files, push.max_file_bytes,
/// push.max_refs_per_push (docs/configuration.md).
struct TreeLimits {
  int64_t max_tree_bytes = int64_t{512} << 20;  // sum of all file (blob) sizes, counted per path
  int64_t max_files = 100000;                   // entries: files, symlinks, directories, submodules
  int64_t max_file_bytes = int64_t{64} << 20;   // largest single file
  int64_t max_refs_per_push = 64;               // ref updates in one push
  int max_depth = 256;                          // directory nesting (not configurable)
};

/// The limits configured as `push` (global or domains.<d>.push). Pure.
inline TreeLimits TreeLimitsFromConfig(const PushLimitsConfig& c) {
  TreeLimits l;
  l.max_tree_bytes = c.max_tree_bytes;
  l.max_files = c.max_files;
  l.max_file_bytes = c.max_file_bytes;
  l.max_refs_per_push = c.max_refs_per_push;
  return l;
}

/// What a tree expands to (or, when a limit was exceeded, a lower bound of it).
struct TreeUsage {
  int64_t bytes = 0;
  int64_t files = 0;  // entries of every kind, as counted against max_files
  int64_t largest_file = 0;
  int depth = 0;             // levels of directories below the root
  int64_t objects_read = 0;  // distinct tree and blob objects looked at (work done)
  int64_t git_runs = 0;      // ObjectSource calls made (processes, for GitObjectSource)
};

/// One entry of a tree object.
struct TreeEntry {
  enum class Kind { kBlob, kTree, kSubmodule };
  Kind kind = Kind::kBlob;
  std::string name;
  std::string id;  // lowercase hex
};

/// Reads objects for the checker. Implementations need not be thread-safe.
class ObjectSource {
 public:
  virtual ~ObjectSource() = default;
  /// Sets (*out)[id] to the entries of each tree in `ids`. NotFound when one is missing or not a
  /// tree; Internal/Unavailable when reading fails.
  virtual Status ReadTrees(const std::vector<std::string>& ids,
                           std::map<std::string, std::vector<TreeEntry>>* out) = 0;
  /// Sets (*out)[id] to the size in bytes of each blob in `ids`, without reading contents.
  virtual Status BlobSizes(const std::vector<std::string>& ids,
                           std::map<std::string, int64_t>* out) = 0;
  /// Resolves a commit (or tree) id to its tree id. NotFound when it names no commit or tree.
  virtual Status TreeOf(const std::string& commit_or_tree, std::string* tree) = 0;
};

/// Runs one git command (git_dir/HOME/environment filled in by the function's owner).
using GitRunFn = std::function<Status(GitCommand, GitResult*)>;

/// ObjectSource over `git cat-file --batch` (trees) and `--batch-check` (blob sizes). Each call
/// is one git process for all ids given.
class GitObjectSource : public ObjectSource {
 public:
  explicit GitObjectSource(GitRunFn run) : run_(std::move(run)) {}
  Status ReadTrees(const std::vector<std::string>& ids,
                   std::map<std::string, std::vector<TreeEntry>>* out) override;
  Status BlobSizes(const std::vector<std::string>& ids,
                   std::map<std::string, int64_t>* out) override;
  Status TreeOf(const std::string& commit_or_tree, std::string* tree) override;

 private:
  Status CatFile(const std::string& mode, const std::vector<std::string>& lines, GitResult* r);
  GitRunFn run_;
};

/// Parses the binary content of a tree object (`<mode> <name>\0<raw id>`...); `id_bytes` is 20
/// (SHA-1) or 32 (SHA-256). InvalidArgument when malformed. Pure.
Status ParseTreeObject(const std::string& data, size_t id_bytes, std::vector<TreeEntry>* out);

/// Evaluates trees against limits. Single-threaded; `source` is not owned.
class TreeLimitChecker {
 public:
  TreeLimitChecker(const TreeLimits& limits, ObjectSource* source)
      : limits_(limits), source_(source) {}

  /// Checks the tree `tree_id` (full hex). `what` names it in messages ("tree of
  /// refs/heads/main"). Returns OK when within every limit (`usage`, optional, then holds the
  /// exact expansion), ResourceExhausted with a message naming the limit and its config key when
  /// one is exceeded (usage holds a lower bound), or what the source returned.
  Status Check(const std::string& tree_id, const std::string& what, TreeUsage* usage);

 private:
  struct Node {
    std::vector<TreeEntry> entries;
    bool read = false;
  };
  struct Sum {
    int64_t bytes = 0, files = 0, depth = 0;
  };
  /// Expansion of tree `id` found at `depth`, counting unread trees and unsized blobs as empty
  /// (a lower bound while reading). Recursion stops below max_depth.
  Sum Expand(const std::string& id, int depth, std::map<std::string, Sum>* memo) const;
  /// ResourceExhausted naming the first limit `u` exceeds, else OK. `complete`: `u` is exact.
  Status Exceeded(const std::string& what, const TreeUsage& u, bool complete) const;

  const TreeLimits limits_;
  ObjectSource* const source_;
  std::map<std::string, Node> trees_;
  std::map<std::string, int64_t> blobs_;
  std::map<std::string, std::string> blob_path_;  // first path seen, for messages
  std::map<std::string, std::string> tree_path_;  // first path seen (root: "")
  std::string largest_path_;
};

/// One line of pre-receive input.
struct RefUpdate {
  std::string old_id, new_id, ref;
};

/// Parses pre-receive input ("<old> <new> <ref>" lines). InvalidArgument when malformed. Pure.
Status ParseRefUpdates(const std::string& input, std::vector<RefUpdate>* out);

/// The pre-receive check: the number of updates against max_refs_per_push, then the tree of
/// every updated (not deleted) ref's new commit against the tree limits. Returns OK, or
/// ResourceExhausted / InvalidArgument / NotFound with the agent-facing message (without a
/// "kiln: refused: " prefix).
Status CheckPush(const std::vector<RefUpdate>& updates, const TreeLimits& limits,
                 ObjectSource* source);

/// "512 MiB", "2.9 GB"-style rendering: exact binary units when the value is a whole number of
/// them, else one decimal of the largest decimal unit. Pure.
std::string FormatBytes(int64_t bytes);

}  // namespace kiln
