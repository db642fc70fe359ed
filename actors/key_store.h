// KeyStore: the build-key cache on disk, so an identical tree is a cache hit across restarts
// and across `kiln build` invocations. One small JSON file per succeeded key under
// <state_dir>/keys/, written atomically (temp file, fsync, rename): a crash leaves either the
// old state or the new file, never a torn one; unreadable files are skipped on load.
//
// Thread-safe (no shared mutable state). Blocking file I/O: call from worker threads or at
// start-up, never from an actor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "actors/build_types.h"
#include "common/status.h"

namespace kiln {

class KeyStore {
 public:
  explicit KeyStore(std::string dir) : dir_(std::move(dir)) {}
  /// Writes `outcome` (a succeeded build) for `key`. Returns IOError-like Internal on failure.
  Status Save(const std::string& key, const BuildOutcome& outcome) const;
  /// Loads every valid entry (newest last, by file mtime).
  std::vector<std::pair<std::string, OutcomePtr>> LoadAll() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kiln
