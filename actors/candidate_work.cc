#include "actors/candidate_work.h"

#include <sys/file.h>  // LOCK_SH

#include <chrono>

#include "actors/build_history.h"  // issue 19: DomainHistoryBudget
#include "actors/push_lanes.h"
#include "builder/build_key.h"
#include "common/file_util.h"
#include "core/cancel_token.h"
#include "registry/registry_client.h"  // issue 19: RegistryDeadlineScope
#include "storage/collector.h"         // issue 19: StorageGate
#include "storage/lease_table.h"       // issue 19
#include "workspace/checkout.h"
#include "workspace/git_runner.h"  // issue 19: GitDeadlineScope
#include "workspace/source_tree.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
int64_t Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Issue 19: how a registry wait cut by the build's deadline is worded.
std::string BuildDeadlineWords(const DomainEnv& env) {
  return "the build's timeout (build.timeout_s = " + std::to_string(env.dc->build.timeout_s) +
         " s)";
}

BuildJob MakeJob(const DomainEnv& env, const std::string& candidate, const BuildId& id,
                 const std::string& key, const std::string& commit,
                 const std::optional<std::string>& source_dir) {
  BuildJob job;
  job.build_id = id;
  job.domain = env.domain;
  job.candidate = candidate;
  job.source_dir = source_dir ? *source_dir : env.CandidateDir(candidate) + "/src";
  job.storage_dir = env.CandidateDir(candidate) + "/storage";
  job.cache_dir = env.CacheDir();
  job.home_dir = env.home_dir;
  job.build = env.dc->build;
  job.registry = *env.registry;
  job.repository = env.dc->image.repository;
  job.tag = candidate;
  job.key = key;
  job.commit = commit;
  return job;
}

}  // namespace

std::string PushLane(const DomainEnv& env) {
  return PushLaneKey(env.dc->image.registry, env.dc->image.repository);
}

CandidateBuilds::Options CandidateOptions(const DomainEnv& env, const std::string& candidate) {
  CandidateBuilds::Options o;
  o.domain = env.domain;
  o.candidate = candidate;
  o.remote = GitRemoteUrl(env.config->server, env.domain);
  o.registry = env.dc->image.registry;
  o.hidden = {env.config->server.state_dir, env.domain_dir, env.home_dir};
  o.history = env.history_per_candidate;
  o.log_max_bytes = env.log_max_bytes;
  o.timeout_s = env.dc->build.timeout_s;
  o.journaled = env.journal() != nullptr;
  o.track_branches = env.busy != nullptr;
  o.save_keys = env.store != nullptr;  // the store's build-key cache (also in `kiln build`)
  if (auto h = env.history) {  // issue 19: the domain's bound, and older records from the journal
    o.history_limit = [h] { return h->PerCandidate(); };
    o.full_logs = [h] { return h->FullLogs(); };
  }
  if (env.journal() != nullptr)
    o.journal = [store = env.store](const BuildId& id) { return store->Build(id); };
  if (env.builder)  // issue 20: a pool build a worker may still run after a restart
    o.resume = [b = env.builder](const BuildId& id, std::string* commit, std::string* key) {
      return b->Resumable(id, commit, key);
    };
  const DomainEnv* e = &env;
  o.build_key = [e](const std::string& source_id) {
    return ComputeBuildKey(e->domain, source_id, *e->dc, *e->registry, {});
  };
  return o;
}

DomainCore::Options DomainOptions(const DomainEnv& env) {
  DomainCore::Options o;
  o.domain = env.domain;
  o.deploy_type = env.dc ? env.dc->deploy.type : "none";
  o.remote = GitRemoteUrl(env.config->server, env.domain);
  o.history_per_candidate = env.history_per_candidate;
  o.max_candidates = env.max_candidates;
  o.has_deployer = env.deployer != nullptr;
  return o;
}

WorkDone ResolvePhase(const DomainEnv& env, const std::string& candidate, const BuildId& id,
                      const BuildRequest& req) {
  WorkDone d;
  d.id = id;
  d.phase = "resolve";
  if (req.source_dir) {
    std::string hex;
    d.status = SourceTree::HashDirectory(*req.source_dir, &hex);
    d.source_id = "dir:" + hex;
  } else if (!env.repo) {
    d.status = Status::FailedPrecondition("domain has no repository");
  } else {
    ResolvedSource rs;
    d.status = env.repo->Resolve(req.ref, req.commit, candidate, &rs);
    d.commit = rs.commit;
    d.tree = rs.tree;
    d.source_id = "git-tree:" + rs.tree;
  }
  return d;
}

