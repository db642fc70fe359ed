// FakeDeployer: an in-memory Deployer for actor and tool tests. Records every request; the
// outcome of each Deploy() is scripted (default: rolled out after `delay`). Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "deploy/deployer.h"

namespace kiln {

class FakeDeployer : public Deployer {
 public:
  DeployResult Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                      const CancelToken* cancel) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
      if (current_ == req.image) return DeployResult{DeployState::kRolledOut, "", "", false, 0};
    }
    if (progress) progress("rolling out " + req.image);
    auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until) {
      if (cancel && cancel->cancelled())
        return {DeployState::kFailed, "Cancelled", "cancelled", true, 0};
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!fail_reason.empty())
      return {DeployState::kFailed, fail_reason, "scripted failure", true, 0};
    current_ = req.image;
    return {DeployState::kRolledOut, "", "", true, 0};
  }
  Status Current(std::string* image) override {
    std::lock_guard<std::mutex> lock(mu_);
    *image = current_;
    return Status::Ok();
  }
  std::vector<DeployRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Scripting knobs; set before use.
  std::chrono::milliseconds delay{0};
  std::string fail_reason;  // non-empty: every deploy fails with this reason

 private:
  std::mutex mu_;
  std::vector<DeployRequest> requests_;
  std::string current_;
};

}  // namespace kiln
