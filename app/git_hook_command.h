// `kiln git-hook pre-receive` (internal; not in the main help): run by the pre-receive hook that
// kiln installs into every domain repository (transport/git_http.h) to enforce the push limits
// of issue 15 (workspace/tree_limits.h) on the objects git has quarantined for the push.
//
//   kiln git-hook pre-receive [--max-tree-bytes=N] [--max-files=N] [--max-file-bytes=N]
//                             [--max-refs-per-push=N]     (omitted: TreeLimits defaults)
//
// Reads git's pre-receive input ("<old> <new> <ref>" lines) from `in`; reads objects with
// `git cat-file` in the repository named by GIT_DIR, passing on the quarantine variables git
// gives hooks (GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES, GIT_QUARANTINE_PATH) so
// the pushed objects are visible. A refusal is one line on `err` ("kiln: refused: ..."), which
// the pushing client prints as "remote: ...", and exit code 1 (git then rejects every ref of
// the push and discards the quarantined objects). Exit 0: accepted; 2: bad arguments.
//
// Stateless; thread-safety is irrelevant (runs once per process).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "workspace/tree_limits.h"

namespace kiln {

/// Parses the flags above into `out` (starting from TreeLimits defaults). Returns false and sets
/// `error` on an unknown flag or a value that is not a positive integer. Pure.
bool ParseGitHookFlags(const std::vector<std::string>& flags, TreeLimits* out, std::string* error);

/// The flags that reproduce `limits` (for the hook script). Pure.
std::vector<std::string> GitHookFlags(const TreeLimits& limits);

/// Runs `kiln git-hook <args...>` (args[0] is the hook name). Returns the exit code.
int GitHookCommand(const std::vector<std::string>& args, std::istream& in, std::ostream& err);

/// Absolute path of the running executable (readlink /proc/self/exe); empty when unknown.
std::string SelfExecutable();

}  // namespace kiln
