#include "pool/pool_builder.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <caf/after.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_util.h"
#include "config/config_parser.h"
#include "pool/build_wire.h"
#include "pool/tls_probe.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// One JSON line appended and synced (a lost worker's build is on disk before it is retried).
void AppendJournal(const std::string& file, const nlohmann::json& record) {
  if (file.empty()) return;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::warn("pool: cannot open the pool journal {}", file);
    return;
  }
  std::string line = record.dump() + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()) || ::fsync(fd) != 0)
    spdlog::warn("pool: cannot write the pool journal {}", file);
  ::close(fd);
}

// What one attempt on one worker came to.
struct Attempt {
  bool answered = false;
  bool lost = false;  // the worker's actor went down before answering
  RemoteBuildAnswer answer;
  Status error;  // neither answered nor lost: timeout, cancel, transport error
};

}  // namespace

struct PoolBuilder::Conn {
  std::string host;
  uint16_t port = 0;
  remote_builder_actor handle;  // null until connected
  // The handle (proxy) that last went down. CAF's middleman caches one proxy per host:port and
  // drops it only when its own down message is handled, so a reconnect right after a loss can
  // be handed the dead proxy again (a request to it only times out). Compared by identity: a
  // live worker's new proxy has the same actor address as its dead one.
  remote_builder_actor dead;
  Clock::time_point retry_at{};
  bool listed_ready = true;  // discovery: the endpoint's ready condition (static: always)
  std::string last_error;    // why the last connect failed ("" : connected or not tried)
};

struct PoolBuilder::Impl {
  explicit Impl(PoolBuilderOptions o)
      : opts(std::move(o)),
        cfg(opts.tls),
        sys((cfg.set("scheduler.max-threads", size_t{2}), cfg)),
        times(opts.warm_seed_s, opts.cold_seed_s),
        t0(Clock::now()) {
    LoadDispatched();
    for (const std::string& w : opts.workers) {
      Conn c;
      std::string host;
      int port = 0;
      ParseWorkerAddress(w, &host, &port);
      c.host = host;
      c.port = static_cast<uint16_t>(port);
      conns[w] = c;
      placement.AddWorker(w, 1, 0);  // slots from the worker's info once connected
    }
  }

  double Now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  static constexpr size_t kKeptDispatches = 4096;  // a build in flight at a crash is recent
  static constexpr size_t kCompactEvery = 2 * kKeptDispatches;

