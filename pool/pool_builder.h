// PoolBuilder (issue 20): the Builder the scheduler's candidates use when `scheduler.workers`
// is set. Each build goes to a worker (`kiln worker`) chosen by Placement (rendezvous affinity
// by candidate, spill when waiting costs more than a cold build) and runs there through the
// worker's remote_builder_actor over mutual TLS; the push of that image goes to the same
// worker: its blobs right after the build (UploadBlobs, op upload_blobs, before the candidate
// asks for the push-lane grant), the manifest inside the grant (Push), so tags still move in
// build order across workers while the blobs of several builds upload at once.
//
// A worker's proxy going down mid-build (CAF 0.17 does not fail the open request by itself) is
// confirmed first: the network thread's stale TLS error is cleared (ClearTransportErrors) and
// the worker is asked `info` over a new connection; one that answers gets the same request
// again and joins the build it runs for that id (a dropped connection: no retry, no journal).
// A worker that cannot be reached is lost: that attempt fails, the loss is journaled (one JSON
// line in `journal_file`) and the build is retried once on another worker. A worker lost
// before its image was pushed is not retried by Push (at most one push per build): the build
// fails as infrastructure. A worker that answers busy (full) did not start the build: it goes
// to another worker without counting a retry.
//
// A scheduler restart (issue 20): Resumable names the builds the last process dispatched (the
// last 4096 dispatches of journal_file); Build of such an id sends `attach` to its worker,
// which joins the running build or answers the ended one again and never starts one; a worker
// that does not know it, or cannot be reached, fails it with failure_kind "interrupted".
//
// Thread-safety: Build/Push/Check block the calling thread (BlockingWork threads, never an
// actor) and may be called concurrently. The PoolBuilder owns its own actor system (caf::io +
// caf::openssl), separate from the Runtime's.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "pool/placement.h"
#include "pool/remote_builder.h"
#include "pool/worker_discovery.h"

namespace kiln {

struct PoolBuilderOptions {
  std::vector<std::string> workers;  // "host:port" (scheduler.workers); or SetMembers
  PoolTlsConfig tls;                 // the scheduler's certificate, key, and the workers' CA
  /// The git remote a worker fetches a domain's commits from (kiln serve's /git/<d>.git).
  std::function<std::string(const std::string& domain)> git_url;
  /// "" : worker losses are only logged. Else also every dispatch ("dispatched": build id,
  /// domain, candidate, commit, key, worker), read back at construction: a restarted
  /// scheduler re-attaches to the builds still running on their workers (Resumable, Build).
  std::string journal_file;
  double warm_seed_s = 10, cold_seed_s = 30;
  int connect_retry_ms = 2000;  // a worker that could not be reached is retried after this
};

class PoolBuilder : public Builder {
 public:
  explicit PoolBuilder(PoolBuilderOptions opts);
  ~PoolBuilder() override;

  BuildResult Build(const BuildJob& job, const OutputFn& out, const CancelToken* cancel) override;
  PushResult Push(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                  const CancelToken* cancel) override;
  PushResult UploadBlobs(const BuildJob& job, const BuildResult& built, const OutputFn& out,
                         const CancelToken* cancel) override;
  /// Issue 20: a build dispatched (journal_file) by an earlier scheduler process.
  bool Resumable(const std::string& build_id, std::string* commit, std::string* key) override;
  /// Ok when at least one worker answers; Unavailable naming the unreachable ones otherwise.
  Status Check() override;

  /// Replaces the pool's workers (discovery: PoolDiscovery calls it on every change of the
  /// worker Service's EndpointSlices). A new member joins placement (its slots from its
  /// `info` on connect), a member not ready gets no new build, a member no longer listed
  /// leaves (only its candidates move); one whose address changed is reconnected.
  void SetMembers(const std::vector<PoolMember>& members);
  /// The workers now (id, address, ready as listed), sorted by id.
  std::vector<PoolMember> Members() const;

  /// For /readyz: "N of M worker(s) connected", then each worker that could not be reached
  /// and why (e.g. its certificate is not signed by scheduler.worker_tls.worker_ca).
  std::string Summary() const;

  /// The worker that ran `build_id` (last attempt), "" when unknown. For tests and logs.
  std::string WorkerOf(const std::string& build_id) const;

 private:
  struct Conn;
  struct Impl;
  // Build of a build an earlier process dispatched to `worker`: `attach`, never a new build.
  BuildResult Reattach(const std::string& worker, const BuildJob& job,
                       std::chrono::steady_clock::time_point deadline, const OutputFn& out,
                       const CancelToken* cancel);
  // Push and UploadBlobs: `op` on the worker that built job.build_id.
  PushResult OnBuildingWorker(const std::string& op, const BuildJob& job, const BuildResult& built,
                              const OutputFn& out, const CancelToken* cancel);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
