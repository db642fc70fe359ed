#include "pool/worker_retention.h"

#include <algorithm>
#include <map>
#include <set>

namespace kiln {

std::vector<std::string> PlanEviction(std::vector<RetainedCandidate> kept,
                                      const RetentionLimits& limits) {
  // Oldest first; ties by name so that one input gives one plan.
  std::sort(kept.begin(), kept.end(), [](const RetainedCandidate& a, const RetainedCandidate& b) {
    if (a.last_built_ms != b.last_built_ms) return a.last_built_ms < b.last_built_ms;
    return a.domain != b.domain ? a.domain < b.domain : a.candidate < b.candidate;
  });
  std::map<std::string, size_t> per_domain;
  for (const RetainedCandidate& k : kept) ++per_domain[k.domain];
  size_t total = kept.size();
  std::vector<bool> gone(kept.size(), false);
  std::vector<std::string> out;
  auto evict = [&](size_t i) {
    gone[i] = true;
    --per_domain[kept[i].domain];
    --total;
    out.push_back(kept[i].domain + "/" + kept[i].candidate);
  };
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!kept[i].busy && per_domain[kept[i].domain] > limits.max_candidates_per_domain) evict(i);
  }
  for (size_t i = 0; i < kept.size() && total > limits.max_candidates; ++i) {
    if (!gone[i] && !kept[i].busy) evict(i);
  }
  return out;
}

}  // namespace kiln
