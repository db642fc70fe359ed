// CandidateBuilds: the pure core of one candidate's builds. It owns the candidate's build
// records and decides every transition of a build
//
//   requested -> resolving -> queued -> running -> pushing -> succeeded
//                   |           |         |          |    \-> failed | cancelled
//                   \-----------+---------+----------+------> failed | cancelled
//   (a queued build may also end as a cache hit, or wait on an identical build: joined)
//
// and the bookkeeping around it: superseding the active build by a newer request, joining an
// identical request or the build a push started, the single worker (one workspace, one
// blocking job at a time), the retention of the history (history_per_candidate records, the
// latest success always kept, only the newest logs whole), and restoring records from the
// journal after a restart.
//
// Every entry point returns the effects (value types, below) the candidate actor carries out
// in order: journal a record, answer waiters (after their journal record), send progress,
// talk to the scheduler, start a work phase, save a build key, send the domain a summary.
// Waiters and progress sinks are opaque ids the actor maps to its promises and actors.
//
// No CAF, no I/O, no threads: the clock and the build-id source are injected. Logs through
// spdlog (the operator's view of transitions). The log buffers and cancel tokens it holds are
// shared with the work phases (both are thread-safe themselves).
// Thread-safety: none; owned by one candidate actor.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/scheduler_core.h"
#include "actors/tool_views.h"
#include "builder/log_buffer.h"
#include "common/status.h"
#include "core/build_types.h"
#include "core/tool_backend.h"
#include "state/state_store.h"

