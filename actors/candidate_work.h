// The work phases of the candidate and domain actors: the blocking steps of a build (resolve
// the source, check out and build, push), each run on a BlockingWork thread and reported as a
// WorkDone to the candidate actor, which hands it to its core (actors/candidate_builds.h);
// and a deploy, reported to the domain actor. Also the two cores' options from a DomainEnv.
// No CAF.
// Thread-safety: each call is independent; DomainEnv's services are thread-safe.
#pragma once

#include <functional>
#include <string>

#include "actors/candidate_builds.h"
#include "actors/domain_core.h"
#include "actors/domain_env.h"

namespace kiln {

/// The candidate core's options from the domain's environment (history, log and time limits,
/// what is journaled, the build key of a source). `env` must outlive the core.
CandidateBuilds::Options CandidateOptions(const DomainEnv& env, const std::string& candidate);

/// The push lane of the domain's builds (actors/push_lanes.h): its image repository in its
/// registry, so domains pushing to other repositories of the same registry never wait for it.
std::string PushLane(const DomainEnv& env);

/// The domain core's options from the domain's environment.
DomainCore::Options DomainOptions(const DomainEnv& env);

/// Resolves `req` (ref/commit -> commit and tree in the domain's repository, or hashes the
/// trusted CLI's source directory).
WorkDone ResolvePhase(const DomainEnv& env, const std::string& candidate, const BuildId& id,
                      const BuildRequest& req);
/// Checks the commit out into the candidate's workspace (git builds) and builds it. Honours
/// the storage budget and leases (issue 19) and the build's cancel token and deadline.
WorkDone BuildPhase(const DomainEnv& env, const std::string& candidate, const BuildPhaseEffect& e);
/// Pushes the built image, or (e.blobs, issue 20) uploads only its blobs (counts against the
/// build's deadline).
WorkDone PushPhase(const DomainEnv& env, const std::string& candidate, const PushPhaseEffect& e);

/// Runs one deploy; a deployer that throws yields a failed result ("Internal").
DeployResult DeployPhase(Deployer& deployer, const DeployRequest& req, CancelToken* cancel,
                         const std::function<void(const std::string&)>& progress);

}  // namespace kiln