  // The last kKeptDispatches dispatches of an earlier process; compacts an oversized journal.
  void LoadDispatched() {
    if (opts.journal_file.empty()) return;
    std::ifstream in(opts.journal_file);
    std::deque<std::string> order;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || j.value("event", "") != "dispatched") continue;
      const std::string id = j.value("build_id", "");
      if (id.empty()) continue;
      ++journal_dispatches;
      if (!dispatched.count(id)) order.push_back(id);
      dispatched[id] = {j.value("worker", ""), j.value("commit", ""), j.value("key", "")};
      if (order.size() > kKeptDispatches) {
        dispatched.erase(order.front());
        order.pop_front();
      }
    }
    if (journal_dispatches >= kCompactEvery) CompactJournal();
  }

  // Appends `record` to journal_file (one writer at a time); every kCompactEvery dispatches
  // the file is compacted, so it stays bounded however many builds run.
  void Journal(const nlohmann::json& record) {
    if (opts.journal_file.empty()) return;
    std::lock_guard<std::mutex> lock(journal_mu);
    AppendJournal(opts.journal_file, record);
    if (record.value("event", "") == "dispatched" && ++journal_dispatches >= kCompactEvery)
      CompactJournal();
  }

  // Rewrites journal_file with every record but the dispatches older than the last
  // kKeptDispatches (worker losses are rare and kept). Atomic: a crash leaves either file.
  void CompactJournal() {
    std::ifstream in(opts.journal_file);
    std::vector<std::string> lines;
    std::vector<bool> is_dispatch;
    size_t dispatches = 0;
    for (std::string line; std::getline(in, line);) {
      const bool d = line.find("\"event\":\"dispatched\"") != std::string::npos;
      dispatches += d;
      lines.push_back(std::move(line));
      is_dispatch.push_back(d);
    }
    std::string out;
    size_t skip = dispatches > kKeptDispatches ? dispatches - kKeptDispatches : 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (is_dispatch[i] && skip > 0) {
        --skip;
        continue;
      }
      out += lines[i] + "\n";
    }
    Status st = WriteFileAtomic(opts.journal_file, out, 0600);
    if (!st.ok()) spdlog::warn("pool: cannot compact the pool journal: {}", st.message());
    journal_dispatches = std::min(dispatches, kKeptDispatches);
  }

  // A connected handle to `worker`, connecting (and asking its slots and warm candidates)
  // when needed. Null handle when it cannot be reached (then it is not ready for a while).
  remote_builder_actor Connect(const std::string& worker) {
    Conn c;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = conns.find(worker);
      if (it == conns.end()) return remote_builder_actor{};  // no longer a member
      c = it->second;
      if (c.handle) return c.handle;
    }
    remote_builder_actor h;
    // A worker whose TLS identity does not fit is kept away from CAF (tls_probe.h: a failed
    // handshake there breaks the network thread's other connections) and the reason is kept.
    Status st = ProbeWorkerTls(opts.tls, c.host, c.port);
    if (!st.ok()) {
      const std::string at = c.host + ":" + std::to_string(c.port);
      st = Status::Unavailable("worker " + worker + (worker == at ? "" : " at " + at) + ": " +
                               st.message() + "; no build goes there until that is fixed");
    } else {
      st = ConnectRemoteBuilder(sys, c.host, c.port, &h);
      if (!st.ok()) ClearTransportErrors(sys);
    }
    auto same = [](const remote_builder_actor& a, const remote_builder_actor& b) {
      return caf::actor_cast<caf::abstract_actor*>(a) == caf::actor_cast<caf::abstract_actor*>(b);
    };
    for (int i = 0; st.ok() && c.dead && same(h, c.dead); ++i) {
      if (i == 100) {  // 2 s: CAF did not drop its cached dead handle
        st = Status::Unavailable("worker " + worker + ": only its lost connection is offered");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      st = ConnectRemoteBuilder(sys, c.host, c.port, &h);
    }
    nlohmann::json info;
    if (st.ok()) {
      caf::scoped_actor self{sys};
      RemoteBuildRequest r;
      r.op = "info";
      self->request(h, std::chrono::seconds(10), remote_build_atom::value,
                    RemoteBuildRequestToText(r))
          .receive(
              [&](const std::string& text) {
                RemoteBuildAnswer a;
                if (RemoteBuildAnswerFromText(text, &a).ok()) info = a.info;
              },
              [&](const caf::error& e) {
                st = Status::Unavailable("worker " + worker + " did not answer: " + sys.render(e));
              });
    }
    std::lock_guard<std::mutex> lock(mu);
    auto cit = conns.find(worker);
    if (cit == conns.end()) return remote_builder_actor{};  // removed meanwhile
    Conn& cc = cit->second;
    if (!st.ok()) {
      // Said once per cause (a refused worker is tried again every connect_retry_ms).
      if (st.message() != cc.last_error) spdlog::warn("pool: {}", st.message());
      cc.last_error = st.message();
      cc.retry_at = Clock::now() + std::chrono::milliseconds(opts.connect_retry_ms);
      placement.SetReady(worker, false, Now());
      cv.notify_all();
      return remote_builder_actor{};
    }
    cc.handle = h;
    cc.dead = remote_builder_actor{};
    cc.last_error.clear();
    size_t slots = info.value("slots", size_t{1});
    placement.AddWorker(worker, slots, Now());
    placement.SetReady(worker, true, Now());
    if (info.contains("warm") && info["warm"].is_array())
      for (const auto& w : info["warm"])
        if (w.is_string()) placement.SetWarm(worker, w.get<std::string>(), true);
    spdlog::info("pool: worker {} connected ({} slots)", worker, slots);
    cv.notify_all();
    return h;
  }

  // A worker's answer may carry what it holds warm now (`info.warm`): candidates it evicted
  // (worker.max_candidates) are no longer warm there for placement.
  void SyncWarm(const std::string& worker, const nlohmann::json& info) {
    if (!info.contains("warm") || !info["warm"].is_array()) return;
    std::set<std::string> warm;
    for (const auto& w : info["warm"])
      if (w.is_string()) warm.insert(w.get<std::string>());
    std::lock_guard<std::mutex> lock(mu);
    placement.SetWarmSet(worker, warm);
  }

  // The worker's proxy went down: forget the handle, take it out of placement until it
  // answers again.
  void Lost(const std::string& worker) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = conns.find(worker);
    if (it == conns.end()) return;
    Conn& c = it->second;
    if (c.handle) c.dead = c.handle;
    c.handle = remote_builder_actor{};
    c.retry_at = Clock::now() + std::chrono::milliseconds(opts.connect_retry_ms);
    placement.SetReady(worker, false, Now());
    cv.notify_all();
  }

  // A down message is not proof that the worker is gone (a connection can drop while the
  // worker lives): forget the handle, reconnect and ask `info`. A handle when the worker
  // answers (it stays in placement, its running builds keep their slots), null when it cannot
  // be reached (then it is out of placement until a later reconnect).
  remote_builder_actor Reconfirm(const std::string& worker) {
    ClearTransportErrors(sys);
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = conns.find(worker);
      if (it == conns.end()) return remote_builder_actor{};
      if (it->second.handle) it->second.dead = it->second.handle;
      it->second.handle = remote_builder_actor{};
    }
    return Connect(worker);
  }

  // Runs `req` on `worker` to its answer. When the connection drops but the worker still
  // answers on a new one, the same request is sent again: the worker joins the build or push
  // it already runs for that build id, or answers again the one that ended (never a second
  // one), so a dropped connection is neither a lost worker nor a retry. At most
  // `kReattach` times per attempt.
  Attempt RunConfirmed(const std::string& worker, remote_builder_actor h,
                       const RemoteBuildRequest& req, Clock::time_point deadline,
                       const CancelToken* cancel, const OutputFn& out) {
    constexpr int kReattach = 3;
    Attempt at;
    for (int reattached = 0;; ++reattached) {
      at = Run(worker, h, req, deadline, cancel);
      if (!at.lost || reattached == kReattach || (cancel && cancel->cancelled())) return at;
      h = Reconfirm(worker);
      if (!h) return at;
      spdlog::warn(
          "pool: the connection to worker {} dropped during {} {}; it answers on a new "
          "one: re-attaching",
          worker, req.op, req.build_id);
      out("kiln: the connection to worker " + worker +
          " dropped; it still answers: " + "re-attached to the " + req.op + "\n");
    }
  }

  size_t WorkerCount() {
    std::lock_guard<std::mutex> lock(mu);
    return conns.size();
  }

  // Re-admits workers whose retry time has come (their next Connect decides). Under mu.
  void ReadmitLocked() {
    for (auto& [w, c] : conns)
      if (!c.handle && c.listed_ready && c.retry_at <= Clock::now())
        placement.SetReady(w, true, Now());
  }

  // Chooses a worker for `ck` (not in `exclude`) and takes its slot; "" when none is ready.
  // Waits for a slot of the preferred worker when placement says so.
  std::string Pick(const std::string& ck, const std::set<std::string>& exclude,
                   const CancelToken* cancel, bool* warm) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      ReadmitLocked();
      std::string w;
      Placement::Decision d = placement.Place(ck, times, Now());
      if ((d.kind == Placement::Kind::kPreferred || d.kind == Placement::Kind::kSpill) &&
          !exclude.count(d.worker))
        w = d.worker;
      bool any = false;
      if (w.empty()) {
        for (const std::string& r : placement.Ranking(ck)) {
          if (exclude.count(r)) continue;
          any = true;
          // A retry, or a preferred worker that was excluded: the best other free one.
          if ((!exclude.empty() || d.kind != Placement::Kind::kWait) &&
              placement.FreeSlots(r) > 0) {
            w = r;
            break;
          }
        }
      }
      if (!w.empty()) {
        *warm = placement.IsWarm(w, ck);
        placement.Started(w, ck, Now(), *warm ? times.warm() : times.cold());
        return w;
      }
      if (!any) return "";
      if (cancel && cancel->cancelled()) return "";
      cv.wait_for(lock, std::chrono::milliseconds(200));
    }
  }

  // `worker` holds the image of `build_id` (for its push); the last 4096 builds.
  void RememberBuilt(const std::string& build_id, const std::string& worker) {
    std::lock_guard<std::mutex> lock(mu);
    built_on[build_id] = worker;
    built_order.push_back(build_id);
    while (built_order.size() > 4096) {
      built_on.erase(built_order.front());
      built_order.pop_front();
    }
  }

  void Done(const std::string& worker, const std::string& ck, bool warm, double seconds,
            bool built) {
    std::lock_guard<std::mutex> lock(mu);
    placement.Finished(worker, ck, Now());
    if (built) {
      times.Record(warm, seconds);
      placement.SetWarm(worker, ck, true);
    }
    cv.notify_all();
  }

  // Sends `req` to `worker` and waits for its answer, the down message of its actor, the
  // deadline, or a cancel (forwarded to the worker, whose answer then ends the wait).
  Attempt Run(const std::string& worker, const remote_builder_actor& h,
              const RemoteBuildRequest& req, Clock::time_point deadline,
              const CancelToken* cancel) {
    Attempt at;
    caf::scoped_actor self{sys};
    self->monitor(h);
    self->send(h, remote_build_atom::value, RemoteBuildRequestToText(req));
    bool cancel_sent = false;
    while (!at.answered && !at.lost && at.error.ok()) {
      self->receive(
          [&](const std::string& text) {
            RemoteBuildAnswer a;
            Status st = RemoteBuildAnswerFromText(text, &a);
            if (!st.ok()) {
              at.error = st;
            } else if ((a.op == req.op || (req.op == "attach" && a.op == "build")) &&
                       a.build_id == req.build_id) {
              at.answered = true;
              at.answer = std::move(a);
            }
          },
          [&](const caf::down_msg& m) {
            if (m.source == h.address()) {
              at.lost = true;
              // The dead connection's TLS error may still sit in the network thread's
              // OpenSSL queue, where it would fail the next read of a healthy connection.
              ClearTransportErrors(sys);
            }
          },
          [&](const caf::error& e) {
            at.error =
                Status::Unavailable("worker " + worker + " refused the request: " + sys.render(e));
          },
          caf::after(std::chrono::milliseconds(200)) >>
              [&] {
                if (cancel && cancel->cancelled() && !cancel_sent) {
                  RemoteBuildRequest c = req;
                  c.op = "cancel";
                  self->send(h, remote_build_atom::value, RemoteBuildRequestToText(c));
                  cancel_sent = true;
                  deadline = std::min(deadline, Clock::now() + std::chrono::seconds(60));
                }
                if (Clock::now() > deadline)
                  at.error =
                      Status::DeadlineExceeded("worker " + worker + " did not answer in time");
              });
    }
    self->demonitor(h.address());
    return at;
  }

  PoolBuilderOptions opts;
  PoolSystemConfig cfg;
  caf::actor_system sys;
  std::mutex mu;
  std::condition_variable cv;
  Placement placement;
  BuildTimes times;
  std::map<std::string, Conn> conns;
  std::map<std::string, std::string> built_on;  // build id -> worker holding its image
  std::deque<std::string> built_order;          // bounds built_on
  // Issue 20: builds an earlier scheduler process dispatched (journal_file), by build id;
  // taken out when Build re-attaches to one.
  struct Dispatched {
    std::string worker, commit, key;
  };
  std::map<std::string, Dispatched> dispatched;
  std::mutex journal_mu;          // serializes Journal and its compaction
  size_t journal_dispatches = 0;  // dispatch records in journal_file (under journal_mu)
  const Clock::time_point t0;
};

