// SourceTree: content hash of a plain source directory, for `kiln build --source DIR` (no git).
// The hash plays the role the git tree id plays for pushed sources: the source part of the
// build key.
//
// Stateless; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace kiln {

class SourceTree {
 public:
  /// Deterministic SHA-256 (64 lowercase hex) over the directory's entries in sorted order:
  /// relative paths, entry types, the exec bit of regular files, symlink targets (never
  /// followed) and file contents. Entries named ".git" (at any depth) are skipped; empty
  /// directories count. Independent of mtimes, owners and other permission bits.
  /// Returns InvalidArgument when `dir` is not a directory or the tree holds an entry that is not
  /// a regular file, directory or symlink (FIFO, socket, device); Internal on read errors.
  static Status HashDirectory(const std::string& dir, std::string* hex);
};

}  // namespace kiln
