#include "actors/candidate_actor.h"
#include "actors/build_failure.h"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/send.hpp>
#include <caf/response_promise.hpp>

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include "actors/build_metrics.h"
#include "actors/domain_env.h"
#include "actors/journaled_answers.h"
#include "actors/key_store.h"
#include "actors/on_push_policy.h"
#include "actors/protocol.h"
#include "actors/state_writer.h"
#include "common/file_util.h"
#include "state/state_store.h"
#include "actors/tool_views.h"
#include "builder/build_key.h"
#include "builder/log_buffer.h"
#include "common/json_text.h"
#include "builder/registry_client.h"  // issue 19: RegistryDeadlineScope
#include "storage/collector.h"    // issue 19: StorageGate
#include "storage/lease_table.h"  // issue 19
#include "workspace/checkout.h"
#include "workspace/source_tree.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
int64_t Ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

BuildId NewBuildId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[19];
  std::snprintf(buf, sizeof buf, "b-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// Issue 18: one caller waiting on a build (parallel to Record::promises): when it called and
// whether it joined a build already started (by a push or an identical request).
struct Caller {
  Clock::time_point called = Clock::now();
  bool joined = false;
};

struct Record {
  BuildSnapshot snap;
  BuildRequest req;
  std::string key;
  std::string tree;
  std::string source_id;
  std::string image_id;
  std::shared_ptr<LogBuffer> log;
  std::shared_ptr<CancelToken> cancel = std::make_shared<CancelToken>();
  std::vector<caf::response_promise> promises;
  std::vector<Caller> callers;  // issue 18: parallel to promises
  bool push_claimed = false;    // issue 18: a build_candidate joined this push build
  std::vector<caf::actor> sinks;
  Clock::time_point requested = Clock::now();
  // Wall-clock order of the request (unix ns); survives restarts (restored from the journal).
  int64_t order = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  Clock::time_point started;
  bool owner_running = false;  // we hold a scheduler slot for this build
  bool holds_push_lane = false;
  double progress = 0;
  uint64_t pushes_at_request = 0;  // the domain's accepted git pushes when it was requested
};

struct CandidateState {
  std::shared_ptr<const DomainEnv> env;
  std::string name;
  caf::actor scheduler;
  caf::actor domain;
  std::map<BuildId, Record> records;
  std::deque<BuildId> history;  // oldest first
  std::optional<BuildId> active;
  std::optional<BuildId> latest_success;
  std::optional<BuildId> push_build;  // issue 18: the latest build started on push
  bool worker_busy = false;
  std::deque<std::pair<BuildId, std::string>> pending_starts;
  JournaledAnswers answers;  // answers waiting for their journal record
};

using Self = caf::stateful_actor<CandidateState>;

// Runs `write` (a journal write) on the state writer and delivers `result` to `promises` only
// once it has returned (JournaledAnswers). Without a store, delivers at once.
void JournalThenAnswer(Self* self, std::function<void()> write, ToolResult result,
                       std::vector<caf::response_promise> promises) {
  auto& s = self->state;
  s.answers.After(s.env->store ? s.env->writer.get() : nullptr, caf::actor_cast<caf::actor>(self),
                  std::move(write), std::move(result), std::move(promises));
}

ToolResult ResultOf(const Record& r) {
  BuildSnapshot s = r.snap;
  if (r.log) s.log_tail = r.log->Tail(4096);
  return {BuildJson(s), s.status != BuildStatus::kSucceeded && IsFinal(s.status)};
}

// Issue 18: the answer for one caller: its own `joined` and `timings.waited_ms` (call -> now).
ToolResult ForCaller(ToolResult res, const Caller& c) {
  res.structured["joined"] = c.joined;
  res.structured["timings"]["waited_ms"] = Ms(Clock::now() - c.called);
  return res;
}

// Answers every caller waiting on `r` (each with its own view) once `write` (a journal write;
// may be empty without a store) is durable, and forgets them.
void AnswerWaiters(Self* self, std::function<void()> write, Record& r) {
  if (!r.callers.empty() && !r.snap.waited_ms) r.snap.waited_ms = Ms(Clock::now() - r.callers[0].called);
  ToolResult base = ResultOf(r);
  if (r.promises.empty()) {
    if (write) JournalThenAnswer(self, std::move(write), base, {});
    return;
  }
  for (size_t i = 0; i < r.promises.size(); ++i) {
    Caller c = i < r.callers.size() ? r.callers[i] : Caller{r.requested, false};
    std::function<void()> w = i == 0 && write ? std::move(write) : std::function<void()>([] {});
    JournalThenAnswer(self, std::move(w), ForCaller(base, c), {r.promises[i]});
  }
  r.promises.clear();
  r.callers.clear();
}

void Progress(Self* self, Record& r, const std::string& message) {
  r.progress += 1;
  for (auto& sink : r.sinks)
    self->send(sink, progress_atom::value, ToolProgress{r.progress, std::nullopt, message});
}

void LogTransition(Self* self, const Record& r) {
  const BuildStatus st = r.snap.status;
  if (IsFinal(st) && st != BuildStatus::kSucceeded) {
    // Why, for the operator: the first line of the reason (never a credential: errors are
    // built from kiln's own messages and the build's output, which holds none).
    std::string why = r.snap.error.empty() && r.snap.outcome ? r.snap.outcome->error : r.snap.error;
    why = why.substr(0, why.find('\n'));
    if (why.size() > 300) why = why.substr(0, 300) + "...";
    spdlog::warn("build {} domain={} candidate={} -> {}{}{}", r.snap.id, self->state.env->domain,
                 self->state.name, PhaseName(st), why.empty() ? "" : ": ", why);
    return;
  }
  spdlog::info("build {} domain={} candidate={} -> {}{}", r.snap.id, self->state.env->domain,
               self->state.name, PhaseName(st),
               r.snap.cache_hit ? " (cache hit)" : (r.snap.deduplicated ? " (deduplicated)" : ""));
}

void SendSummary(Self* self);

void SetStatus(Self* self, Record& r, BuildStatus st, const std::string& progress_msg = "") {
  r.snap.status = st;
  LogTransition(self, r);
  if (!progress_msg.empty()) Progress(self, r, progress_msg);
  SendSummary(self);  // list_candidates shows every transition
}

void SendSummary(Self* self) {
  auto& s = self->state;
  nlohmann::json j;
  j["candidate"] = s.name;
  const Record* latest = s.history.empty() ? nullptr : &s.records.at(s.history.back());
  j["state"] = latest ? PhaseName(latest->snap.status) : "idle";
  j["latest_build"] = latest ? nlohmann::json{{"build_id", latest->snap.id},
                                             {"status", StatusWireName(latest->snap.status)},
                                             {"commit", latest->snap.commit}}
                             : nlohmann::json(nullptr);
  if (s.latest_success && s.records.count(*s.latest_success)) {
    const auto& r = s.records.at(*s.latest_success);
    j["latest_successful_build"] = {{"build_id", r.snap.id},
                                    {"commit", r.snap.commit},
                                    {"image", r.snap.outcome ? r.snap.outcome->image_ref : ""},
                                    {"digest", r.snap.outcome ? r.snap.outcome->digest : ""},
                                    {"order", r.order}};
  } else {
    j["latest_successful_build"] = nullptr;
  }
  self->send(s.domain, summary_atom::value, CandidateSummary{s.name, j});
}

void TrimHistory(Self* self) {
  auto& s = self->state;
  while (s.history.size() > s.env->history_per_candidate) {
    const BuildId& id = s.history.front();
    auto it = s.records.find(id);
    if (it != s.records.end() && !IsFinal(it->second.snap.status)) break;
    if (s.latest_success && *s.latest_success == id) break;
    s.records.erase(id);
    s.history.pop_front();
  }
  // Issue 19: only the newest builds keep their whole log in memory; older finished ones keep
  // the tail (build_log of an older build starts at its first kept byte).
  constexpr size_t kFullLogs = 4;
  constexpr size_t kOldLogTail = 64 << 10;
  size_t seen = 0;
  for (auto h = s.history.rbegin(); h != s.history.rend(); ++h) {
    if (++seen <= kFullLogs) continue;
    auto it = s.records.find(*h);
    if (it == s.records.end() || !IsFinal(it->second.snap.status) || !it->second.log) continue;
    if (it->second.log->held_bytes() > kOldLogTail) it->second.log->Shrink(kOldLogTail);
  }
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

// Moves `r` to a final state and answers everyone waiting on it.
void Finalize(Self* self, Record& r, BuildStatus st, OutcomePtr outcome, const std::string& error) {
  if (IsFinal(r.snap.status)) return;
  auto& s = self->state;
  r.cancel = SpentToken();  // workers still running hold their own reference
  r.snap.outcome = outcome;
  if (!error.empty()) r.snap.error = error;
  r.snap.timings.total_ms = Ms(Clock::now() - r.requested);
  if (outcome && !r.snap.cache_hit) {
    r.snap.timings.build_ms = outcome->build_ms;
    r.snap.timings.push_ms = outcome->push_ms;
  }
  if (st == BuildStatus::kSucceeded) s.latest_success = r.snap.id;
  if (s.env->busy) s.env->busy->Remove(s.env->domain, r.snap.id);
  if (s.env->storage_leases) s.env->storage_leases->Drop(s.env->domain, s.name, r.snap.id);  // issue 19
  if (s.active && *s.active == r.snap.id) s.active.reset();
  SetStatus(self, r, st);  // also sends the candidate's summary
  if (r.log) {
    if (!r.snap.error.empty()) r.log->Append("kiln: " + r.snap.error + "\n");
    r.log->Close();
  }
  if (s.env->metrics)
    s.env->metrics->BuildFinished(s.env->domain, s.env->dc->build.mode, StatusWireName(st),
                                  r.snap.timings.build_ms / 1000.0, r.snap.timings.push_ms / 1000.0,
                                  r.snap.cache_hit);
  if (s.env->store) {
    BuildFinish f;
    f.id = r.snap.id;
    f.status = st;
    if (outcome) {
      f.image_ref = st == BuildStatus::kSucceeded ? outcome->image_ref : "";
      f.digest = st == BuildStatus::kSucceeded ? outcome->digest : "";
      f.diagnostics = outcome->diagnostics;
    }
    f.timings = r.snap.timings;
    f.error = r.snap.error.empty() && outcome ? outcome->error : r.snap.error;
    f.error_kind = r.snap.error.empty() && outcome ? outcome->error_kind : r.snap.error_kind;
    f.cache_hit = r.snap.cache_hit;
    f.commit = r.snap.commit;
    f.build_key = r.key;
    auto store = s.env->store;
    // When the start could not be recorded (a full disk then), the end brings it along, so a
    // build that succeeded once space was back is not lost.
    BuildRecord start;
    start.id = r.snap.id;
    start.domain = s.env->domain;
    start.candidate = s.name;
    start.status = BuildStatus::kResolving;
    AnswerWaiters(  // issue 18: each caller with its own joined / waited_ms
        self,
        [store, f, start]() mutable {
          Status st = store->RecordBuildFinished(f);
          if (st.code() == Status::Code::kNotFound && store->RecordBuildStarted(&start).ok())
            st = store->RecordBuildFinished(f);
          if (!st.ok())
            spdlog::error("state journal: cannot record the end of build {}: {}", f.id, st.message());
        },
        r);
  } else {
    AnswerWaiters(self, {}, r);
  }
  r.promises.clear();
  r.sinks.clear();
  TrimHistory(self);
}

// Restores the candidate's recent builds from the journal (after a restart): final records
// with their outcome; their logs are not kept across restarts.
void Restore(Self* self) {
  auto& s = self->state;
  if (!s.env->store) return;
  auto builds = s.env->store->Builds(s.env->domain, s.name, s.env->history_per_candidate);
  for (auto it = builds.rbegin(); it != builds.rend(); ++it) {  // oldest first
    const BuildRecord& b = *it;
    if (s.records.count(b.id)) continue;
    Record& r = s.records[b.id];
    r.snap.id = b.id;
    r.snap.candidate = s.name;
    r.snap.remote = GitRemoteUrl(s.env->config->server, s.env->domain);
    r.snap.commit = b.commit;
    r.snap.status = b.status;
    r.snap.cache_hit = b.cache_hit;
    r.snap.timings = b.timings;
    r.snap.error = b.error;
    r.snap.error_kind = b.error_kind;
    auto o = std::make_shared<BuildOutcome>();
    o->status = b.status;
    o->image_ref = b.image_ref;
    o->digest = b.digest;
    o->diagnostics = b.diagnostics;
    o->error = b.error;
    o->error_kind = b.error_kind;
    o->built_by = b.id;
    o->commit = b.commit;
    r.snap.outcome = o;
    r.order = b.started_at_ms * 1000000;
    r.log = std::make_shared<LogBuffer>(4096);
    r.log->Append("kiln: the log of this build was not kept across a restart of kiln\n");
    r.log->Close();
    s.history.push_back(b.id);
    if (b.status == BuildStatus::kSucceeded && !b.digest.empty()) s.latest_success = b.id;
  }
  if (!builds.empty()) SendSummary(self);
}

std::shared_ptr<BuildOutcome> MakeOutcome(const Record& r, BuildStatus st) {
  auto o = std::make_shared<BuildOutcome>();
  o->status = st;
  o->built_by = r.snap.id;
  o->commit = r.snap.commit;
  if (r.log) o->log_tail = r.log->Tail(4096);
  return o;
}

// Tells the scheduler that our execution of `r` ended (frees the slot).
void ReportFinished(Self* self, Record& r, OutcomePtr outcome) {
  if (!r.owner_running) return;
  r.owner_running = false;
  self->send(self->state.scheduler, finished_atom::value, r.key, r.snap.id, std::move(outcome));
}

void ReleaseLane(Self* self, Record& r) {
  if (!r.holds_push_lane) return;
  r.holds_push_lane = false;
  self->send(self->state.scheduler, release_atom::value, self->state.env->dc->image.registry, r.snap.id);
}

// Issue 19: how a registry wait cut by the build's deadline is worded.
std::string BuildDeadlineWords(const DomainEnv& env) {
  return "the build's timeout (build.timeout_s = " + std::to_string(env.dc->build.timeout_s) +
         " s)";
}

BuildJob MakeJob(const DomainEnv& env, const std::string& candidate, const Record& r) {
  BuildJob job;
  job.build_id = r.snap.id;
  job.domain = env.domain;
  job.candidate = candidate;
  job.source_dir = r.req.source_dir ? *r.req.source_dir : env.CandidateDir(candidate) + "/src";
  job.storage_dir = env.CandidateDir(candidate) + "/storage";
  job.cache_dir = env.CacheDir();
  job.home_dir = env.home_dir;
  job.build = env.dc->build;
  job.registry = *env.registry;
  job.repository = env.dc->image.repository;
  job.tag = candidate;
  job.key = r.key;
  job.commit = r.snap.commit;
  return job;
}

void StartPending(Self* self);

OutcomePtr CancelledOutcome() {
  auto o = std::make_shared<BuildOutcome>();
  o->status = BuildStatus::kCancelled;
  return o;
}

void Execute(Self* self, const BuildId& id) {
  auto& s = self->state;
  auto& r = s.records.at(id);
  r.owner_running = true;
  r.started = Clock::now();
  r.snap.timings.queued_ms = Ms(r.started - r.requested);
  SetStatus(self, r, BuildStatus::kRunning, "building");
  s.worker_busy = true;
  auto env = s.env;
  BuildJob job = MakeJob(*env, s.name, r);
  auto log = r.log;
  auto cancel = r.cancel;
  bool from_git = !r.req.source_dir.has_value();
  std::string commit = r.snap.commit;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  // Issue 19: the candidate's storage and workspace are leased until the build is final.
  if (env->storage_leases) env->storage_leases->Hold(env->domain, s.name, job.build_id);
  // Issue 19: registry waits (layered base layers) count against the build's timeout.
  const auto deadline = r.started + std::chrono::seconds(env->dc->build.timeout_s);
  env->work->Run([env, job, log, cancel, from_git, commit, me, deadline] {
    RegistryDeadlineScope registry_deadline(deadline, BuildDeadlineWords(*env));
    GitDeadlineScope git_deadline(deadline, BuildDeadlineWords(*env));  // the checkout's git
    WorkDone d;
    d.id = job.build_id;
    d.phase = "build";
    auto t0 = Clock::now();
    // Issue 19: waits while the collector deletes this candidate's things; a domain that stays
    // over its storage budget does not build (infrastructure, naming the budget).
    StorageLeaseTable::Use storage_use;
    if (env->storage_leases) storage_use = env->storage_leases->Acquire(env->domain, job.candidate);
    if (env->storage_gate) {
      std::string refusal = env->storage_gate->Refusal(env->domain);
      if (!refusal.empty()) {
        d.status = Status::ResourceExhausted(refusal);
        caf::anon_send(me, d);
        return;
      }
    }
    if (from_git) {
      CheckoutStats cs;
      // Shared lock on the domain's repo.lock: repository upkeep (git gc, run by the git
      // endpoint under the exclusive lock) never runs during a checkout.
      Status st;
      {
        FileLock shared(env->domain_dir + "/repo.lock", LOCK_SH);
        st = Checkout::Update(*env->repo, commit, job.source_dir, &cs);
      }
      d.parts["checkout_ms"] = Ms(Clock::now() - t0);
      if (!st.ok()) {
        d.phase = "checkout";
        // A tree over the domain's push limits (workspace/tree_limits.h) is the agent's to fix;
        // anything else (a full disk included) is kiln's.
        const bool limit = st.code() == Status::Code::kResourceExhausted &&
                           st.message().find("no space left") == std::string::npos;
        d.compile_failed = limit;
        if (limit) d.failure_kind = "tree_too_large";
        d.status = limit ? Status::ResourceExhausted("checkout of " + commit.substr(0, 12) + " refused: " + st.message())
                         : Status::Internal("checkout of " + commit.substr(0, 12) + " failed: " + st.message());
        caf::anon_send(me, d);
        return;
      }
      log->Append("kiln: checked out " + commit.substr(0, 12) + " (" +
                  std::to_string(cs.files_written) + " files written, " +
                  std::to_string(cs.elapsed_ms) + " ms)\n");
    }
    if (cancel->cancelled()) {
      d.status = Status::Cancelled("build cancelled");
      caf::anon_send(me, d);
      return;
    }
    BuildResult br = env->builder->Build(job, [&](std::string_view chunk) { log->Append(chunk); }, cancel.get());
    d.status = br.status;
    d.compile_failed = br.compile_failed;
    d.failure_kind = br.failure_kind;
    d.image_id = br.image_id;
    d.diagnostics = std::move(br.diagnostics);
    d.elapsed_ms = Ms(Clock::now() - t0);
    for (const auto& [part, ms] : br.timings) d.parts[part] = ms;
    caf::anon_send(me, d);
  });
}

void StartPending(Self* self) {
  auto& s = self->state;
  while (!s.worker_busy && !s.pending_starts.empty()) {
    auto [id, key] = s.pending_starts.front();
    s.pending_starts.pop_front();
    auto it = s.records.find(id);
    if (it == s.records.end() || IsFinal(it->second.snap.status)) {
      // Cancelled while waiting for the workspace: give the slot back.
      OutcomePtr o = CancelledOutcome();
      self->send(s.scheduler, finished_atom::value, key, id, o);
      continue;
    }
    Execute(self, id);
  }
}

// The agent-facing wording of a failed step (actors/build_failure.h); host paths hidden.
FailureView Describe(Self* self, const std::string& stage, const WorkDone& d, const std::string& log_tail = "") {
  const auto& env = *self->state.env;
  FailureFacts f;
  f.stage = stage;
  f.status = d.status;
  f.agent_fault = d.compile_failed;
  f.hint = d.failure_kind;
  f.diagnostics = d.diagnostics;
  f.candidate = self->state.name;
  f.hidden = {env.config->server.state_dir, env.domain_dir, env.home_dir};
  f.log_tail = log_tail;
  f.remote = GitRemoteUrl(env.config->server, env.domain);
  return DescribeFailure(f);
}

void Cancel(Self* self, Record& r, const std::string& why) {
  if (IsFinal(r.snap.status)) return;
  r.cancel->Cancel();
  self->send(self->state.scheduler, cancel_atom::value, r.snap.id);
  r.snap.error_kind = why.rfind("superseded", 0) == 0 ? "superseded" : "cancelled";
  Finalize(self, r, BuildStatus::kCancelled, nullptr, why);
}

void OnResolved(Self* self, Record& r, const WorkDone& d) {
  auto& s = self->state;
  if (!d.status.ok()) {
    FailureView v = Describe(self, "resolve", d);
    r.snap.error_kind = v.error_kind;
    if (v.error_kind == "infrastructure") spdlog::warn("build {}: {}", r.snap.id, d.status.message());
    Finalize(self, r, BuildStatus::kFailed, nullptr, v.error);
    return;
  }
  r.snap.commit = d.commit;
  r.tree = d.tree;
  r.source_id = d.source_id;
  r.key = ComputeBuildKey(s.env->domain, d.source_id, *s.env->dc, *s.env->registry, {});
  r.log->Append("kiln: build " + r.snap.id + " of " +
                (d.commit.empty() ? std::string("source directory") : "commit " + d.commit) +
                ", key " + r.key.substr(0, 16) + "\n");
  SetStatus(self, r, BuildStatus::kQueued);
  BuildId id = r.snap.id;
  self->request(s.scheduler, caf::infinite, submit_atom::value,
                JobRequest{id, s.env->domain, s.name, r.key}, caf::actor_cast<caf::actor>(self))
      .then([=](const SubmitReply& rep) {
        auto it = self->state.records.find(id);
        if (it == self->state.records.end() || IsFinal(it->second.snap.status)) return;
        Record& rr = it->second;
        switch (rep.kind) {
          case SchedulerCore::SubmitKind::kCacheHit:
            rr.snap.cache_hit = true;
            rr.snap.timings = {};
            if (rep.cached) rr.log->Append("kiln: identical build " + rep.cached->built_by +
                                           " already produced " + rep.cached->image_ref + "\n");
            Finalize(self, rr, BuildStatus::kSucceeded, rep.cached, "");
            break;
          case SchedulerCore::SubmitKind::kJoined:
            rr.snap.deduplicated = true;
            rr.log->Append("kiln: identical build " + rep.owner + " is in progress; sharing it\n");
            Progress(self, rr, "waiting for identical build " + rep.owner);
            break;
          default:
            if (rr.snap.status != BuildStatus::kQueued) break;  // already started
            if (rep.position >= 0) rr.snap.queue_position = rep.position;
            Progress(self, rr, "queued" + (rep.position >= 0 ? " (position " +
                                                                   std::to_string(rep.position) + ")"
                                                             : std::string()));
            break;
        }
      });
}

void OnBuilt(Self* self, Record& r, const WorkDone& d) {
  auto& s = self->state;
  if (IsFinal(r.snap.status)) {  // cancelled/superseded while building
    ReportFinished(self, r, CancelledOutcome());
    return;
  }
  r.snap.timings.parts = d.parts;
  if (!d.status.ok()) {
    BuildStatus st = d.status.code() == Status::Code::kCancelled ? BuildStatus::kCancelled : BuildStatus::kFailed;
    auto o = MakeOutcome(r, st);
    o->diagnostics = d.diagnostics;
    FailureView v = Describe(self, d.phase, d, r.log ? r.log->Tail(4096) : std::string());
    if (v.error_kind == "infrastructure") spdlog::warn("build {}: {}", r.snap.id, d.status.message());
    o->error = ToValidUtf8(v.error);
    o->error_kind = v.error_kind;
    // The builder's own words are the last line of the log, where the agent looks first.
    if (r.log) r.log->Append("kiln: " + v.error + "\n");
    o->build_ms = d.elapsed_ms;
    ReportFinished(self, r, o);
    Finalize(self, r, st, o, "");
    return;
  }
  r.image_id = d.image_id;
  r.snap.timings.build_ms = d.elapsed_ms;
  SetStatus(self, r, BuildStatus::kPushing, "pushing");
  BuildId id = r.snap.id;
  int64_t build_ms = d.elapsed_ms;
  self->request(s.scheduler, caf::infinite, push_atom::value, s.env->dc->image.registry, id)
      .then([=](granted_atom) {
        auto it = self->state.records.find(id);
        if (it == self->state.records.end()) return;
        Record& rr = it->second;
        rr.holds_push_lane = true;
        if (IsFinal(rr.snap.status)) {
          ReleaseLane(self, rr);
          ReportFinished(self, rr, CancelledOutcome());
          return;
        }
        self->state.worker_busy = true;
        auto env = self->state.env;
        BuildJob job = MakeJob(*env, self->state.name, rr);
        BuildResult built;
        built.image_id = rr.image_id;
        auto log = rr.log;
        auto cancel = rr.cancel;
        caf::actor me = caf::actor_cast<caf::actor>(self);
        // Issue 19: the push counts against the build's timeout (a stalled registry fails it).
        const auto deadline = rr.started + std::chrono::seconds(env->dc->build.timeout_s);
        env->work->Run([env, job, built, log, cancel, me, build_ms, deadline] {
          RegistryDeadlineScope registry_deadline(deadline, BuildDeadlineWords(*env));
          StorageLeaseTable::Use storage_use;  // issue 19: the image is in the storage
          if (env->storage_leases)
            storage_use = env->storage_leases->Acquire(env->domain, job.candidate);
          PushResult pr = env->builder->Push(job, built, [&](std::string_view c) { log->Append(c); }, cancel.get());
          WorkDone d;
          d.id = job.build_id;
          d.phase = "push";
          d.status = pr.status;
          d.digest = pr.digest;
          d.ref = pr.ref;
          d.elapsed_ms = pr.elapsed_ms;
          caf::anon_send(me, d);
        });
      });
}

void OnPushed(Self* self, Record& r, const WorkDone& d) {
  ReleaseLane(self, r);
  if (IsFinal(r.snap.status)) {
    ReportFinished(self, r, CancelledOutcome());
    return;
  }
  r.snap.timings.push_ms = d.elapsed_ms;
  r.snap.timings.parts["push_ms"] = d.elapsed_ms;
  bool ok = d.status.ok();
  BuildStatus st = ok ? BuildStatus::kSucceeded
                      : (d.status.code() == Status::Code::kCancelled ? BuildStatus::kCancelled
                                                                      : BuildStatus::kFailed);
  auto o = MakeOutcome(r, st);
  o->build_ms = r.snap.timings.build_ms;
  o->push_ms = d.elapsed_ms;
  if (ok) {
    o->digest = d.digest;
    o->image_ref = d.ref;
    r.log->Append("kiln: pushed " + d.ref + "\n");
  } else {
    FailureView v = Describe(self, "push", d);
    if (v.error_kind == "infrastructure") spdlog::warn("build {}: {}", r.snap.id, d.status.message());
    o->error = ToValidUtf8(v.error);
    o->error_kind = v.error_kind;
    if (r.log) r.log->Append("kiln: " + v.error + "\n");
  }
  if (ok && self->state.env->keys) {
    auto keys = self->state.env->keys;
    std::string key = r.key;
    BuildOutcome copy = *o;
    self->state.env->work->Run([keys, key, copy] {
      Status st = keys->Save(key, copy);
      if (!st.ok()) spdlog::warn("build-key cache: {}", st.message());
    });
  }
  ReportFinished(self, r, o);
  Finalize(self, r, st, o, "");
}

void StartResolve(Self* self, Record& r) {
  auto env = self->state.env;
  BuildRequest req = r.req;
  std::string candidate = self->state.name;
  BuildId id = r.snap.id;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  env->work->Run([env, req, candidate, id, me] {
    WorkDone d;
    d.id = id;
    d.phase = "resolve";
    if (req.source_dir) {
      std::string hex;
      d.status = SourceTree::HashDirectory(*req.source_dir, &hex);
      d.source_id = "dir:" + hex;
    } else if (!env->repo) {
      d.status = Status::FailedPrecondition("domain has no repository");
    } else {
      ResolvedSource rs;
      d.status = env->repo->Resolve(req.ref, req.commit, candidate, &rs);
      d.commit = rs.commit;
      d.tree = rs.tree;
      d.source_id = "git-tree:" + rs.tree;
    }
    caf::anon_send(me, d);
  });
}

nlohmann::json StatusJson(Self* self, int64_t position) {
  auto& s = self->state;
  nlohmann::json j;
  j["candidate"] = s.name;
  const Record* latest = s.history.empty() ? nullptr : &s.records.at(s.history.back());
  j["state"] = latest ? PhaseName(latest->snap.status) : "idle";
  j["latest_build"] = latest ? ResultOf(*latest).structured : nlohmann::json(nullptr);
  if (s.latest_success && s.records.count(*s.latest_success))
    j["latest_successful_build"] = ResultOf(s.records.at(*s.latest_success)).structured;
  else
    j["latest_successful_build"] = nullptr;
  j["deployed_build"] = nullptr;
  j["queue_position"] = position >= 0 ? nlohmann::json(position) : nlohmann::json(nullptr);
  return j;
}

caf::behavior CandidateBehavior(Self* self, std::shared_ptr<const DomainEnv> env, std::string name,
                                caf::actor scheduler, caf::actor domain) {
  self->attach_functor([](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown && reason != caf::exit_reason::unreachable)
      spdlog::warn("candidate actor exited: {}", caf::to_string(reason));
  });
  self->set_default_handler(caf::drop);
  self->set_error_handler([](caf::scheduled_actor*, caf::error& err) {
    spdlog::warn("candidate actor: unhandled error {}", caf::to_string(err));
  });
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      spdlog::error("candidate actor failed: {}", e.what());
    }
    return caf::make_error(caf::sec::runtime_error);
  });
  auto& s = self->state;
  s.env = std::move(env);
  s.name = std::move(name);
  s.scheduler = std::move(scheduler);
  s.domain = std::move(domain);
  Restore(self);
  return {
      [=](build_atom, BuildRequest& req, caf::actor& sink) -> caf::result<ToolResult> {
        auto& s = self->state;
        const Caller caller;  // issue 18: this call's time (timings.waited_ms)
        if (s.push_build && !req.on_push) {
          // Issue 18: the build this push started answers a build_candidate for its commit (or
          // for the branch's head, which it is): same build id, joined.
          auto it = s.records.find(*s.push_build);
          if (it != s.records.end()) {
            Record& pb = it->second;
            PushBuildFacts f;
            f.candidate = s.name;
            f.pushed_commit = pb.req.commit.value_or("");
            f.status = pb.snap.status;
            f.latest = !s.history.empty() && s.history.back() == pb.snap.id;
            f.claimed = pb.push_claimed;
            if (JoinsPushBuild(f, req)) {
              pb.push_claimed = true;
              spdlog::info("build {} domain={} candidate={}: build_candidate joined the build started on push",
                           pb.snap.id, s.env->domain, s.name);
              const Caller joiner{caller.called, true};
              if (sink) self->send(sink, started_atom::value, pb.snap.id);
              if (req.wait && !IsFinal(pb.snap.status)) {
                if (sink) pb.sinks.push_back(sink);
                pb.promises.push_back(self->make_response_promise());
                pb.callers.push_back(joiner);
                return pb.promises.back();
              }
              if (!pb.snap.waited_ms) pb.snap.waited_ms = Ms(Clock::now() - caller.called);
              auto rp = self->make_response_promise();  // after its journal records
              JournalThenAnswer(self, [] {}, ForCaller(ResultOf(pb), joiner), {rp});
              return rp;
            }
          }
        }
        const uint64_t pushes = s.env->busy ? s.env->busy->Pushes(s.env->domain) : 0;
        if (s.active && s.env->busy && !req.source_dir) {
          // The same request again (a retry, or parallel calls) while no push reached the
          // domain since the running build was requested: it would build the same commit,
          // so it joins that build instead of superseding it.
          auto it = s.records.find(*s.active);
          if (it != s.records.end() && !IsFinal(it->second.snap.status) &&
              !it->second.req.source_dir && it->second.req.ref == req.ref &&
              it->second.req.commit == req.commit && it->second.pushes_at_request == pushes) {
            Record& r0 = it->second;
            spdlog::info("build {} domain={} candidate={}: an identical request joined it",
                         r0.snap.id, s.env->domain, s.name);
            if (sink) {
              r0.sinks.push_back(sink);
              self->send(sink, started_atom::value, r0.snap.id);
            }
            if (req.wait) {
              r0.promises.push_back(self->make_response_promise());
              r0.callers.push_back({caller.called, true});  // issue 18
              return r0.promises.back();
            }
            // After the build's start record (the writer runs in order).
            auto rp = self->make_response_promise();
            JournalThenAnswer(self, [] {}, ForCaller(ResultOf(r0), {caller.called, true}), {rp});
            return rp;
          }
        }
        BuildId id = NewBuildId();
        while (s.records.count(id)) id = NewBuildId();
        if (s.active) {
          auto it = s.records.find(*s.active);
          if (it != s.records.end())
            Cancel(self, it->second, "superseded by build " + id + " (a newer build request for this candidate)");
        }
        Record& r = s.records[id];
        r.snap.id = id;
        r.snap.candidate = s.name;
        r.snap.remote = GitRemoteUrl(s.env->config->server, s.env->domain);
        r.req = req;
        r.pushes_at_request = pushes;
        r.snap.started_on_push = req.on_push;  // issue 18
        if (req.on_push) s.push_build = id;
        r.log = std::make_shared<LogBuffer>(s.env->log_max_bytes);
        if (sink) {
          r.sinks.push_back(sink);
          self->send(sink, started_atom::value, id);
        }
        s.history.push_back(id);
        s.active = id;
        std::function<void()> journal_start;
        if (s.env->store) {
          BuildRecord b;
          b.id = id;
          b.domain = s.env->domain;
          b.candidate = s.name;
          b.status = BuildStatus::kResolving;
          auto store = s.env->store;
          journal_start = [store, b]() mutable {
            Status st = store->RecordBuildStarted(&b);
            if (!st.ok()) spdlog::error("state journal: cannot record build {}: {}", b.id, st.message());
          };
        }
        if (s.env->busy && !req.source_dir && !req.commit) {
          std::string branch = req.ref ? *req.ref : s.name;
          if (branch.rfind("refs/heads/", 0) == 0) branch = branch.substr(11);
          s.env->busy->Add(s.env->domain, branch, id);
        }
        SetStatus(self, r, BuildStatus::kResolving, "resolving source");
        if (!req.wait && journal_start) {
          // The build id is handed out only once its start is durable: after a crash the
          // caller's id is known (as interrupted at worst), never missing.
          auto rp = self->make_response_promise();
          JournalThenAnswer(self, std::move(journal_start), ForCaller(ResultOf(r), caller), {rp});
          StartResolve(self, r);
          return rp;
        }
        if (journal_start) s.env->writer->Post(std::move(journal_start));
        StartResolve(self, r);
        if (!req.wait) return ForCaller(ResultOf(r), caller);
        r.promises.push_back(self->make_response_promise());
        r.callers.push_back(caller);  // issue 18
        return r.promises.back();
      },
      [=](const WorkDone& d) {
        auto& s = self->state;
        spdlog::debug("candidate {}: work {} done for {}: {}", s.name, d.phase, d.id, d.status.ToString());
        if (d.phase != "resolve") s.worker_busy = false;
        auto it = s.records.find(d.id);
        if (it != s.records.end()) {
          if (d.phase == "resolve") {
            if (!IsFinal(it->second.snap.status)) OnResolved(self, it->second, d);
          } else if (d.phase == "build" || d.phase == "checkout") {
            OnBuilt(self, it->second, d);
          } else {
            OnPushed(self, it->second, d);
          }
        }
        StartPending(self);
      },
      [=](start_atom, const BuildId& id, const std::string& key) {
        auto& s = self->state;
        spdlog::debug("candidate {}: start {} (worker busy: {})", s.name, id, s.worker_busy);
        s.pending_starts.emplace_back(id, key);
        StartPending(self);
      },
      [=](waited_atom, const BuildId& id, const OutcomePtr& outcome) {
        auto it = self->state.records.find(id);
        if (it == self->state.records.end()) return;
        Record& r = it->second;
        BuildStatus st = outcome ? outcome->status : BuildStatus::kFailed;
        if (outcome) r.snap.commit = r.snap.commit.empty() ? outcome->commit : r.snap.commit;
        Finalize(self, r, st, outcome, "");
      },
      [=](journaled_atom, uint64_t ticket) { self->state.answers.Release(ticket); },
      [=](status_atom) -> caf::result<ToolResult> {
        auto& s = self->state;
        if (!s.active) return ToolResult{StatusJson(self, -1), false};
        auto rp = self->make_response_promise();
        self->request(s.scheduler, std::chrono::seconds(5), position_atom::value, *s.active)
            .then([=](int64_t pos) mutable { rp.deliver(ToolResult{StatusJson(self, pos), false}); },
                  [=](caf::error&) mutable { rp.deliver(ToolResult{StatusJson(self, -1), false}); });
        return rp;
      },
      // Issue 17 (MCP tasks/get): (status_atom, BuildId) -> ToolResult: that build's result, as
      // build_candidate renders it (with its queue position while queued).
      [=](status_atom, const BuildId& id) -> caf::result<ToolResult> {
        auto& s = self->state;
        auto it = s.records.find(id);
        if (it == s.records.end()) return ToolResult{ErrorJson("build '" + id + "' not found"), true};
        ToolResult r = ResultOf(it->second);
        if (it->second.snap.status != BuildStatus::kQueued) return r;
        auto rp = self->make_response_promise();
        self->request(s.scheduler, std::chrono::seconds(5), position_atom::value, id)
            .then(
                [=](int64_t pos) mutable {
                  ToolResult out = r;
                  if (pos >= 0) out.structured["queue_position"] = pos;
                  rp.deliver(out);
                },
                [=](caf::error&) mutable { rp.deliver(r); });
        return rp;
      },
      [=](lookup_atom, const BuildId& wanted) -> ToolResult {
        auto& s = self->state;
        BuildId id = wanted;
        if (id.empty()) {
          if (!s.latest_success)
            return {ErrorJson("candidate '" + s.name + "' has no successful build to deploy"), true};
          id = *s.latest_success;
        }
        auto it = s.records.find(id);
        if (it == s.records.end()) return {ErrorJson("build '" + id + "' not found"), true};
        const Record& r = it->second;
        if (r.snap.status != BuildStatus::kSucceeded || !r.snap.outcome || r.snap.outcome->digest.empty())
          return {ErrorJson("build '" + id + "' is " + StatusWireName(r.snap.status) +
                            "; only a succeeded build can be deployed"),
                  true};
        int64_t order = r.order;
        return {{{"build_id", id},
                 {"candidate", s.name},
                 {"commit", r.snap.commit},
                 {"image", r.snap.outcome->image_ref},
                 {"digest", r.snap.outcome->digest},
                 {"order", order}},
                false};
      },
      [=](log_atom, const BuildId& id, uint64_t offset, uint64_t limit, uint64_t tail) -> ToolResult {
        auto it = self->state.records.find(id);
        if (it == self->state.records.end() || !it->second.log)
          return {ErrorJson("build '" + id + "' not found"), true};
        const Record& r = it->second;
        if (tail > 0) {  // issue 16: the last `tail` bytes
          const size_t size = r.log->size();
          offset = size > tail ? size - tail : 0;
          limit = tail;
        }
        auto c = r.log->Read(offset, limit);
        // Issue 16: a failed build's own message is the first line of its log.
        const std::string why = r.snap.error.empty() && r.snap.outcome ? r.snap.outcome->error : r.snap.error;
        if (tail == 0 && offset == 0 && IsFinal(r.snap.status) && !why.empty())
          c.text = "kiln: " + why + "\n" + c.text;
        return {{{"build_id", id},
                 {"text", c.text},
                 {"offset", c.offset},
                 {"next_offset", c.next_offset},
                 {"complete", c.complete},
                 {"dropped_bytes", c.dropped}},
                false};
      },
      [=](cancel_atom, const BuildId& id) -> ToolResult {
        auto it = self->state.records.find(id);
        if (it == self->state.records.end()) return {ErrorJson("build '" + id + "' not found"), true};
        Record& r = it->second;
        bool was_final = IsFinal(r.snap.status);
        Cancel(self, r, "cancelled by request");
        nlohmann::json j = {{"build_id", id}, {"status", StatusWireName(r.snap.status)}};
        if (was_final) j["note"] = "build had already finished";
        return {j, false};
      },
      [=](shutdown_atom) {
        for (auto& [id, r] : self->state.records)
          if (!IsFinal(r.snap.status)) Cancel(self, r, "kiln is shutting down");
      },
  };
}

}  // namespace

caf::actor SpawnCandidate(caf::actor_system& sys, std::shared_ptr<const DomainEnv> env,
                          std::string candidate, caf::actor scheduler, caf::actor domain) {
  // No file system work here (this runs inside the domain actor): the checkout and the builder
  // create the candidate's directories on their worker threads.
  return sys.spawn(CandidateBehavior, std::move(env), std::move(candidate), std::move(scheduler),
                   std::move(domain));
}

}  // namespace kiln
