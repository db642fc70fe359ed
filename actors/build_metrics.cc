#include "actors/build_metrics.h"

namespace kiln {

BuildMetrics::BuildMetrics() {
  const std::vector<double> bounds = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};
  registry_.DeclareCounter("kiln_builds_total", "Builds finished, by domain, mode and outcome.");
  registry_.DeclareCounter("kiln_build_cache_hits_total",
                           "Builds answered from the build-key cache.");
  registry_.DeclareHistogram("kiln_build_duration_seconds",
                             "Time spent building (excluding queue and push).", bounds);
  registry_.DeclareHistogram("kiln_push_duration_seconds", "Time spent pushing images.", bounds);
  registry_.DeclareGauge("kiln_queue_depth", "Builds waiting for a slot, by domain.");
  registry_.DeclareGauge("kiln_builds_running", "Builds holding a slot.");
  registry_.DeclareGauge("kiln_domain_builds_running", "Builds holding a slot, by domain.");
  registry_.DeclareGauge("kiln_domain_build_slots", "Build slots a domain may hold at once.");
  registry_.Set("kiln_builds_running", {}, 0);
}

void BuildMetrics::BuildFinished(const std::string& domain, const std::string& mode,
                                 const std::string& outcome, double build_seconds,
                                 double push_seconds, bool cache_hit) {
  registry_.Increment("kiln_builds_total",
                      {{"domain", domain}, {"mode", mode}, {"outcome", outcome}});
  if (cache_hit) {
    registry_.Increment("kiln_build_cache_hits_total", {{"domain", domain}});
    return;
  }
  if (build_seconds > 0)
    registry_.Observe("kiln_build_duration_seconds", {{"domain", domain}}, build_seconds);
  if (push_seconds > 0)
    registry_.Observe("kiln_push_duration_seconds", {{"domain", domain}}, push_seconds);
}

void BuildMetrics::SetQueueDepth(const std::string& domain, size_t depth) {
  registry_.Set("kiln_queue_depth", {{"domain", domain}}, static_cast<double>(depth));
}

void BuildMetrics::SetRunning(size_t running) {
  registry_.Set("kiln_builds_running", {}, static_cast<double>(running));
}

void BuildMetrics::SetDomainRunning(const std::string& domain, size_t running, size_t slots) {
  registry_.Set("kiln_domain_builds_running", {{"domain", domain}}, static_cast<double>(running));
  registry_.Set("kiln_domain_build_slots", {{"domain", domain}}, static_cast<double>(slots));
}

}  // namespace kiln