PoolBuilder::PoolBuilder(PoolBuilderOptions opts)
    : impl_(std::make_unique<Impl>(std::move(opts))) {}
PoolBuilder::~PoolBuilder() = default;

namespace {

RemoteBuildRequest RequestOf(const BuildJob& job, const std::string& op, const std::string& url) {
  RemoteBuildRequest r;
  r.op = op;
  r.build_id = job.build_id;
  r.domain = job.domain;
  r.candidate = job.candidate;
  r.commit = job.commit;
  r.key = job.key;
  r.git_url = url;
  r.image_registry = job.registry.name;
  r.image_repository = job.repository;
  r.build = BuildConfigToJson(job.build);
  return r;
}

}  // namespace

BuildResult PoolBuilder::Build(const BuildJob& job, const OutputFn& out,
                               const CancelToken* cancel) {
  Impl& m = *impl_;
  BuildResult res;
  if (job.commit.empty()) {
    res.status = Status::FailedPrecondition(
        "a worker pool builds commits of the domain's repository, not a local directory");
    return res;
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(job.build.timeout_s + 120);
  {
    std::unique_lock<std::mutex> lock(m.mu);
    auto d = m.dispatched.find(job.build_id);
    if (d != m.dispatched.end()) {
      const std::string w = d->second.worker;
      m.dispatched.erase(d);
      lock.unlock();
      return Reattach(w, job, deadline, out, cancel);
    }
  }
  const std::string ck = job.domain + "/" + job.candidate;
  std::set<std::string> tried;
  std::vector<std::string> lost, busy;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool warm = false;
    const int64_t decided = WireNowMs();
    std::string w = m.Pick(ck, tried, cancel, &warm);
    if (w.empty()) break;
    tried.insert(w);
    remote_builder_actor h = m.Connect(w);
    if (!h) {
      m.Done(w, ck, warm, 0, false);
      --attempt;  // an unreachable worker never started the build: not a retry
      if (tried.size() >= m.WorkerCount()) break;
      continue;
    }
    RemoteBuildRequest req =
        RequestOf(job, "build", m.opts.git_url ? m.opts.git_url(job.domain) : "");
    req.sent_unix_ms = decided;
    // Issue 20: on disk before the worker can start it, so a restarted scheduler asks it.
    m.Journal({{"event", "dispatched"},
               {"build_id", job.build_id},
               {"domain", job.domain},
               {"candidate", job.candidate},
               {"commit", job.commit},
               {"key", job.key},
               {"worker", w},
               {"unix_ms", WireNowMs()}});
    out("kiln: building on worker " + w + (warm ? " (warm)" : " (cold)") + "\n");
    auto t = Clock::now();
    Attempt at = m.RunConfirmed(w, h, req, deadline, cancel, out);
    double secs = std::chrono::duration<double>(Clock::now() - t).count();
    m.Done(w, ck, warm, secs, at.answered && at.answer.build.status.ok());
    if (at.answered && at.answer.busy) {
      // The worker was full and did not start it: another worker, not a retry.
      spdlog::info("pool: worker {} busy for build {}: {}", w, job.build_id,
                   at.answer.build.status.message());
      out("kiln: worker " + w + " is busy; placing the build elsewhere\n");
      busy.push_back(w);
      --attempt;
      if (tried.size() >= m.WorkerCount()) break;
      continue;
    }
    if (at.answered) {
      if (!at.answer.log.empty()) out(at.answer.log);
      m.SyncWarm(w, at.answer.info);
      res = std::move(at.answer.build);
      if (res.status.ok()) m.RememberBuilt(job.build_id, w);
      return res;
    }
    if (!at.lost) {
      res.status = at.error;
      res.failure_kind = "infrastructure";
      return res;
    }
    m.Lost(w);
    lost.push_back(w);
    const bool retry = attempt == 0 && !(cancel && cancel->cancelled());
    m.Journal({{"event", "worker_lost"},
               {"phase", "build"},
               {"build_id", job.build_id},
               {"domain", job.domain},
               {"candidate", job.candidate},
               {"worker", w},
               {"retry", retry},
               {"unix_ms", WireNowMs()}});
    spdlog::warn("pool: worker {} lost during build {}{}", w, job.build_id,
                 retry ? "; retrying once on another worker" : "");
    out("kiln: worker " + w + " was lost mid-build" +
        (retry ? "; retrying on another worker\n" : "\n"));
    if (!retry) break;
  }
  if (cancel && cancel->cancelled()) {
    res.status = Status::Cancelled("build cancelled");
    return res;
  }
  std::string names;
  for (const std::string& w : lost) names += (names.empty() ? "" : ", ") + w;
  if (!lost.empty()) {
    res.status = Status::Unavailable("lost worker(s) " + names + " mid-build");
  } else if (!busy.empty()) {
    res.status = Status::Unavailable("every reachable worker of the pool was busy");
  } else {
    res.status = Status::Unavailable("no worker of the pool is reachable (scheduler.workers)");
  }
  res.failure_kind = "infrastructure";
  return res;
}

