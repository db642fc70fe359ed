// StateStore: kiln's durable state across restarts — build records, the latest successful
// build per (domain, candidate) and per domain, the deployment per domain and the build-id
// sequence — as a typed model over a Journal (state/journal.h) in one
// directory (e.g. <state_dir>/state) — and the build-key cache (a key -> the image a succeeded
// build of it produced). kiln's one durable store: nothing else writes kiln's state files.
//
// Two parts with different sharing:
//   - the journal is one process's: Load takes its lock (a second `kiln serve` on the same
//     state directory is refused);
//   - the build-key cache is files under `options.keys_dir` (<state_dir>/keys), one small JSON
//     file per key, each replaced atomically (common/file_util.h WriteFileAtomic: temp file,
//     fsync, rename, directory fsync). It needs no Load and takes no lock, so `kiln build` (a
//     store it never loads) shares the cache with a running `kiln serve`. The storage collector
//     (storage/) removes entries of images it deletes.
//
// Usage (from a worker thread or at start-up, never on an actor thread: writes fsync):
//
//   StateStore store(StateStoreOptions{});
//   LoadSummary summary;
//   Status s = store.Load(state_dir + "/state", &summary);  // once, before anything else
//   BuildRecord b;  b.domain = "d"; b.candidate = "main"; b.commit = ...; b.build_key = ...;
//   s = store.RecordBuildStarted(&b);                         // assigns b.id ("b-<16 hex>")
//   BuildFinish f;  f.id = b.id; f.status = BuildStatus::kSucceeded; f.digest = ...;
//   s = store.RecordBuildFinished(f);
//   std::optional<BuildRecord> last = store.LatestSuccessful("d", "main");
//
// Every Record* call is durable when it returns OK (one journal append + fsync) and changes the
// in-memory model only then: on an error (ResourceExhausted for a full disk, Internal for EIO)
// nothing changed, in memory or on disk, and the call may simply be retried later.
//
// Load replays snapshot + journal; builds still in a non-final state (the process died during
// them) become `interrupted` (never succeeded), and that change is itself journaled — except
// those `resumable` accepts (issue 20: a pool build its worker may still run), left unfinished. A
// torn journal tail is cut away; corrupt regions in the middle are skipped and listed in
// LoadSummary::corruptions (the store then compacts, keeping the damaged file as *.corrupt).
// The journal is compacted into a snapshot when it passes `compact_threshold_bytes`; at that
// point builds beyond `max_builds_per_candidate` per candidate (oldest first, never one that
// is referenced as latest, deployed or running) are dropped from memory and disk.
//
// Thread-safety: thread-safe. Writers are serialized by one mutex held across the journal
// I/O; queries take a separate reader lock held only while copying the answer, so they never
// wait for an fsync or a compaction. Queries return copies.
// Ownership: `options.fs` (when set) must outlive the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/build_types.h"
#include "state/journal.h"

namespace kiln {

/// One build as the store remembers it.
struct BuildRecord {
  BuildId id;  // "b-<16 hex>"; assigned by RecordBuildStarted when empty
  std::string domain;
  std::string candidate;
  std::string commit;
  std::string build_key;  // 64 hex (may be empty when unknown)
  BuildStatus status = BuildStatus::kQueued;
  std::string image_ref;  // set when succeeded
  std::string digest;     // "sha256:<hex>" when succeeded
  std::vector<Diagnostic> diagnostics;
  BuildTimings timings;
  std::string error;       // failure reason (never a credential)
  std::string error_kind;  // actors/build_failure.h vocabulary; "" on success (and old records)
  bool cache_hit = false;
  int64_t started_at_ms = 0;   // wall clock (unix ms); filled by RecordBuildStarted when 0
  int64_t finished_at_ms = 0;  // filled by RecordBuildFinished when 0
};

/// The end (or a later phase) of a build, for RecordBuildFinished.
struct BuildFinish {
  BuildId id;
  BuildStatus status = BuildStatus::kFailed;  // any status; a final one closes the build
  std::string image_ref;
  std::string digest;
  std::vector<Diagnostic> diagnostics;
  BuildTimings timings;
  std::string error;
  std::string error_kind;
  bool cache_hit = false;
  std::string commit;          // when known only now (resolved after the start); "" keeps the old
  std::string build_key;       // likewise
  int64_t finished_at_ms = 0;  // 0: now
};

/// One deployment attempt of a domain.
struct DeployRecord {
  std::string deploy_id;  // caller's id (the service's are random "d-<16 hex>"); assigned
                          // from the store's sequence ("d-<16 hex>") when empty
  std::string domain;
  BuildId build_id;
  std::string image;   // image reference deployed
  std::string status;  // "in_progress", "rolled_out", "failed" (DeployState names)
  std::string reason;  // why (failure reason, "rollback", ...)
  int64_t at_ms = 0;   // filled when 0
};

struct StateStoreOptions {
  /// nullptr: the real file system.
  FileSystem* fs = nullptr;
  /// Compact when the journal passes this size.
  uint64_t compact_threshold_bytes = uint64_t{4} << 20;
  /// Builds kept per (domain, candidate) across compactions (referenced ones always kept).
  size_t max_builds_per_candidate = 200;
  /// fsync each record (false only for tests/benchmarks that never crash).
  bool sync = true;
  /// Wall clock in unix milliseconds (default: system_clock).
  std::function<int64_t()> now_ms;
  /// Issue 20: an unfinished build Load finds is left unfinished (not marked interrupted)
  /// when this says it can be carried on (a worker may still run it); the caller then ends
  /// it. Unset: every unfinished build is interrupted.
  std::function<bool(const BuildRecord&)> resumable;
  /// The build-key cache's directory (<state_dir>/keys; created on the first save). "" keeps
  /// no cache: SaveBuildKey refuses, BuildKeys is empty.
  std::string keys_dir;
};

/// What Load found.
struct LoadSummary {
  size_t builds = 0;
  size_t deploys = 0;                       // domains with a deploy record
  std::vector<BuildId> interrupted;         // builds marked interrupted by this load
  std::vector<BuildId> resumed;             // unfinished builds left to carry on (resumable)
  std::vector<BuildId> duplicate_terminal;  // a 2nd terminal record of a build (ignored)
  std::vector<BuildId> duplicate_started;   // a 2nd start record of a build id (ignored)
  uint64_t generation = 0;
  uint64_t journal_records = 0;
  uint64_t truncated_bytes = 0;  // torn tail cut away
  std::vector<std::string> corruptions;
  std::vector<std::string> notes;  // leftovers removed, unknown records skipped, ...
  int64_t load_ms = 0;
};

class StateStore {
 public:
  explicit StateStore(StateStoreOptions options);
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;
  ~StateStore();

