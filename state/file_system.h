// FileSystem: the few file operations kiln's durable state (state/journal.h) needs, behind an
// interface so tests can inject faults (state/fault_file_system.h fails writes and fsyncs with
// ENOSPC/EIO on command). FileSystem::Default() is the POSIX implementation.
//
// Errors: ENOSPC and EDQUOT become ResourceExhausted, ENOENT NotFound, everything else Internal;
// messages name the operation, the path and strerror.
//
// Ownership: a WritableFile owns its descriptor (closed by Close() or the destructor); a
// LockHandle releases its lock when destroyed. Default() is a process-wide object, never deleted.
// Thread-safety: FileSystem implementations are thread-safe; a WritableFile is not (one owner).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kiln {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  /// Appends all of `data` at the end of the file. On failure a prefix may have been written.
  virtual Status Append(std::string_view data) = 0;
  /// fsync. On failure the durability of everything appended since the last Sync is unknown.
  virtual Status Sync() = 0;
  /// Cuts the file to `size` bytes; the next Append continues there.
  virtual Status Truncate(uint64_t size) = 0;
  /// Closes the descriptor (further calls fail). Returns the close error, if any.
  virtual Status Close() = 0;
};

/// An exclusive advisory lock on a file (flock) taken through a FileSystem, so faults can be
/// injected; released when destroyed. (Code outside state/ uses common/file_util.h FileLock.)
class LockHandle {
 public:
  virtual ~LockHandle() = default;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  /// The POSIX implementation (process-wide, never deleted).
  static FileSystem* Default();

  /// Reads the whole file into `out`. NotFound when it does not exist.
  virtual Status ReadFile(const std::string& path, std::string* out) = 0;
  /// Opens `path` for appending, creating it (mode 0600) when missing.
  virtual Status OpenAppendable(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  /// Creates `path` (mode 0600), truncating an existing file.
  virtual Status OpenTruncated(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  /// rename(2): atomically replaces `to`.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  /// Removes a file. NotFound when it does not exist.
  virtual Status Remove(const std::string& path) = 0;
  /// fsyncs the directory itself (makes creations, renames and removals durable).
  virtual Status SyncDir(const std::string& dir) = 0;
  /// Names (not paths) of the entries of `dir`, without "." and "..".
  virtual Status ListDir(const std::string& dir, std::vector<std::string>* names) = 0;
  /// mkdir -p (mode 0700 for created directories).
  virtual Status CreateDirs(const std::string& dir) = 0;
  /// Takes an exclusive lock on `path` (created when missing) without waiting.
  /// FailedPrecondition when another process holds it.
  virtual Status Lock(const std::string& path, std::unique_ptr<LockHandle>* out) = 0;
};

/// Status for a failed system call: ResourceExhausted for ENOSPC/EDQUOT, NotFound for ENOENT,
/// Internal otherwise. The message is "<what> <path>: <strerror(err)>".
Status ErrnoStatus(const std::string& what, const std::string& path, int err);

}  // namespace kiln
