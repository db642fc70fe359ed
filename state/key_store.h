// KeyStore: the build-key cache on disk, so an identical tree is a cache hit across restarts
// and across `kiln build` invocations. One small JSON file per succeeded key under
// <state_dir>/keys/, written with common/file_util.h WriteFileAtomic (temp file, fsync, rename,
// directory fsync): a crash leaves either the old state or the new file, never a torn one;
// unreadable files are skipped on load. The only build-key cache kiln keeps: StateStore's
// journal holds none (`kiln build` shares these files with a running `kiln serve`, which holds
// the journal's lock). The storage collector (storage/) removes entries of images it deletes.
//
// Thread-safe (no shared mutable state). Blocking file I/O: call from worker threads or at
// start-up, never from an actor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/build_types.h"

namespace kiln {

class KeyStore {
 public:
  explicit KeyStore(std::string dir) : dir_(std::move(dir)) {}
  /// Writes `outcome` (a succeeded build) for `key` (64 lowercase hex). InvalidArgument for any
  /// other key; WriteFileAtomic's error (ResourceExhausted for a full disk, Internal) otherwise.
  Status Save(const std::string& key, const BuildOutcome& outcome) const;
  /// Loads every valid entry (newest last, by file mtime): skips other files, unparsable ones,
  /// a key that does not match its file name and entries without a sha256 digest.
  std::vector<std::pair<std::string, OutcomePtr>> LoadAll() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kiln