BuildResult PoolBuilder::Reattach(const std::string& w, const BuildJob& job,
                                  std::chrono::steady_clock::time_point deadline,
                                  const OutputFn& out, const CancelToken* cancel) {
  Impl& m = *impl_;
  BuildResult res;
  auto interrupted = [&](const std::string& why) {
    spdlog::warn("pool: build {} cannot be carried on after the restart: {}", job.build_id, why);
    res.status = Status::Unavailable("kiln restarted during this build and " + why +
                                     "; build the candidate again");
    res.failure_kind = "interrupted";
    return res;
  };
  out("kiln: kiln restarted during this build; asking worker " + w + " for it\n");
  remote_builder_actor h = m.Connect(w);
  if (!h) return interrupted("its worker " + w + " cannot be reached");
  RemoteBuildRequest req = RequestOf(job, "attach", "");
  Attempt at = m.RunConfirmed(w, h, req, deadline, cancel, out);
  if (!at.answered) {
    if (at.lost) m.Lost(w);
    if (cancel && cancel->cancelled()) {
      res.status = Status::Cancelled("build cancelled");
      return res;
    }
    return interrupted("its worker " + w + (at.lost ? " was lost" : " did not answer"));
  }
  if (at.answer.build.failure_kind == "unknown_build")
    return interrupted("its worker " + w + " no longer knows it");
  out("kiln: re-attached to the build on worker " + w + "\n");
  if (!at.answer.log.empty()) out(at.answer.log);
  res = std::move(at.answer.build);
  if (res.status.ok()) m.RememberBuilt(job.build_id, w);
  return res;
}