  /// Opens `dir` (created when missing) and loads it; call once, before any other method
  /// (they return FailedPrecondition until it succeeded). Returns FailedPrecondition when
  /// another process uses `dir`, Internal for a corrupt snapshot or unreadable state, or the
  /// error of journaling the interrupted builds (the store stays unloaded; retry later).
  Status Load(const std::string& dir, LoadSummary* summary);

  /// Records a new build (status usually queued or running). Assigns `build->id` when empty and
  /// `started_at_ms` when 0. InvalidArgument when domain/candidate are empty or the id exists.
  Status RecordBuildStarted(BuildRecord* build);

  /// Records a phase change or the end of a build. A succeeded build becomes the latest of its
  /// candidate and domain. NotFound for an unknown id; FailedPrecondition when the build is
  /// already final.
  Status RecordBuildFinished(const BuildFinish& finish);

  /// Records a deployment attempt; `Deployed(domain)` is the newest rolled_out one and
  /// `LatestDeploy(domain)` the newest of any status. Assigns deploy_id and at_ms when empty.
  Status RecordDeploy(DeployRecord* deploy);

  /// Writes a snapshot and starts a new journal now (also done automatically).
  Status Compact();

  /// Whether Load succeeded: the journal is this process's (false in `kiln build`).
  bool journaled() const { return journaled_.load(); }

  // --- the build-key cache (needs no Load; blocking file I/O: worker threads or start-up) ---
  /// Writes `outcome` (a succeeded build) for `key` (64 lowercase hex), replacing an older
  /// entry. InvalidArgument for any other key, FailedPrecondition without a keys_dir;
  /// WriteFileAtomic's error (ResourceExhausted for a full disk, Internal) otherwise.
  Status SaveBuildKey(const std::string& key, const BuildOutcome& outcome) const;
  /// Every valid entry, oldest first (by file mtime). Skips other files, unparsable ones, a key
  /// that does not match its file name and entries without a sha256 digest.
  std::vector<std::pair<std::string, OutcomePtr>> BuildKeys() const;
  /// One build-key file's text, as it is: its "key" and outcome fields (a field that is
  /// missing or of another type stays empty/0). nullopt when the text is not a JSON object.
  /// Validates nothing else: BuildKeys does; the storage inventory lists invalid entries too.
  struct BuildKeyFile {
    std::string key;
    BuildOutcome outcome;  // status kSucceeded
  };
  static std::optional<BuildKeyFile> ParseBuildKeyFile(const std::string& text);

  std::optional<BuildRecord> Build(const BuildId& id) const;
  std::optional<BuildRecord> LatestSuccessful(const std::string& domain,
                                              const std::string& candidate) const;
  std::optional<BuildRecord> LatestSuccessfulInDomain(const std::string& domain) const;
  std::optional<DeployRecord> Deployed(const std::string& domain) const;
  std::optional<DeployRecord> LatestDeploy(const std::string& domain) const;
  /// Builds of a candidate, newest first, at most `limit`.
  std::vector<BuildRecord> Builds(const std::string& domain, const std::string& candidate,
                                  size_t limit = 50) const;
  /// Candidates of `domain` with at least one build, in name order.
  std::vector<std::string> Candidates(const std::string& domain) const;
  /// Domains with at least one build, in name order.
  std::vector<std::string> Domains() const;
  /// Every build kept, in start order (for state-check and tests; copies them all).
  std::vector<BuildRecord> AllBuilds() const;
  /// Builds not in a final state.
  std::vector<BuildRecord> ActiveBuilds() const;
  /// The sequence number the next assigned build id will carry.
  uint64_t next_build_seq() const;
  size_t build_count() const;
  /// Journal statistics; these two take the writer lock (may wait for an fsync).
  uint64_t journal_bytes() const;
  uint64_t generation() const;

  /// "b-" + 16 lowercase hex digits of `seq`.
  static std::string FormatBuildId(uint64_t seq);

  struct Model;  // the in-memory state (defined in state_store.cc)

 private:
  Status CheckLoaded() const;
  // Appends one record and, on success, applies it to the model. Requires write_mu_.
  Status Commit(uint8_t type, const std::string& payload);
  Status MaybeCompact();  // requires write_mu_
  Status CompactLocked();
  int64_t Now() const;

  const StateStoreOptions options_;
  std::atomic<bool> journaled_{false};  // set once Load succeeded
  mutable std::mutex write_mu_;         // serializes writers and the journal
  std::unique_ptr<Journal> journal_;    // guarded by write_mu_
  uint64_t failed_compaction_at_ = 0;   // journal size of the last failed compaction
  mutable std::shared_mutex model_mu_;  // writers hold it exclusively only to apply
  std::unique_ptr<Model> model_;        // guarded by model_mu_ (written under write_mu_ too)
};

}  // namespace kiln
