// File utilities shared by every folder: the one atomic file write and the one advisory lock.
//
// WriteFileAtomic is the only way kiln replaces a small file whose readers must never see it
// half-written (workspace state, git hooks, busy-branch lists, build keys): a uniquely named
// temporary sibling, written and fsync'ed, given its mode, renamed over the target, and the
// directory fsync'ed so the rename survives a power cut.
//
// Thread-safety: all functions are thread-safe; a FileLock object is not (own one per scope).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace kiln {

/// kDurable fsyncs the file and its directory; kAtomicOnly skips both, for hints that are cheap
/// to lose after a power cut (a reader still never sees a half-written file).
enum class Durability { kDurable, kAtomicOnly };

/// Atomically replaces `path` with `content` (mode `mode`). The temporary file never follows a
/// symlink and is removed on failure. Errors name the path; ResourceExhausted when the disk is
/// full (ENOSPC/EDQUOT), Internal otherwise.
Status WriteFileAtomic(const std::string& path, const std::string& content, mode_t mode = 0644,
                       Durability durability = Durability::kDurable);

/// The writer's pid when `name` is a WriteFileAtomic temporary ("<name>.tmp-<pid>-<n>"), else 0.
pid_t AtomicTempWriter(const std::string& name);

/// Removes the temporary files WriteFileAtomic left in `dir` (not below it) when its writer was
/// killed between create and rename ("<name>.tmp-<pid>-<n>" whose <pid> is no live process,
/// nor this one). Returns how many went. For start-up, after a kill -9.
size_t RemoveOrphanTempFiles(const std::string& dir);

/// Reads the whole file `path` (binary) into *out. False, *out unchanged, when it cannot be
/// opened or read.
bool ReadFile(const std::string& path, std::string* out);

/// fsync of a directory (after a rename or unlink in it). Internal on failure.
Status SyncDirectory(const std::string& dir);

/// Holds a flock(2) on `path` (created 0600 if missing, never through a symlink) for its
/// lifetime. `op` is LOCK_SH or LOCK_EX, optionally | LOCK_NB.
class FileLock {
 public:
  FileLock(const std::string& path, int op);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  /// True when the lock is held.
  bool held() const { return fd_ >= 0; }
  /// Why the lock is not held (empty when held; "busy" for LOCK_NB on a held lock).
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace kiln
