// Journal: kiln's append-only record log with snapshots, under one directory. The building
// block of StateStore (state/state_store.h); knows nothing about what the records mean.
//
// Files (N = generation, 16 decimal digits):
//   snapshot-N.snap  one framed record holding the caller's snapshot of everything before N
//   journal-N.log    the records appended since that snapshot (generation 0: no snapshot)
//   LOCK             flock'ed while a Journal is open: one process per directory
// Record frame (little-endian): crc32c (4) | payload length (4) | type (1) | payload, the CRC
// (state/crc32c.h) covering length, type and payload. Types 1..kMaxRecordType are the caller's.
//
// Durability: Append writes a batch with one write and one fsync and returns OK only after
// both succeed. A failed append (ENOSPC, EIO, short write, failed fsync) is rolled back (the
// file is cut back to the last acknowledged record and synced) and returned; when even the
// rollback fails, the journal refuses appends (returning the error) and retries the rollback
// on each later Append, so no record is ever acknowledged after garbage.
//
// Loading: a torn or corrupt tail (no valid record after it) is cut off and counted in
// `truncated_bytes`. A corrupt region followed by valid records is reported in `corruptions`
// (file, offset, length) and skipped (or, with fail_on_corruption, fails Open); the caller
// should then Compact, which keeps the damaged journal as journal-N.log.corrupt for forensics.
//
// Compaction (atomic): write snapshot-(N+1).tmp, fsync; create journal-(N+1).log, fsync;
// rename the snapshot to snapshot-(N+1).snap, fsync the directory (the commit point); switch
// to the new journal; remove generation N. A crash at any point loads either generation N
// (snapshot N + journal N) or N+1; leftovers are cleaned up by the next Open.
//
// Ownership: Open returns an owned Journal; `options.fs` must outlive it.
// Thread-safety: not thread-safe; one owner at a time (StateStore serializes its calls).
// All methods block on file I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "state/file_system.h"

namespace kiln {

struct JournalRecord {
  uint8_t type = 0;  // 1..Journal::kMaxRecordType
  std::string payload;
};

struct JournalOptions {
  /// nullptr: FileSystem::Default().
  FileSystem* fs = nullptr;
  /// CompactionDue() once the journal holds at least this many bytes.
  uint64_t compact_threshold_bytes = uint64_t{4} << 20;
  /// fsync each append (false only for benchmarks and tests that do not crash).
  bool sync = true;
  /// Open fails (Internal) on a corrupt region followed by valid records instead of skipping
  /// and reporting it.
  bool fail_on_corruption = false;
};

/// What Open found on disk.
struct JournalLoad {
  bool has_snapshot = false;
  std::string snapshot;                // payload of snapshot-N.snap
  std::vector<JournalRecord> records;  // journal-N.log records, in append order
  uint64_t generation = 0;
  uint64_t journal_bytes = 0;            // valid bytes in journal-N.log
  uint64_t truncated_bytes = 0;          // torn tail cut away
  std::vector<std::string> corruptions;  // "journal-N.log offset X: N bytes skipped (reason)"
  std::vector<std::string> notes;        // leftovers removed, etc.
};

class Journal {
 public:
  static constexpr uint8_t kMaxRecordType = 127;
  static constexpr uint32_t kMaxPayload = 256u << 20;  // 256 MiB
  static constexpr size_t kHeaderSize = 9;

  /// Opens (creating `dir` when missing) and loads the newest generation. Returns
  /// FailedPrecondition when another process holds the directory, Internal when the newest
  /// snapshot is corrupt (or on corruption with fail_on_corruption), or the I/O error.
  static Status Open(const std::string& dir, const JournalOptions& options,
                     std::unique_ptr<Journal>* out, JournalLoad* load);

  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  /// Appends `batch` durably (one write, one fsync). InvalidArgument for a bad type or an
  /// oversized payload; ResourceExhausted (ENOSPC) or Internal (EIO...) on I/O failure, after
  /// which the file holds exactly the records acknowledged before.
  Status Append(const std::vector<JournalRecord>& batch);
  Status Append(uint8_t type, std::string payload);

  /// True when the journal has grown past compact_threshold_bytes.
  bool CompactionDue() const { return size_ >= options_.compact_threshold_bytes; }

  /// Replaces snapshot + journal by `snapshot` and an empty journal (see the file comment).
  /// On failure before the commit point nothing changes (leftovers are removed) and the error
  /// is returned; the journal stays usable.
  Status Compact(std::string_view snapshot);

  uint64_t generation() const { return generation_; }
  /// Bytes in the current journal file (acknowledged records only).
  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }

  /// Frames one record (exposed for tests).
  static std::string Encode(uint8_t type, std::string_view payload);

 private:
  Journal(std::string dir, const JournalOptions& options);
  Status Load(JournalLoad* load);
  Status LoadJournalFile(JournalLoad* load);
  Status Repair();
  std::string Path(const char* kind, uint64_t generation) const;

  const std::string dir_;
  const JournalOptions options_;
  FileSystem* const fs_;
  std::unique_ptr<LockHandle> lock_;
  std::unique_ptr<WritableFile> file_;
  uint64_t generation_ = 0;
  uint64_t size_ = 0;
  bool damaged_ = false;       // the file may hold bytes past size_: Repair before appending
  bool dir_unsynced_ = false;  // a compaction's rename is not known durable yet
  bool had_corruption_ = false;
};

}  // namespace kiln
