// StorageLeaseTable: which candidates' on-disk things (buildah storage, workspace) and which
// domains' shared build caches are in use right now, so that the storage collector never
// deletes what a running build uses (issue 19).
//
// Builds take two kinds of lease on "<domain>/<candidate>":
//  - a named hold (Hold/Drop by build id), taken by the candidate actor when the build starts
//    executing and dropped when it is final: covers the gaps between the build's blocking steps
//    (waiting for a push lane). Both are non-blocking (safe on an actor thread).
//  - a scoped use (Use), taken inside each blocking step (worker thread): waits while a
//    collection of that candidate (or of its whole domain) is deleting, then holds it off.
// The collector calls TryBeginCollect(key) right before deleting a candidate's item (false
// when any hold or use exists) and EndCollect(key) after; key "<domain>/*" stands for every
// candidate of the domain (its shared caches).
//
// Thread-safety: every method is thread-safe (one mutex + condition variable).
// Ownership: a plain object, usually shared (shared_ptr) by the runtime, the domain actors'
// environment and the collector. Scoped uses must not outlive the table.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace kiln {

class StorageLeaseTable {
 public:
  /// RAII scoped use; movable.
  class Use {
   public:
    Use() = default;
    Use(Use&& o) noexcept : table_(o.table_), key_(std::move(o.key_)) { o.table_ = nullptr; }
    Use& operator=(Use&& o) noexcept;
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use();

   private:
    friend class StorageLeaseTable;
    Use(StorageLeaseTable* table, std::string key) : table_(table), key_(std::move(key)) {}
    StorageLeaseTable* table_ = nullptr;
    std::string key_;
  };

  static std::string Key(const std::string& domain, const std::string& candidate) {
    return domain + "/" + candidate;
  }

  void Hold(const std::string& domain, const std::string& candidate, const std::string& id);
  /// Drops the hold `id` wherever it is; no-op when absent (idempotent).
  void Drop(const std::string& domain, const std::string& candidate, const std::string& id);
  /// Blocks while the candidate (or its domain) is being collected; call off the actors.
  Use Acquire(const std::string& domain, const std::string& candidate);

  /// True (and marks the key collecting) when nothing holds or uses it. "<domain>/*" checks
  /// every candidate of the domain.
  bool TryBeginCollect(const std::string& key);
  void EndCollect(const std::string& key);

  /// Keys "<domain>/<candidate>" held or used now.
  std::set<std::string> Busy() const;

 private:
  void Release(const std::string& key);
  bool InUseLocked(const std::string& key) const;
  bool CollectingLocked(const std::string& key) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::set<std::string>> holds_;  // key -> build ids
  std::map<std::string, int> uses_;                     // key -> scoped uses
  std::set<std::string> collecting_;
};

}  // namespace kiln
