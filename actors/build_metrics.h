// BuildMetrics: kiln's build counters and histograms, rendered in Prometheus text format.
// Thread-safe (one mutex); updated by actors, read by /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln {

class BuildMetrics {
 public:
  void BuildFinished(const std::string& domain, const std::string& mode, const std::string& outcome,
                     double build_seconds, double push_seconds, bool cache_hit);
  void SetQueueDepth(const std::string& domain, size_t depth);
  void SetRunning(size_t running);
  /// Per-domain build slots (issue 15): builds of `domain` holding a slot, and its cap.
  void SetDomainRunning(const std::string& domain, size_t running, size_t slots);
  std::string Render() const;

 private:
  struct Histogram {
    std::vector<uint64_t> buckets;  // cumulative counts per bound
    double sum = 0;
    uint64_t count = 0;
  };
  static const std::vector<double>& Bounds();
  static void Observe(Histogram* h, double v);
  static void RenderHistogram(std::string* out, const std::string& name, const std::string& labels,
                              const Histogram& h);

  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> builds_;
  std::map<std::string, Histogram> build_seconds_;  // by domain
  std::map<std::string, Histogram> push_seconds_;   // by domain
  std::map<std::string, uint64_t> cache_hits_;
  std::map<std::string, size_t> queue_depth_;
  size_t running_ = 0;
  std::map<std::string, std::pair<size_t, size_t>> domain_running_;  // domain -> (running, slots)
};

}  // namespace kiln