bool PoolBuilder::Resumable(const std::string& build_id, std::string* commit, std::string* key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto d = impl_->dispatched.find(build_id);
  if (d == impl_->dispatched.end() || d->second.worker.empty() || d->second.commit.empty())
    return false;
  *commit = d->second.commit;
  *key = d->second.key;
  return true;
}

PushResult PoolBuilder::Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                             const CancelToken* cancel) {
  return OnBuildingWorker("push", job, built, out, cancel);
}

PushResult PoolBuilder::UploadBlobs(const BuildJob& job, const BuildResult& built,
                                    const OutputFn& out, const CancelToken* cancel) {
  return OnBuildingWorker("upload_blobs", job, built, out, cancel);
}

PushResult PoolBuilder::OnBuildingWorker(const std::string& op, const BuildJob& job,
                                         const BuildResult& built, const OutputFn& out,
                                         const CancelToken* cancel) {
  Impl& m = *impl_;
  const std::string what = op == "push" ? "push" : "blob upload";
  PushResult res;
  std::string w = WorkerOf(job.build_id);
  if (w.empty()) {
    res.status = Status::Unavailable("no worker holds the image of build " + job.build_id +
                                     " (its worker was lost or the scheduler restarted); build "
                                     "it again");
    return res;
  }
  remote_builder_actor h = m.Connect(w);
  if (!h) {
    res.status = Status::Unavailable("worker " + w + " that built " + job.build_id +
                                     " cannot be reached for the " + what + "; build it again");
    return res;
  }
  RemoteBuildRequest req = RequestOf(job, op, m.opts.git_url ? m.opts.git_url(job.domain) : "");
  req.image_id = built.image_id;
  req.sent_unix_ms = WireNowMs();
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(job.build.timeout_s + 120);
  Attempt at = m.RunConfirmed(w, h, req, deadline, cancel, out);
  // Only this worker holds the image: a busy answer (its push line is full) is asked again.
  while (at.answered && at.answer.busy && Clock::now() < deadline &&
         !(cancel && cancel->cancelled())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    h = m.Connect(w);
    if (!h) break;
    at = m.RunConfirmed(w, h, req, deadline, cancel, out);
  }
  if (at.answered) {
    if (!at.answer.log.empty()) out(at.answer.log);
    return at.answer.push;
  }
  if (at.lost) {
    m.Lost(w);
    m.Journal({{"event", "worker_lost"},
               {"phase", op},
               {"build_id", job.build_id},
               {"worker", w},
               {"retry", false},
               {"unix_ms", WireNowMs()}});
    res.status = Status::Unavailable("worker " + w + " was lost during the " + what + " of " +
                                     job.build_id + "; build it again");
    return res;
  }
  res.status = at.error;
  return res;
}

