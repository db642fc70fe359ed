// PoolDiscovery (issue 20): feeds a PoolBuilder from the worker Service's EndpointSlices. A
// thread of its own runs an EndpointSliceWatcher (list, bounded watches from the last
// resourceVersion with bookmarks, re-list on 410) and hands every change of the member list
// to PoolBuilder::SetMembers; a failed call is retried after a back-off (1 s doubling to
// 30 s), the last members staying in force meanwhile.
//
// Ownership: borrows the SliceApi and the PoolBuilder (both must outlive it). Thread-safety:
// the constructor starts the thread; the destructor stops it and joins, waiting for the
// watch in progress (at most the SliceApi's watch timeout). lists() and errors() may be read
// from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "config/config.h"
#include "pool/pool_builder.h"
#include "pool/worker_discovery.h"

namespace kiln {

class PoolDiscovery {
 public:
  PoolDiscovery(SliceApi* api, std::string port_name, PoolBuilder* pool);
  ~PoolDiscovery();
  PoolDiscovery(const PoolDiscovery&) = delete;
  PoolDiscovery& operator=(const PoolDiscovery&) = delete;

  /// Full lists of the slices so far (the first one, then one per 410).
  size_t lists() const { return lists_; }
  /// Failed list/watch calls so far.
  size_t errors() const { return errors_; }

 private:
  void Loop();

  SliceApi* const api_;
  const std::string port_name_;
  PoolBuilder* const pool_;
  std::atomic<size_t> lists_{0}, errors_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

/// The pool of `scheduler.worker_service` (docs/configuration.md): a PoolBuilder made from
/// `opts` (no static workers) whose members come from the Service's EndpointSlices, through
/// the Kubernetes API of `worker_service.kubeconfig` or, without it, the in-cluster service
/// account. `*keep` holds the client and the discovery thread: release it before the pool
/// (its destructor stops the thread). FailedPrecondition / InvalidArgument naming
/// `scheduler.worker_service` when the API cannot be configured (no cluster, bad kubeconfig,
/// no namespace).
Status StartServicePool(const SchedulerConfig& sched, PoolBuilderOptions opts,
                        std::shared_ptr<PoolBuilder>* pool, std::shared_ptr<void>* keep,
                        const InClusterSource* in_cluster = nullptr);

}  // namespace kiln
