// BuildMetrics: kiln's build counters, gauges and histograms, kept in the one MetricsRegistry
// (common/metrics.h) that renders /metrics. Components outside the build path (blocking-work
// pool, storage) add their own families through registry().
//
// Ownership: one per Runtime, shared by the actors. Thread-safety: every method is
// thread-safe (the registry's mutex); updated by actors, read by /metrics.
#pragma once

#include <cstddef>
#include <string>

#include "common/metrics.h"

namespace kiln {

class BuildMetrics {
 public:
  BuildMetrics();
  void BuildFinished(const std::string& domain, const std::string& mode, const std::string& outcome,
                     double build_seconds, double push_seconds, bool cache_hit);
  void SetQueueDepth(const std::string& domain, size_t depth);
  void SetRunning(size_t running);
  /// Per-domain build slots (issue 15): builds of `domain` holding a slot, and its cap.
  void SetDomainRunning(const std::string& domain, size_t running, size_t slots);
  /// The registry behind these metrics, for other components' families.
  MetricsRegistry& registry() { return registry_; }
  std::string Render() const { return registry_.Render(); }

 private:
  MetricsRegistry registry_;
};

}  // namespace kiln
