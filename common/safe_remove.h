// RemoveTreeNoFollow: recursive removal of a directory tree that an untrusted user can write
// (the build user's store and layouts, the agent's source), safe for kiln running as root.
// It walks with openat(O_NOFOLLOW | O_DIRECTORY) and fstatat(AT_SYMLINK_NOFOLLOW) from a
// directory descriptor, so a symlink planted anywhere in the tree (even swapped in while the
// walk runs) is unlinked as a link and never followed: nothing outside the tree is touched.
// Entries on another filesystem (a mount point inside the tree) are left alone, and the depth
// is bounded.
//
// Plain function, no shared state; thread-safe (it never changes the working directory).
#pragma once

#include <string>

#include "common/status.h"

namespace kiln {

/// Removes `root`/`rel` and everything under it, where `root` is trusted (kiln's own directory;
/// it may be reached through symlinks) and every component of `rel` is not: none of them is
/// followed if it is a symlink (an intermediate symlink: nothing is removed, Internal). `rel`
/// must be relative without "..". A missing entry is Ok.
Status RemoveTreeBeneath(const std::string& root, const std::string& rel, int max_depth = 256);

/// RemoveTreeBeneath(dirname(path), basename(path)): the parent directories of `path` are
/// trusted. Removes `path` and everything under it. A missing `path` is Ok. When `path` itself is a
/// symlink, only the link is removed. Returns Internal with the first failure (it still
/// removes what it can), ResourceExhausted when the tree is deeper than `max_depth`.
Status RemoveTreeNoFollow(const std::string& path, int max_depth = 256);

}  // namespace kiln