namespace kiln {

class CancelToken;

using WaiterId = uint64_t;  // a caller waiting for an answer (the actor's response promise)
using SinkId = uint64_t;    // a caller's progress sink; 0: none

/// Results of a work phase (run off the actor), handed to the core.
struct WorkDone {
  BuildId id;
  std::string phase;  // "resolve", "checkout", "build", "blobs", "push"
  Status status;
  bool compile_failed = false;
  std::string failure_kind;             // the builder's own classification, "" when none
  std::string commit, tree, source_id;  // resolve
  std::string image_id;                 // build
  std::vector<Diagnostic> diagnostics;  // build
  std::string digest, ref;              // push
  int64_t elapsed_ms = 0;
  std::map<std::string, int64_t> parts;  // build: per-part timings (issue 18)
};

/// What a candidate tells its domain after every transition (list_candidates, apply).
struct CandidateSummary {
  std::string candidate;
  nlohmann::json json;  // {"candidate", "state", "latest_build": {...} | null, ...}
  std::optional<BuildId> latest_build;
  // The latest successful build and its request order (unix ns; larger = requested later).
  std::optional<BuildId> latest_success;
  int64_t latest_success_order = 0;
};

// --- effects -------------------------------------------------------------------------------

/// A journal write: a build's start, its end (bringing the start along if that was lost), or
/// none (a barrier: after everything posted before it).
struct JournalWrite {
  enum class Kind { kBarrier, kStart, kFinish } kind = Kind::kBarrier;
  BuildRecord start;
  BuildFinish finish;
};
/// Posts `write` (when set) to the journal, then delivers `result` to `waiters` (in order,
/// after the write; at once when no write is set or nothing is journaled).
struct AnswerEffect {
  std::optional<JournalWrite> write;
  ToolResult result;
  std::vector<WaiterId> waiters;
};
struct ProgressEffect {
  std::vector<SinkId> sinks;
  ToolProgress progress;
};
struct StartedEffect {  // tells one caller's sink the build id it is waiting on
  SinkId sink = 0;
  BuildId id;
};
struct DropSinksEffect {  // these sinks get nothing more
  std::vector<SinkId> sinks;
};
struct ResolveEffect {  // run the resolve phase (ref -> commit, or hash the source directory)
  BuildId id;
  BuildRequest req;
};
struct SubmitEffect {  // ask the scheduler for a slot: answer with Submitted / SubmitFailed
  JobRequest job;
};
struct BuildPhaseEffect {  // run checkout + build on the worker; answer with WorkDone
  BuildId id;
  std::string key;
  std::string commit;
  std::string tree;  // issue 18: the commit's tree as resolved (empty: the checkout derives it)
  std::optional<std::string> source_dir;
  std::shared_ptr<LogBuffer> log;
  std::shared_ptr<CancelToken> cancel;
  std::chrono::steady_clock::time_point deadline;  // started + build.timeout_s
};
// Issue 20: take a place in the push lane's line (build order); answer with LaneReserved
// (issue 18: granted when the lane was free and nobody in line).
struct ReserveLaneEffect {
  BuildId id;
};
struct LaneEffect {  // ask the scheduler for the repository's push lane: LaneGranted / LaneFailed
  BuildId id;
  std::chrono::steady_clock::time_point deadline;
};
// Run the push on the worker; answer with WorkDone. `blobs` (issue 20): only upload the blobs,
// before the lane is asked for (WorkDone phase "blobs"); else the push under the grant (blobs
// and manifest in one phase when the lane was taken on reserve, issue 18).
struct PushPhaseEffect {
  BuildId id;
  std::string key;
  std::string commit;
  std::optional<std::string> source_dir;
  std::string image_id;
  std::shared_ptr<LogBuffer> log;
  std::shared_ptr<CancelToken> cancel;
  std::chrono::steady_clock::time_point deadline;
  bool blobs = false;
};
struct ReleaseLaneEffect {
  BuildId id;
};
struct FinishedEffect {  // our execution of `id` ended: free the scheduler slot
  std::string key;
  BuildId id;
  OutcomePtr outcome;
};
struct CancelQueuedEffect {  // drop `id` from the scheduler (queue, waiters)
  BuildId id;
};
struct SaveKeyEffect {  // persist the build key -> outcome (build-key cache)
  std::string key;
  BuildOutcome outcome;
};
struct SummaryEffect {
  CandidateSummary summary;
};
struct BusyAddEffect {  // the branch has a build in progress (git push tells the agent)
  std::string branch;
  BuildId id;
};
struct BuildEndedEffect {  // busy branch, storage lease and metrics of a final build
  BuildId id;
  BuildStatus status = BuildStatus::kFailed;
  double build_s = 0, push_s = 0;
  bool cache_hit = false;
};
struct LeaseEffect {  // the candidate's storage is leased by `id` until it is final
  BuildId id;
};

using Effect =
    std::variant<AnswerEffect, ProgressEffect, StartedEffect, DropSinksEffect, ResolveEffect,
                 SubmitEffect, BuildPhaseEffect, LaneEffect, PushPhaseEffect, ReleaseLaneEffect,
                 FinishedEffect, CancelQueuedEffect, SaveKeyEffect, SummaryEffect, BusyAddEffect,
                 BuildEndedEffect, LeaseEffect, ReserveLaneEffect>;
using Effects = std::vector<Effect>;

// --- the core -------------------------------------------------------------------------------

class CandidateBuilds {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string domain;
    std::string candidate;
    std::string remote;               // the domain's git remote (results, next steps)
    std::string registry;             // image.registry (the lane: actors/candidate_work.h PushLane)
    std::vector<std::string> hidden;  // host details never shown to the agent
    size_t history = 50;              // history_per_candidate
    // Issue 19, memory that levels off (actors/build_history.h): the records and whole logs
    // this candidate may keep now (its share of the domain's bound; default: `history` and
    // 4), and the journal's record of a build no longer held (of this domain; null: none).
    std::function<size_t()> history_limit;
    std::function<size_t()> full_logs;
    std::function<std::optional<BuildRecord>(const BuildId&)> journal;
    size_t log_max_bytes = 4 << 20;
    int timeout_s = 900;          // build.timeout_s
    bool journaled = false;       // a state store exists: journal writes are emitted
    bool track_branches = false;  // busy branches exist: joins of identical requests
    bool save_keys = false;       // a build-key store exists
    std::function<std::string(const std::string& source_id)> build_key;
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
    std::function<int64_t()> wall_ns;  // unix ns; default: the system clock
    std::function<BuildId()> new_id;   // default: "b-" + 16 random hex
    /// Issue 20: an unfinished build of the journal that can be carried on (Builder::Resumable:
    /// its commit and build key); null: none can.
    std::function<bool(const BuildId&, std::string* commit, std::string* key)> resume;
  };

  explicit CandidateBuilds(Options opts);

  /// After a restart: the journal's records of this candidate (newest first, as the store
  /// returns them). Final records with their outcome; their logs are not kept. An unfinished
  /// one that `resume` accepts (issue 20) is carried on: queued for a slot again, its build
  /// phase re-attaches to the worker running it (the builder's job), then blobs, lane, push as
  /// any build, and one terminal record.
  Effects Restore(const std::vector<BuildRecord>& newest_first);

  /// A build request (build_candidate, kiln build, or a push). `waiter` gets the answer (at once
  /// with wait=false, else when the build is final); `sink` (0: none) gets the build id and
  /// progress. `pushes`: the domain's accepted git pushes so far.
  Effects Request(const BuildRequest& req, WaiterId waiter, SinkId sink, uint64_t pushes);
  /// The scheduler's answer to SubmitEffect.
  Effects Submitted(const BuildId& id, SchedulerCore::SubmitKind kind, const OutcomePtr& cached,
                    const BuildId& owner, int64_t position);
  /// The scheduler did not answer SubmitEffect: the build fails (kiln's side).
  Effects SubmitFailed(const BuildId& id, const std::string& why);
  /// The scheduler gives `id` a slot (start_atom).
  Effects Start(const BuildId& id, const std::string& key);
  /// The identical build `id` waited on ended (waited_atom).
  Effects Waited(const BuildId& id, const OutcomePtr& outcome);
  /// A work phase ended.
  Effects WorkFinished(const WorkDone& d);
  /// The scheduler's answer to ReserveLaneEffect. `granted` (issue 18): the lane was free and
  /// nobody in line, it is ours now: the push runs at once, blobs and manifest in one phase.
  /// Otherwise (also when the scheduler did not answer) the blobs upload first (issue 20),
  /// then the lane is asked for.
  Effects LaneReserved(const BuildId& id, bool granted);
  /// The push lane is ours / could not be had before the build's deadline.
  Effects LaneGranted(const BuildId& id);
  Effects LaneFailed(const BuildId& id, const std::string& why);
  /// cancel_build: the answer, plus the effects of cancelling.
  ToolResult CancelBuild(const BuildId& id, Effects* out);
  /// kiln stops: every build still in progress is cancelled.
  Effects Shutdown();