Status PoolBuilder::Check() {
  std::string down;
  bool any = false;
  std::vector<std::string> workers;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [w, c] : impl_->conns) workers.push_back(w);
  }
  for (const std::string& w : workers) {
    if (impl_->Connect(w)) {
      any = true;
    } else {
      down += (down.empty() ? "" : ", ") + w;
    }
  }
  if (any) return Status::Ok();
  return Status::Unavailable("no worker of the pool answers: " + down);
}

std::string PoolBuilder::Summary() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  size_t connected = 0;
  std::string refused;
  for (const auto& [w, c] : impl_->conns) {
    connected += c.handle ? 1 : 0;
    if (!c.handle && !c.last_error.empty()) refused += "; " + c.last_error;
  }
  return std::to_string(connected) + " of " + std::to_string(impl_->conns.size()) +
         " worker(s) connected" + refused;
}

void PoolBuilder::SetMembers(const std::vector<PoolMember>& members) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const double now = m.Now();
  std::set<std::string> listed;
  for (const PoolMember& pm : members) {
    listed.insert(pm.id);
    auto [it, inserted] = m.conns.try_emplace(pm.id);
    Conn& c = it->second;
    if (!inserted && (c.host != pm.host || c.port != pm.port)) {
      // A new address (a restarted pod): the old connection is not that worker any more.
      if (c.handle) c.dead = c.handle;
      c.handle = remote_builder_actor{};
      c.retry_at = Clock::time_point{};
    }
    c.host = pm.host;
    c.port = static_cast<uint16_t>(pm.port);
    c.listed_ready = pm.ready;
    if (inserted) m.placement.AddWorker(pm.id, 1, now);  // slots from its info on connect
    m.placement.SetReady(pm.id, pm.ready && c.retry_at <= Clock::now(), now);
  }
  for (auto it = m.conns.begin(); it != m.conns.end();) {
    if (listed.count(it->first)) {
      ++it;
      continue;
    }
    // Gone from the list: no new build goes there; a build running there ends on its own
    // answer or its actor's down message.
    spdlog::info("pool: worker {} left the pool", it->first);
    m.placement.RemoveWorker(it->first);
    it = m.conns.erase(it);
  }
  m.cv.notify_all();
}

std::vector<PoolMember> PoolBuilder::Members() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<PoolMember> out;
  for (const auto& [w, c] : impl_->conns) out.push_back({w, c.host, c.port, c.listed_ready});
  return out;
}

std::string PoolBuilder::WorkerOf(const std::string& build_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->built_on.find(build_id);
  return it == impl_->built_on.end() ? "" : it->second;
}

}  // namespace kiln
