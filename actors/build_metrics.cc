#include "actors/build_metrics.h"

#include <cstdio>

namespace kiln {

const std::vector<double>& BuildMetrics::Bounds() {
  static const std::vector<double> b = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};
  return b;
}

void BuildMetrics::Observe(Histogram* h, double v) {
  if (h->buckets.empty()) h->buckets.assign(Bounds().size(), 0);
  for (size_t i = 0; i < Bounds().size(); ++i)
    if (v <= Bounds()[i]) h->buckets[i]++;
  h->sum += v;
  h->count++;
}

void BuildMetrics::BuildFinished(const std::string& domain, const std::string& mode,
                                 const std::string& outcome, double build_seconds,
                                 double push_seconds, bool cache_hit) {
  std::lock_guard<std::mutex> l(mu_);
  builds_[{domain, mode, outcome}]++;
  if (cache_hit) {
    cache_hits_[domain]++;
    return;
  }
  if (build_seconds > 0) Observe(&build_seconds_[domain], build_seconds);
  if (push_seconds > 0) Observe(&push_seconds_[domain], push_seconds);
}

void BuildMetrics::SetQueueDepth(const std::string& domain, size_t depth) {
  std::lock_guard<std::mutex> l(mu_);
  queue_depth_[domain] = depth;
}

void BuildMetrics::SetRunning(size_t running) {
  std::lock_guard<std::mutex> l(mu_);
  running_ = running;
}

void BuildMetrics::SetDomainRunning(const std::string& domain, size_t running, size_t slots) {
  std::lock_guard<std::mutex> l(mu_);
  domain_running_[domain] = {running, slots};
}

void BuildMetrics::RenderHistogram(std::string* out, const std::string& name,
                                   const std::string& labels, const Histogram& h) {
  char buf[64];
  for (size_t i = 0; i < Bounds().size(); ++i) {
    std::snprintf(buf, sizeof buf, "%g", Bounds()[i]);
    *out += name + "_bucket{" + labels + ",le=\"" + buf + "\"} " + std::to_string(h.buckets[i]) + "\n";
  }
  *out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  std::snprintf(buf, sizeof buf, "%.6f", h.sum);
  *out += name + "_sum{" + labels + "} " + buf + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

std::string BuildMetrics::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  out += "# HELP kiln_builds_total Builds finished, by domain, mode and outcome.\n";
  out += "# TYPE kiln_builds_total counter\n";
  for (const auto& [k, v] : builds_)
    out += "kiln_builds_total{domain=\"" + std::get<0>(k) + "\",mode=\"" + std::get<1>(k) +
           "\",outcome=\"" + std::get<2>(k) + "\"} " + std::to_string(v) + "\n";
  out += "# HELP kiln_build_cache_hits_total Builds answered from the build-key cache.\n";
  out += "# TYPE kiln_build_cache_hits_total counter\n";
  for (const auto& [d, v] : cache_hits_)
    out += "kiln_build_cache_hits_total{domain=\"" + d + "\"} " + std::to_string(v) + "\n";
  out += "# HELP kiln_build_duration_seconds Time spent building (excluding queue and push).\n";
  out += "# TYPE kiln_build_duration_seconds histogram\n";
  for (const auto& [d, h] : build_seconds_)
    RenderHistogram(&out, "kiln_build_duration_seconds", "domain=\"" + d + "\"", h);
  out += "# HELP kiln_push_duration_seconds Time spent pushing images.\n";
  out += "# TYPE kiln_push_duration_seconds histogram\n";
  for (const auto& [d, h] : push_seconds_)
    RenderHistogram(&out, "kiln_push_duration_seconds", "domain=\"" + d + "\"", h);
  out += "# HELP kiln_queue_depth Builds waiting for a slot, by domain.\n";
  out += "# TYPE kiln_queue_depth gauge\n";
  for (const auto& [d, v] : queue_depth_)
    out += "kiln_queue_depth{domain=\"" + d + "\"} " + std::to_string(v) + "\n";
  out += "# HELP kiln_builds_running Builds holding a slot.\n";
  out += "# TYPE kiln_builds_running gauge\n";
  out += "kiln_builds_running " + std::to_string(running_) + "\n";
  out += "# HELP kiln_domain_builds_running Builds holding a slot, by domain.\n";
  out += "# TYPE kiln_domain_builds_running gauge\n";
  for (const auto& [d, v] : domain_running_)
    out += "kiln_domain_builds_running{domain=\"" + d + "\"} " + std::to_string(v.first) + "\n";
  out += "# HELP kiln_domain_build_slots Build slots a domain may hold at once.\n";
  out += "# TYPE kiln_domain_build_slots gauge\n";
  for (const auto& [d, v] : domain_running_)
    out += "kiln_domain_build_slots{domain=\"" + d + "\"} " + std::to_string(v.second) + "\n";
  return out;
}

}  // namespace kiln