WorkDone BuildPhase(const DomainEnv& env, const std::string& candidate, const BuildPhaseEffect& e) {
  RegistryDeadlineScope registry_deadline(e.deadline, BuildDeadlineWords(env));
  GitDeadlineScope git_deadline(e.deadline, BuildDeadlineWords(env));  // the checkout's git
  BuildJob job = MakeJob(env, candidate, e.id, e.key, e.commit, e.source_dir);
  WorkDone d;
  d.id = e.id;
  d.phase = "build";
  auto t0 = Clock::now();
  // Issue 19: waits while the collector deletes this candidate's things; a domain that stays
  // over its storage budget does not build (infrastructure, naming the budget).
  StorageLeaseTable::Use storage_use;
  if (env.storage_leases) storage_use = env.storage_leases->Acquire(env.domain, candidate);
  if (env.storage_gate) {
    std::string refusal = env.storage_gate->Refusal(env.domain);
    if (!refusal.empty()) {
      d.status = Status::ResourceExhausted(refusal);
      return d;
    }
  }
  if (!e.source_dir) {
    CheckoutStats cs;
    // Shared lock on the domain's repo.lock: repository upkeep (git gc, run by the git
    // endpoint under the exclusive lock) never runs during a checkout.
    Status st;
    {
      FileLock shared(env.domain_dir + "/repo.lock", LOCK_SH);
      st = Checkout::Update(*env.repo, e.commit, job.source_dir, &cs, e.tree);
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
      const std::string what = "checkout of " + e.commit.substr(0, 12);
      d.status = limit ? Status::ResourceExhausted(what + " refused: " + st.message())
                       : Status::Internal(what + " failed: " + st.message());
      return d;
    }
    e.log->Append("kiln: checked out " + e.commit.substr(0, 12) + " (" +
                  std::to_string(cs.files_written) + " files written, " +
                  std::to_string(cs.elapsed_ms) + " ms)\n");
  }
  if (e.cancel->cancelled()) {
    d.status = Status::Cancelled("build cancelled");
    return d;
  }
  auto log = e.log;
  BuildResult br = env.builder->Build(
      job, [&](std::string_view chunk) { log->Append(chunk); }, e.cancel.get());
  d.status = br.status;
  d.compile_failed = br.compile_failed;
  d.failure_kind = br.failure_kind;
  d.image_id = br.image_id;
  d.diagnostics = std::move(br.diagnostics);
  d.elapsed_ms = Ms(Clock::now() - t0);
  for (const auto& [part, ms] : br.timings) d.parts[part] = ms;
  if (env.storage_gate) env.storage_gate->BuildEnded();  // issue 19: its writes counted soon
  return d;
}

WorkDone PushPhase(const DomainEnv& env, const std::string& candidate, const PushPhaseEffect& e) {
  RegistryDeadlineScope registry_deadline(e.deadline, BuildDeadlineWords(env));
  StorageLeaseTable::Use storage_use;  // issue 19: the image is in the storage
  if (env.storage_leases) storage_use = env.storage_leases->Acquire(env.domain, candidate);
  BuildJob job = MakeJob(env, candidate, e.id, e.key, e.commit, e.source_dir);
  BuildResult built;
  built.image_id = e.image_id;
  auto log = e.log;
  auto append = [&](std::string_view c) { log->Append(c); };
  PushResult pr = e.blobs ? env.builder->UploadBlobs(job, built, append, e.cancel.get())
                          : env.builder->Push(job, built, append, e.cancel.get());
  WorkDone d;
  d.id = e.id;
  d.phase = e.blobs ? "blobs" : "push";
  d.status = pr.status;
  d.digest = pr.digest;
  d.ref = pr.ref;
  d.elapsed_ms = pr.elapsed_ms;
  for (const auto& [part, ms] : pr.timings) d.parts[part] = ms;
  return d;
}

DeployResult DeployPhase(Deployer& deployer, const DeployRequest& req, CancelToken* cancel,
                         const std::function<void(const std::string&)>& progress) {
  DeployResult res;
  try {
    res = deployer.Deploy(req, progress, cancel);
  } catch (const std::exception& e) {
    res.state = DeployState::kFailed;
    res.reason = "Internal";
    res.message = std::string("deployer failed: ") + e.what();
  }
  return res;
}

}  // namespace kiln