  // --- views (for the tools) ---
  std::optional<BuildId> active() const { return active_; }
  /// candidate_status (without the scheduler's queue position: -1).
  nlohmann::json StatusJson(int64_t position) const;
  /// build_result (tasks/get): the build's result; nullopt when unknown; *queued when queued.
  std::optional<ToolResult> Result(const BuildId& id, bool* queued) const;
  /// The deploy lookup ("" = latest success): {build_id, candidate, commit, image, digest,
  /// order}, or an error result when the build is not deployable.
  ToolResult Lookup(const BuildId& id) const;
  /// build_log.
  ToolResult Log(const BuildId& id, uint64_t offset, uint64_t limit, uint64_t tail) const;
  size_t records() const { return records_.size(); }
  bool worker_busy() const { return worker_busy_; }

 private:
  struct Waiter {
    WaiterId id = 0;
    Clock::time_point called;
    bool joined = false;
  };
  struct Record {
    BuildSnapshot snap;
    BuildRequest req;
    std::string key, tree, source_id, image_id;
    std::shared_ptr<LogBuffer> log;
    std::shared_ptr<CancelToken> cancel;
    std::vector<Waiter> waiters;
    std::vector<SinkId> sinks;
    bool push_claimed = false;  // issue 18: a build_candidate joined this push build
    Clock::time_point requested, started;
    int64_t order = 0;           // wall-clock order of the request (unix ns); survives restarts
    bool owner_running = false;  // we hold a scheduler slot for this build
    bool holds_push_lane = false;
    double progress = 0;
    uint64_t pushes_at_request = 0;
  };

  Record* Find(const BuildId& id);
  const Record* Find(const BuildId& id) const;
  ToolResult ResultOf(const Record& r) const;
  ToolResult ForWaiter(ToolResult res, Clock::time_point called, bool joined) const;
  int64_t Ms(Clock::duration d) const;
  std::optional<ToolResult> JoinPushBuild(const BuildRequest& req, WaiterId waiter, SinkId sink,
                                          Effects* out);
  std::optional<ToolResult> JoinIdentical(const BuildRequest& req, WaiterId waiter, SinkId sink,
                                          uint64_t pushes, Effects* out);
  void SetStatus(Record& r, BuildStatus st, const std::string& progress, Effects* out);
  void Progress(Record& r, const std::string& message, Effects* out);
  void Summary(Effects* out) const;
  void Finalize(Record& r, BuildStatus st, OutcomePtr outcome, const std::string& error,
                Effects* out);
  void AnswerWaiters(std::optional<JournalWrite> write, Record& r, Effects* out);
  void Cancel(Record& r, const std::string& why, Effects* out);
  void ReportFinished(Record& r, OutcomePtr outcome, Effects* out);
  void ReleaseLane(Record& r, Effects* out);
  void StartPending(Effects* out);
  void Execute(Record& r, Effects* out);
  void OnResolved(Record& r, const WorkDone& d, Effects* out);
  void OnBuilt(Record& r, const WorkDone& d, Effects* out);
  void OnBlobs(Record& r, const WorkDone& d, Effects* out);
  void Resume(Record& r, const std::string& commit, const std::string& key, Effects* out);
  void OnPushed(Record& r, const WorkDone& d, Effects* out);
  std::shared_ptr<BuildOutcome> MakeOutcome(const Record& r, BuildStatus st) const;
  std::string Describe(Record& r, const std::string& stage, const WorkDone& d,
                       const std::string& log_tail, std::string* kind) const;
  void TrimHistory();
  std::optional<BuildRecord> FromJournal(const BuildId& id) const;
  void LogTransition(const Record& r) const;

  Options opts_;
  std::map<BuildId, Record> records_;
  std::deque<BuildId> history_;  // oldest first
  std::optional<BuildId> active_;
  std::optional<BuildId> latest_success_;
  std::optional<BuildId> push_build_;  // issue 18: the latest build started on push
  bool worker_busy_ = false;
  std::deque<std::pair<BuildId, std::string>> pending_starts_;
};

}  // namespace kiln
