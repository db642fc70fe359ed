#include "pool/pool_discovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "k8s/kube_config.h"

namespace kiln {

PoolDiscovery::PoolDiscovery(SliceApi* api, std::string port_name, PoolBuilder* pool)
    : api_(api), port_name_(std::move(port_name)), pool_(pool) {
  thread_ = std::thread([this] { Loop(); });
}

PoolDiscovery::~PoolDiscovery() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PoolDiscovery::Loop() {
  EndpointSliceWatcher watcher(api_, port_name_, [this](const std::vector<PoolMember>& members) {
    size_t ready = 0;
    for (const PoolMember& m : members) ready += m.ready ? 1 : 0;
    spdlog::info("pool: {} worker(s) from the EndpointSlices, {} ready", members.size(), ready);
    pool_->SetMembers(members);
  });
  std::chrono::milliseconds backoff(1000);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Status st = watcher.Poll();
    lists_ = watcher.lists();
    if (st.ok()) {
      backoff = std::chrono::milliseconds(1000);
      continue;
    }
    ++errors_;
    spdlog::warn("pool: worker discovery: {} (the last workers stay; again in {} ms)", st.message(),
                 backoff.count());
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, backoff, [this] { return stop_; })) return;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

namespace {

// Declaration order is destruction order reversed: the discovery thread stops first.
struct ServicePool {
  std::shared_ptr<PoolBuilder> pool;
  std::unique_ptr<KubeClient> client;
  std::unique_ptr<KubeSliceApi> api;
  std::unique_ptr<PoolDiscovery> discovery;
};

}  // namespace

Status StartServicePool(const SchedulerConfig& sched, PoolBuilderOptions opts,
                        std::shared_ptr<PoolBuilder>* pool, std::shared_ptr<void>* keep,
                        const InClusterSource* in_cluster) {
  KubeConfig kc;
  Status st =
      sched.worker_service_kubeconfig
          ? LoadKubeconfig(*sched.worker_service_kubeconfig, "", &kc)
          : LoadInClusterConfig(in_cluster ? *in_cluster : InClusterSource::FromEnvironment(), &kc);
  const std::string ns =
      sched.worker_service_namespace.empty() ? kc.namespace_ : sched.worker_service_namespace;
  if (st.ok() && ns.empty())
    st = Status::FailedPrecondition("no namespace: set scheduler.worker_service.namespace");
  auto sp = std::make_shared<ServicePool>();
  if (st.ok()) st = KubeClient::Create(kc, KubeClientOptions{}, &sp->client);
  if (!st.ok()) return Status::FailedPrecondition("scheduler.worker_service: " + st.message());
  opts.workers.clear();
  sp->pool = std::make_shared<PoolBuilder>(std::move(opts));
  sp->api = std::make_unique<KubeSliceApi>(sp->client.get(), ns, sched.worker_service,
                                           /*watch_timeout_s=*/5);
  sp->discovery = std::make_unique<PoolDiscovery>(sp->api.get(), sched.worker_service_port_name,
                                                  sp->pool.get());
  *pool = sp->pool;
  *keep = sp;
  return Status::Ok();
}

}  // namespace kiln
