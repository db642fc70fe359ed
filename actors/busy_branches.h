// BusyBranches: which branches of each domain have a build in progress, so that a push may not
// delete a branch whose build is running, and how many pushes each domain has received (so a
// repeated build request can tell whether its branch may have moved). Updated by candidate
// actors and the git endpoint. Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace kiln {

class BusyBranches {
 public:
  void Add(const std::string& domain, const std::string& branch, const std::string& build_id) {
    std::lock_guard<std::mutex> l(mu_);
    builds_[domain][build_id] = branch;
  }
  void Remove(const std::string& domain, const std::string& build_id) {
    std::lock_guard<std::mutex> l(mu_);
    builds_[domain].erase(build_id);
  }
  /// A push to `domain` was accepted.
  void Pushed(const std::string& domain) {
    std::lock_guard<std::mutex> l(mu_);
    ++pushes_[domain];
  }
  /// Pushes accepted for `domain` so far.
  uint64_t Pushes(const std::string& domain) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pushes_.find(domain);
    return it == pushes_.end() ? 0 : it->second;
  }
  std::set<std::string> Get(const std::string& domain) const {
    std::lock_guard<std::mutex> l(mu_);
    std::set<std::string> out;
    auto it = builds_.find(domain);
    if (it != builds_.end())
      for (const auto& [id, branch] : it->second) out.insert(branch);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> builds_;  // domain -> build -> branch
  std::map<std::string, uint64_t> pushes_;                            // domain -> pushes
};

}  // namespace kiln
