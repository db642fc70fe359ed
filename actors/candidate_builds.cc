#include "actors/candidate_builds.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <random>

#include "actors/build_failure.h"
#include "actors/build_history.h"
#include "actors/on_push_policy.h"
#include "common/json_text.h"
#include "core/cancel_token.h"

namespace kiln {
namespace {

constexpr size_t kTailBytes = 4096;
// Issue 19: only the newest builds keep their whole log in memory (Options::full_logs); older
// finished ones keep the tail (build_log of an older build starts at its first kept byte).
constexpr size_t kOldLogTail = 64 << 10;

BuildId RandomBuildId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[19];
  std::snprintf(buf, sizeof buf, "b-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

int64_t SystemNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The cancel token of every finished build: already cancelled and shared, so the up to
// history_per_candidate finished records per candidate hold no descriptor (an eventfd each
// would let an agent exhaust kiln's descriptors with cheap failing builds).
const std::shared_ptr<CancelToken>& SpentToken() {
  static const auto token = [] {
    auto t = std::make_shared<CancelToken>();
    t->Cancel();
    return t;
  }();
  return token;
}

OutcomePtr CancelledOutcome() {
  auto o = std::make_shared<BuildOutcome>();
  o->status = BuildStatus::kCancelled;
  return o;
}

BuildStatus FailedOrCancelled(const Status& st) {
  return st.code() == Status::Code::kCancelled ? BuildStatus::kCancelled : BuildStatus::kFailed;
}

// The reason of a final build, for the operator's log and the log's first line.
std::string Why(const BuildSnapshot& s) {
  return s.error.empty() && s.outcome ? s.outcome->error : s.error;
}

}  // namespace

CandidateBuilds::CandidateBuilds(Options opts) : opts_(std::move(opts)) {
  if (!opts_.wall_ns) opts_.wall_ns = SystemNs;
  if (!opts_.new_id) opts_.new_id = RandomBuildId;
  if (!opts_.now) opts_.now = [] { return Clock::now(); };
}

CandidateBuilds::Record* CandidateBuilds::Find(const BuildId& id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}
const CandidateBuilds::Record* CandidateBuilds::Find(const BuildId& id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

int64_t CandidateBuilds::Ms(Clock::duration d) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

ToolResult CandidateBuilds::ResultOf(const Record& r) const {
  BuildSnapshot s = r.snap;
  if (r.log) s.log_tail = r.log->Tail(kTailBytes);
  return {BuildJson(s), s.status != BuildStatus::kSucceeded && IsFinal(s.status)};
}

// Issue 18: the answer for one caller: its own `joined` and `timings.waited_ms` (call -> now).
ToolResult CandidateBuilds::ForWaiter(ToolResult res, Clock::time_point called, bool joined) const {
  res.structured["joined"] = joined;
  res.structured["timings"]["waited_ms"] = Ms(opts_.now() - called);
  return res;
}

void CandidateBuilds::LogTransition(const Record& r) const {
  const BuildStatus st = r.snap.status;
  if (IsFinal(st) && st != BuildStatus::kSucceeded) {
    // Why, for the operator: the first line of the reason (never a credential: errors are
    // built from kiln's own messages and the build's output, which holds none).
    std::string why = Why(r.snap);
    why = why.substr(0, why.find('\n'));
    if (why.size() > 300) why = why.substr(0, 300) + "...";
    spdlog::warn("build {} domain={} candidate={} -> {}{}{}", r.snap.id, opts_.domain,
                 opts_.candidate, PhaseName(st), why.empty() ? "" : ": ", why);
    return;
  }
  spdlog::info("build {} domain={} candidate={} -> {}{}", r.snap.id, opts_.domain, opts_.candidate,
               PhaseName(st),
               r.snap.cache_hit ? " (cache hit)" : (r.snap.deduplicated ? " (deduplicated)" : ""));
}

void CandidateBuilds::Progress(Record& r, const std::string& message, Effects* out) {
  r.progress += 1;
  if (!r.sinks.empty())
    out->push_back(ProgressEffect{r.sinks, {r.progress, std::nullopt, message}});
}

void CandidateBuilds::SetStatus(Record& r, BuildStatus st, const std::string& progress,
                                Effects* out) {
  r.snap.status = st;
  LogTransition(r);
  if (!progress.empty()) Progress(r, progress, out);
  Summary(out);  // list_candidates shows every transition
}

void CandidateBuilds::Summary(Effects* out) const {
  const Record* latest = history_.empty() ? nullptr : Find(history_.back());
  const Record* success = latest_success_ ? Find(*latest_success_) : nullptr;
  CandidateSummary sum;
  sum.candidate = opts_.candidate;
  sum.json = CandidateSummaryJson(opts_.candidate, latest ? &latest->snap : nullptr,
                                  success ? &success->snap : nullptr, success ? success->order : 0);
  if (latest) sum.latest_build = latest->snap.id;
  if (success) {
    sum.latest_success = success->snap.id;
    sum.latest_success_order = success->order;
  }
  out->push_back(SummaryEffect{std::move(sum)});
}

Effects CandidateBuilds::Restore(const std::vector<BuildRecord>& newest_first) {
  Effects out;
  // Issue 20: of the unfinished builds the builder could carry on, only the newest is (an older
  // one would be submitted, then superseded by it): the older ones end superseded at once.
  std::optional<BuildId> carried;
  std::string commit, key;
  for (const BuildRecord& b : newest_first)
    if (!IsFinal(b.status) && opts_.resume && opts_.resume(b.id, &commit, &key)) {
      carried = b.id;
      break;
    }
  for (auto it = newest_first.rbegin(); it != newest_first.rend(); ++it) {  // oldest first
    const BuildRecord& b = *it;
    if (records_.count(b.id)) continue;
    Record& r = records_[b.id];
    r.snap = SnapshotOfRecord(b, opts_.remote);
    r.snap.candidate = opts_.candidate;
    r.cancel = SpentToken();
    r.order = b.started_at_ms * 1000000;
    history_.push_back(b.id);
    if (carried && b.id == *carried && opts_.resume(b.id, &commit, &key)) {
      Resume(r, commit, key, &out);
      continue;
    }
    if (carried && !IsFinal(b.status) && opts_.resume(b.id, &commit, &key)) {
      r.log = std::make_shared<LogBuffer>(kTailBytes);
      Cancel(r, "superseded by build " + *carried, &out);
      continue;
    }
    r.log = std::make_shared<LogBuffer>(kTailBytes);
    r.log->Append("kiln: the log of this build was not kept across a restart of kiln\n");
    r.log->Close();
    if (b.status == BuildStatus::kSucceeded && !b.digest.empty()) latest_success_ = b.id;
  }
  if (!newest_first.empty()) Summary(&out);
  return out;
}

// Issue 20: carries on a build an earlier process started (its start record exists): a slot
// again, then the build phase, whose builder re-attaches to it.
void CandidateBuilds::Resume(Record& r, const std::string& commit, const std::string& key,
                             Effects* out) {
  r.snap.commit = commit;
  r.key = key;
  r.req.commit = commit;
  r.req.wait = false;
  r.requested = opts_.now();
  r.cancel = std::make_shared<CancelToken>();
  r.log = std::make_shared<LogBuffer>(opts_.log_max_bytes);
  r.log->Append("kiln: kiln restarted during build " + r.snap.id + " of commit " + commit +
                "; carrying it on\n");
  if (active_)
    if (Record* old = Find(*active_)) Cancel(*old, "superseded by build " + r.snap.id, out);
  active_ = r.snap.id;
  SetStatus(r, BuildStatus::kQueued, "re-attaching after a restart", out);
  out->push_back(SubmitEffect{JobRequest{r.snap.id, opts_.domain, opts_.candidate, r.key}});
}

// Issue 18: the build a push started answers a build_candidate for its commit (or for the
// branch's head, which it is): same build id, joined.
std::optional<ToolResult> CandidateBuilds::JoinPushBuild(const BuildRequest& req, WaiterId waiter,
                                                         SinkId sink, Effects* out) {
  if (!push_build_ || req.on_push) return std::nullopt;
  Record* pb = Find(*push_build_);
  if (!pb) return std::nullopt;
  PushBuildFacts f;
  f.candidate = opts_.candidate;
  f.pushed_commit = pb->req.commit.value_or("");
  f.status = pb->snap.status;
  f.latest = !history_.empty() && history_.back() == pb->snap.id;
  f.claimed = pb->push_claimed;
  if (!JoinsPushBuild(f, req)) return std::nullopt;
  pb->push_claimed = true;
  spdlog::info("build {} domain={} candidate={}: build_candidate joined the build started on push",
               pb->snap.id, opts_.domain, opts_.candidate);
  const auto called = opts_.now();
  if (sink) out->push_back(StartedEffect{sink, pb->snap.id});
  if (req.wait && !IsFinal(pb->snap.status)) {
    if (sink) pb->sinks.push_back(sink);
    pb->waiters.push_back({waiter, called, true});
    return ToolResult{};  // answered when the build is final
  }
  if (!pb->snap.waited_ms) pb->snap.waited_ms = Ms(opts_.now() - called);
  // After its journal records.
  out->push_back(AnswerEffect{JournalWrite{}, ForWaiter(ResultOf(*pb), called, true), {waiter}});
  return ToolResult{};
}

// The same request again (a retry, or parallel calls) while no push reached the domain since
// the running build was requested: it would build the same commit, so it joins that build
// instead of superseding it.
std::optional<ToolResult> CandidateBuilds::JoinIdentical(const BuildRequest& req, WaiterId waiter,
                                                         SinkId sink, uint64_t pushes,
                                                         Effects* out) {
  if (!active_ || !opts_.track_branches || req.source_dir) return std::nullopt;
  Record* r0 = Find(*active_);
  if (!r0 || IsFinal(r0->snap.status) || r0->req.source_dir || r0->req.ref != req.ref ||
      r0->req.commit != req.commit || r0->pushes_at_request != pushes)
    return std::nullopt;
  spdlog::info("build {} domain={} candidate={}: an identical request joined it", r0->snap.id,
               opts_.domain, opts_.candidate);
  const auto called = opts_.now();
  if (sink) {
    r0->sinks.push_back(sink);
    out->push_back(StartedEffect{sink, r0->snap.id});
  }
  if (req.wait) {
    r0->waiters.push_back({waiter, called, true});
    return ToolResult{};
  }
  // After the build's start record (the writer runs in order).
  out->push_back(AnswerEffect{JournalWrite{}, ForWaiter(ResultOf(*r0), called, true), {waiter}});
  return ToolResult{};
}

Effects CandidateBuilds::Request(const BuildRequest& req, WaiterId waiter, SinkId sink,
                                 uint64_t pushes) {
  Effects out;
  const auto called = opts_.now();
  if (JoinPushBuild(req, waiter, sink, &out)) return out;
  if (JoinIdentical(req, waiter, sink, pushes, &out)) return out;
  BuildId id = opts_.new_id();
  while (records_.count(id)) id = opts_.new_id();
  if (active_)
    if (Record* old = Find(*active_))
      Cancel(*old, "superseded by build " + id + " (a newer build request for this candidate)",
             &out);
  Record& r = records_[id];
  r.snap.id = id;
  r.snap.candidate = opts_.candidate;
  r.snap.remote = opts_.remote;
  r.req = req;
  r.pushes_at_request = pushes;
  r.requested = called;
  r.order = opts_.wall_ns();
  r.cancel = std::make_shared<CancelToken>();
  r.snap.started_on_push = req.on_push;  // issue 18
  if (req.on_push) push_build_ = id;
  r.log = std::make_shared<LogBuffer>(opts_.log_max_bytes);
  if (sink) {
    r.sinks.push_back(sink);
    out.push_back(StartedEffect{sink, id});
  }
  history_.push_back(id);
  active_ = id;
  std::optional<JournalWrite> start;
  if (opts_.journaled) {
    start = JournalWrite{JournalWrite::Kind::kStart, {}, {}};
    start->start.id = id;
    start->start.domain = opts_.domain;
    start->start.candidate = opts_.candidate;
    start->start.status = BuildStatus::kResolving;
  }
  if (opts_.track_branches && !req.source_dir && !req.commit) {
    std::string branch = req.ref ? *req.ref : opts_.candidate;
    if (branch.rfind("refs/heads/", 0) == 0) branch = branch.substr(11);
    out.push_back(BusyAddEffect{branch, id});
  }
  SetStatus(r, BuildStatus::kResolving, "resolving source", &out);
  if (!req.wait) {
    // With a journal, the build id is handed out only once its start is durable: after a
    // crash the caller's id is known (as interrupted at worst), never missing.
    out.push_back(AnswerEffect{start, ForWaiter(ResultOf(r), called, false), {waiter}});
  } else {
    if (start) out.push_back(AnswerEffect{start, {}, {}});
    r.waiters.push_back({waiter, called, false});
  }
  out.push_back(ResolveEffect{id, req});
  return out;
}

void CandidateBuilds::AnswerWaiters(std::optional<JournalWrite> write, Record& r, Effects* out) {
  if (!r.waiters.empty() && !r.snap.waited_ms)
    r.snap.waited_ms = Ms(opts_.now() - r.waiters[0].called);
  ToolResult base = ResultOf(r);
  if (r.waiters.empty()) {
    if (write) out->push_back(AnswerEffect{std::move(write), base, {}});
    return;
  }
  // Each caller with its own joined / waited_ms (issue 18); the first carries the write, the
  // others come after it.
  for (size_t i = 0; i < r.waiters.size(); ++i) {
    const Waiter& w = r.waiters[i];
    std::optional<JournalWrite> wr =
        i == 0 && write
            ? std::move(write)
            : (opts_.journaled ? std::optional<JournalWrite>(JournalWrite{}) : std::nullopt);
    out->push_back(AnswerEffect{std::move(wr), ForWaiter(base, w.called, w.joined), {w.id}});
  }
  r.waiters.clear();
}

// Moves `r` to a final state and answers everyone waiting on it.
void CandidateBuilds::Finalize(Record& r, BuildStatus st, OutcomePtr outcome,
                               const std::string& error, Effects* out) {
  if (IsFinal(r.snap.status)) return;
  r.cancel = SpentToken();  // workers still running hold their own reference
  r.snap.outcome = outcome;
  if (!error.empty()) r.snap.error = error;
  r.snap.timings.total_ms = Ms(opts_.now() - r.requested);
  if (outcome && !r.snap.cache_hit) {
    r.snap.timings.build_ms = outcome->build_ms;
    r.snap.timings.push_ms = outcome->push_ms;
  }
  if (st == BuildStatus::kSucceeded) latest_success_ = r.snap.id;
  if (active_ && *active_ == r.snap.id) active_.reset();
  SetStatus(r, st, "", out);  // also sends the candidate's summary
  if (r.log) {
    if (!r.snap.error.empty()) r.log->Append("kiln: " + r.snap.error + "\n");
    r.log->Close();
  }
  out->push_back(BuildEndedEffect{r.snap.id, st, r.snap.timings.build_ms / 1000.0,
                                  r.snap.timings.push_ms / 1000.0, r.snap.cache_hit});
  std::optional<JournalWrite> write;
  if (opts_.journaled) {
    write = JournalWrite{JournalWrite::Kind::kFinish, {}, {}};
    BuildFinish& f = write->finish;
    f.id = r.snap.id;
    f.status = st;
    if (outcome) {
      f.image_ref = st == BuildStatus::kSucceeded ? outcome->image_ref : "";
      f.digest = st == BuildStatus::kSucceeded ? outcome->digest : "";
      f.diagnostics = outcome->diagnostics;
    }
    f.timings = r.snap.timings;
    f.error = Why(r.snap);
    f.error_kind = r.snap.error.empty() && outcome ? outcome->error_kind : r.snap.error_kind;
    f.cache_hit = r.snap.cache_hit;
    f.commit = r.snap.commit;
    f.build_key = r.key;
    // When the start could not be recorded (a full disk then), the end brings it along, so a
    // build that succeeded once space was back is not lost.
    write->start.id = r.snap.id;
    write->start.domain = opts_.domain;
    write->start.candidate = opts_.candidate;
    write->start.status = BuildStatus::kResolving;
  }
  AnswerWaiters(std::move(write), r, out);
  if (!r.sinks.empty()) out->push_back(DropSinksEffect{std::move(r.sinks)});
  r.sinks.clear();
  TrimHistory();
}

std::optional<BuildRecord> CandidateBuilds::FromJournal(const BuildId& id) const {
  if (!opts_.journal) return std::nullopt;
  auto b = opts_.journal(id);
  if (!b || b->domain != opts_.domain) return std::nullopt;
  return b;
}

void CandidateBuilds::TrimHistory() {
  const size_t keep =
      opts_.history_limit ? std::max<size_t>(1, opts_.history_limit()) : opts_.history;
  const size_t full_logs = opts_.full_logs ? opts_.full_logs() : kFullLogsPerCandidate;
  // Oldest first; the latest success and unfinished builds stay wherever they are (an old
  // latest success no longer stops the trim: a candidate failing for days stays bounded).
  size_t excess = history_.size() > keep ? history_.size() - keep : 0;
  for (auto it = history_.begin(); it != history_.end() && excess > 0;) {
    const Record* r = Find(*it);
    if ((r && !IsFinal(r->snap.status)) || (latest_success_ && *latest_success_ == *it)) {
      ++it;
      continue;
    }
    records_.erase(*it);
    it = history_.erase(it);
    --excess;
  }
  size_t seen = 0;
  for (auto h = history_.rbegin(); h != history_.rend(); ++h) {
    if (++seen <= full_logs) continue;
    Record* r = Find(*h);
    if (!r || !IsFinal(r->snap.status) || !r->log) continue;
    if (r->log->held_bytes() > kOldLogTail) r->log->Shrink(kOldLogTail);
  }
}

std::shared_ptr<BuildOutcome> CandidateBuilds::MakeOutcome(const Record& r, BuildStatus st) const {
  auto o = std::make_shared<BuildOutcome>();
  o->status = st;
  o->built_by = r.snap.id;
  o->commit = r.snap.commit;
  if (r.log) o->log_tail = r.log->Tail(kTailBytes);
  return o;
}

void CandidateBuilds::ReportFinished(Record& r, OutcomePtr outcome, Effects* out) {
  if (!r.owner_running) return;
  r.owner_running = false;
  out->push_back(FinishedEffect{r.key, r.snap.id, std::move(outcome)});
}

void CandidateBuilds::ReleaseLane(Record& r, Effects* out) {
  if (!r.holds_push_lane) return;
  r.holds_push_lane = false;
  out->push_back(ReleaseLaneEffect{r.snap.id});
}

void CandidateBuilds::Cancel(Record& r, const std::string& why, Effects* out) {
  if (IsFinal(r.snap.status)) return;
  r.cancel->Cancel();
  out->push_back(CancelQueuedEffect{r.snap.id});
  r.snap.error_kind = why.rfind("superseded", 0) == 0 ? "superseded" : "cancelled";
  Finalize(r, BuildStatus::kCancelled, nullptr, why, out);
}

// The agent-facing wording of a failed step (actors/build_failure.h); host paths hidden.
std::string CandidateBuilds::Describe(Record& r, const std::string& stage, const WorkDone& d,
                                      const std::string& log_tail, std::string* kind) const {
  FailureFacts f;
  f.stage = stage;
  f.status = d.status;
  f.agent_fault = d.compile_failed;
  f.hint = d.failure_kind;
  f.diagnostics = d.diagnostics;
  f.candidate = opts_.candidate;
  f.hidden = opts_.hidden;
  f.log_tail = log_tail;
  f.remote = opts_.remote;
  FailureView v = DescribeFailure(f);
  if (v.error_kind == "infrastructure") spdlog::warn("build {}: {}", r.snap.id, d.status.message());
  *kind = v.error_kind;
  return v.error;
}

void CandidateBuilds::OnResolved(Record& r, const WorkDone& d, Effects* out) {
  if (IsFinal(r.snap.status)) return;
  if (!d.status.ok()) {
    std::string error = Describe(r, "resolve", d, "", &r.snap.error_kind);
    Finalize(r, BuildStatus::kFailed, nullptr, error, out);
    return;
  }
  r.snap.commit = d.commit;
  r.tree = d.tree;
  r.source_id = d.source_id;
  r.key = opts_.build_key ? opts_.build_key(d.source_id) : d.source_id;
  r.log->Append("kiln: build " + r.snap.id + " of " +
                (d.commit.empty() ? std::string("source directory") : "commit " + d.commit) +
                ", key " + r.key.substr(0, 16) + "\n");
  SetStatus(r, BuildStatus::kQueued, "", out);
  out->push_back(SubmitEffect{JobRequest{r.snap.id, opts_.domain, opts_.candidate, r.key}});
}

Effects CandidateBuilds::Submitted(const BuildId& id, SchedulerCore::SubmitKind kind,
                                   const OutcomePtr& cached, const BuildId& owner,
                                   int64_t position) {
  Effects out;
  Record* r = Find(id);
  if (!r || IsFinal(r->snap.status)) return out;
  switch (kind) {
    case SchedulerCore::SubmitKind::kCacheHit:
      r->snap.cache_hit = true;
      r->snap.timings = {};
      if (cached)
        r->log->Append("kiln: identical build " + cached->built_by + " already produced " +
                       cached->image_ref + "\n");
      Finalize(*r, BuildStatus::kSucceeded, cached, "", &out);
      break;
    case SchedulerCore::SubmitKind::kJoined:
      r->snap.deduplicated = true;
      r->log->Append("kiln: identical build " + owner + " is in progress; sharing it\n");
      Progress(*r, "waiting for identical build " + owner, &out);
      break;
    default:
      if (r->snap.status != BuildStatus::kQueued) break;  // already started
      if (position >= 0) r->snap.queue_position = position;
      Progress(*r,
               "queued" +
                   (position >= 0 ? " (position " + std::to_string(position) + ")" : std::string()),
               &out);
      break;
  }
  return out;
}

Effects CandidateBuilds::SubmitFailed(const BuildId& id, const std::string& why) {
  Effects out;
  Record* r = Find(id);
  if (!r || IsFinal(r->snap.status)) return out;
  r->snap.error_kind = "infrastructure";
  Finalize(*r, BuildStatus::kFailed, nullptr, why, &out);
  return out;
}

Effects CandidateBuilds::Start(const BuildId& id, const std::string& key) {
  Effects out;
  pending_starts_.emplace_back(id, key);
  StartPending(&out);
  return out;
}

void CandidateBuilds::StartPending(Effects* out) {
  while (!worker_busy_ && !pending_starts_.empty()) {
    auto [id, key] = pending_starts_.front();
    pending_starts_.pop_front();
    Record* r = Find(id);
    if (!r || IsFinal(r->snap.status)) {
      // Cancelled while waiting for the workspace: give the slot back.
      out->push_back(FinishedEffect{key, id, CancelledOutcome()});
      continue;
    }
    Execute(*r, out);
  }
}

void CandidateBuilds::Execute(Record& r, Effects* out) {
  r.owner_running = true;
  r.started = opts_.now();
  r.snap.timings.queued_ms = Ms(r.started - r.requested);
  SetStatus(r, BuildStatus::kRunning, "building", out);
  worker_busy_ = true;
  // Issue 19: the candidate's storage and workspace are leased until the build is final;
  // registry waits count against the build's timeout.
  out->push_back(LeaseEffect{r.snap.id});
  out->push_back(BuildPhaseEffect{r.snap.id, r.key, r.snap.commit, r.tree, r.req.source_dir, r.log,
                                  r.cancel, r.started + std::chrono::seconds(opts_.timeout_s)});
}

Effects CandidateBuilds::Waited(const BuildId& id, const OutcomePtr& outcome) {
  Effects out;
  Record* r = Find(id);
  if (!r) return out;
  const BuildStatus st = outcome ? outcome->status : BuildStatus::kFailed;
  if (outcome && r->snap.commit.empty()) r->snap.commit = outcome->commit;
  Finalize(*r, st, outcome, "", &out);
  return out;
}

Effects CandidateBuilds::WorkFinished(const WorkDone& d) {
  Effects out;
  if (d.phase != "resolve") worker_busy_ = false;
  if (Record* r = Find(d.id)) {
    if (d.phase == "resolve")
      OnResolved(*r, d, &out);
    else if (d.phase == "build" || d.phase == "checkout")
      OnBuilt(*r, d, &out);
    else if (d.phase == "blobs")
      OnBlobs(*r, d, &out);
    else
      OnPushed(*r, d, &out);
  }
  StartPending(&out);
  return out;
}

void CandidateBuilds::OnBuilt(Record& r, const WorkDone& d, Effects* out) {
  if (IsFinal(r.snap.status)) {  // cancelled/superseded while building
    ReportFinished(r, CancelledOutcome(), out);
    return;
  }
  r.snap.timings.parts = d.parts;
  if (!d.status.ok()) {
    // Issue 20: a build carried on after a restart that its worker no longer runs.
    const BuildStatus st =
        d.failure_kind == "interrupted" ? BuildStatus::kInterrupted : FailedOrCancelled(d.status);
    auto o = MakeOutcome(r, st);
    o->diagnostics = d.diagnostics;
    std::string error =
        Describe(r, d.phase, d, r.log ? r.log->Tail(kTailBytes) : "", &o->error_kind);
    o->error = ToValidUtf8(error);
    // The builder's own words are the last line of the log, where the agent looks first.
    if (r.log) r.log->Append("kiln: " + error + "\n");
    o->build_ms = d.elapsed_ms;
    ReportFinished(r, o, out);
    Finalize(r, st, o, "", out);
    return;
  }
  r.image_id = d.image_id;
  r.snap.timings.build_ms = d.elapsed_ms;
  SetStatus(r, BuildStatus::kPushing, "pushing", out);
  // Issue 20: the place in the push lane's line is taken now (tags move in build order);
  // LaneReserved goes on from there.
  out->push_back(ReserveLaneEffect{r.snap.id});
  worker_busy_ = true;  // the upload reads the candidate's storage
}

Effects CandidateBuilds::LaneReserved(const BuildId& id, bool granted) {
  Effects out;
  Record* r = Find(id);
  if (!r || IsFinal(r->snap.status)) {  // cancelled or superseded while reserving
    worker_busy_ = false;
    out.push_back(ReleaseLaneEffect{id});  // the lane taken, or the place in line
    if (r) ReportFinished(*r, CancelledOutcome(), &out);
    StartPending(&out);
    return out;
  }
  // Issue 18: the lane was free and nobody in line: no separate blob stage (nobody waits for
  // the lane meanwhile); the push under the grant uploads the blobs and puts the manifest.
  // Otherwise (issue 20) the blobs upload while the lane is held or others are ahead.
  r->holds_push_lane = granted;
  out.push_back(PushPhaseEffect{r->snap.id, r->key, r->snap.commit, r->req.source_dir, r->image_id,
                                r->log, r->cancel,
                                r->started + std::chrono::seconds(opts_.timeout_s), !granted});
  return out;
}

void CandidateBuilds::OnBlobs(Record& r, const WorkDone& d, Effects* out) {
  r.snap.timings.parts["blobs_ms"] = d.elapsed_ms;
  if (IsFinal(r.snap.status) || !d.status.ok()) {
    out->push_back(ReleaseLaneEffect{r.snap.id});  // leave the line
    if (IsFinal(r.snap.status))
      ReportFinished(r, CancelledOutcome(), out);
    else
      OnPushed(r, d, out);  // a push failure (its parts added there); the build's result kept
    return;
  }
  for (const auto& [part, ms] : d.parts) r.snap.timings.parts[part] = ms;  // read_ms, compress_ms
  out->push_back(LaneEffect{r.snap.id, r.started + std::chrono::seconds(opts_.timeout_s)});
}

Effects CandidateBuilds::LaneGranted(const BuildId& id) {
  Effects out;
  Record* r = Find(id);
  if (!r) return out;
  r->holds_push_lane = true;
  if (IsFinal(r->snap.status)) {
    ReleaseLane(*r, &out);
    ReportFinished(*r, CancelledOutcome(), &out);
    return out;
  }
  worker_busy_ = true;
  // Issue 19: the push counts against the build's timeout (a stalled registry fails it).
  out.push_back(PushPhaseEffect{r->snap.id, r->key, r->snap.commit, r->req.source_dir, r->image_id,
                                r->log, r->cancel,
                                r->started + std::chrono::seconds(opts_.timeout_s)});
  return out;
}

Effects CandidateBuilds::LaneFailed(const BuildId& id, const std::string& why) {
  Effects out;
  Record* r = Find(id);
  if (!r) return out;
  out.push_back(ReleaseLaneEffect{id});  // leave the line: the lane is never handed to us
  if (IsFinal(r->snap.status)) {
    ReportFinished(*r, CancelledOutcome(), &out);
    return out;
  }
  WorkDone d;
  d.id = id;
  d.phase = "push";
  d.status = Status::DeadlineExceeded(why);
  OnPushed(*r, d, &out);
  return out;
}

void CandidateBuilds::OnPushed(Record& r, const WorkDone& d, Effects* out) {
  ReleaseLane(r, out);
  if (IsFinal(r.snap.status)) {
    ReportFinished(r, CancelledOutcome(), out);
    return;
  }
  r.snap.timings.push_ms = d.elapsed_ms;
  r.snap.timings.parts["push_ms"] = d.elapsed_ms;
  // Issue 18: the push's own parts, added to the blob stage's (issue 20) of the same name.
  for (const auto& [part, ms] : d.parts) r.snap.timings.parts[part] += ms;
  const bool ok = d.status.ok();
  const BuildStatus st = ok ? BuildStatus::kSucceeded : FailedOrCancelled(d.status);
  auto o = MakeOutcome(r, st);
  o->build_ms = r.snap.timings.build_ms;
  o->push_ms = d.elapsed_ms;
  if (ok) {
    o->digest = d.digest;
    o->image_ref = d.ref;
    r.log->Append("kiln: pushed " + d.ref + "\n");
  } else {
    std::string error = Describe(r, "push", d, "", &o->error_kind);
    o->error = ToValidUtf8(error);
    if (r.log) r.log->Append("kiln: " + error + "\n");
  }
  if (ok && opts_.save_keys) out->push_back(SaveKeyEffect{r.key, *o});
  ReportFinished(r, o, out);
  Finalize(r, st, o, "", out);
}

ToolResult CandidateBuilds::CancelBuild(const BuildId& id, Effects* out) {
  Record* r = Find(id);
  if (!r) {
    auto b = FromJournal(id);  // issue 19: ended long ago, no longer in memory
    if (b && b->candidate == opts_.candidate) return JournalCancel(*b);
    return {ErrorJson("build '" + id + "' not found"), true};
  }
  const bool was_final = IsFinal(r->snap.status);
  Cancel(*r, "cancelled by request", out);
  nlohmann::json j = {{"build_id", id}, {"status", StatusWireName(r->snap.status)}};
  if (was_final) j["note"] = "build had already finished";
  return {j, false};
}

Effects CandidateBuilds::Shutdown() {
  Effects out;
  for (auto& [id, r] : records_)
    if (!IsFinal(r.snap.status)) Cancel(r, "kiln is shutting down", &out);
  return out;
}

nlohmann::json CandidateBuilds::StatusJson(int64_t position) const {
  const Record* latest = history_.empty() ? nullptr : Find(history_.back());
  const Record* success = latest_success_ ? Find(*latest_success_) : nullptr;
  return CandidateStatusJson(opts_.candidate, latest ? &latest->snap : nullptr,
                             latest ? ResultOf(*latest).structured : nlohmann::json(nullptr),
                             success ? ResultOf(*success).structured : nlohmann::json(nullptr),
                             position);
}

std::optional<ToolResult> CandidateBuilds::Result(const BuildId& id, bool* queued) const {
  const Record* r = Find(id);
  if (!r) {
    auto b = FromJournal(id);  // issue 19: older records are served from the journal
    if (!b || b->candidate != opts_.candidate) return std::nullopt;
    *queued = false;
    return JournalResult(*b, opts_.remote);
  }
  *queued = r->snap.status == BuildStatus::kQueued;
  return ResultOf(*r);
}

ToolResult CandidateBuilds::Lookup(const BuildId& wanted) const {
  BuildId id = wanted;
  if (id.empty()) {
    if (!latest_success_)
      return {ErrorJson("candidate '" + opts_.candidate + "' has no successful build to deploy"),
              true};
    id = *latest_success_;
  }
  const Record* r = Find(id);
  if (!r) {
    if (auto b = FromJournal(id)) return JournalLookup(*b, opts_.candidate, opts_.remote);
    return {ErrorJson("build '" + id + "' not found"), true};
  }
  if (r->snap.status != BuildStatus::kSucceeded || !r->snap.outcome ||
      r->snap.outcome->digest.empty())
    return {ErrorJson("build '" + id + "' is " + StatusWireName(r->snap.status) +
                      "; only a succeeded build can be deployed"),
            true};
  return {DeployableJson(r->snap, r->order), false};
}

ToolResult CandidateBuilds::Log(const BuildId& id, uint64_t offset, uint64_t limit,
                                uint64_t tail) const {
  const Record* r = Find(id);
  if (!r) {
    auto b = FromJournal(id);  // issue 19: the record from the journal; its log is gone
    if (b && b->candidate == opts_.candidate) return JournalLog(*b, offset, limit, tail);
  }
  if (!r || !r->log) return {ErrorJson("build '" + id + "' not found"), true};
  if (tail > 0) {  // issue 16: the last `tail` bytes
    const size_t size = r->log->size();
    offset = size > tail ? size - tail : 0;
    limit = tail;
  }
  auto c = r->log->Read(offset, limit);
  // Issue 16: a failed build's own message is the first line of its log.
  const std::string why = Why(r->snap);
  if (tail == 0 && offset == 0 && IsFinal(r->snap.status) && !why.empty())
    c.text = "kiln: " + why + "\n" + c.text;
  return {LogChunkJson(id, c), false};
}

}  // namespace kiln
