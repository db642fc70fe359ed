#include "pool/pool_discovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

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
    spdlog::warn("pool: worker discovery: {} (the last workers stay; again in {} ms)",
                 st.message(), backoff.count());
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, backoff, [this] { return stop_; })) return;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

}  // namespace kiln
