// Validation of agent-controlled names: candidates, domains, git refs, commits, build ids.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln {

constexpr size_t kMaxNameLength = 63;
constexpr size_t kMaxRefLength = 200;

/// Candidate and domain names: 1..63 chars of [A-Za-z0-9._-], starting with a letter or digit,
/// no "..", not ending in "." or ".lock". They are used as git branch names, OCI tags and
/// directory names, so the set is the intersection of what all three accept.
/// Returns InvalidArgument with a message naming `what` on failure.
Status ValidateName(std::string_view name, std::string_view what = "candidate");

/// A git ref the agent may name: a branch ("main", "feature/x") or "refs/heads/<branch>".
/// Segments separated by '/', each a valid name; at most 200 chars.
Status ValidateRef(std::string_view ref);

/// A commit id: 4..40 lowercase hex characters (full or abbreviated SHA-1), or 64 (SHA-256).
Status ValidateCommit(std::string_view commit);

/// True when `path` is a normalized relative path: non-empty '/'-separated segments, none of
/// them "." or "..", no leading or trailing '/', no NUL byte. Used for agent-controlled paths.
bool IsNormalizedRelativePath(std::string_view path);

/// True when `path` is "/" or "/" followed by a normalized relative path.
bool IsNormalizedAbsolutePath(std::string_view path);

}  // namespace kiln
