// MetricsRegistry: a small Prometheus metrics registry (counters, gauges, histograms with
// labels) rendered in the text exposition format (version 0.0.4).
//
// Ownership: plain value object; callers usually keep one per process or per component.
// Thread-safety: every method is thread-safe (one internal mutex).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

/// Label set: name -> value. Names must match [a-zA-Z_][a-zA-Z0-9_]*; values are escaped.
using MetricLabels = std::map<std::string, std::string>;

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  /// Declares a counter. Declaring a name twice keeps the first declaration.
  void DeclareCounter(const std::string& name, const std::string& help);
  /// Declares a gauge.
  void DeclareGauge(const std::string& name, const std::string& help);
  /// Declares a histogram with ascending upper bounds (+Inf is implicit).
  void DeclareHistogram(const std::string& name, const std::string& help,
                        std::vector<double> buckets);

  /// Adds `value` (>= 0) to a counter. Undeclared names or negative values are ignored.
  void Increment(const std::string& name, const MetricLabels& labels = {}, double value = 1);
  /// Sets a gauge. Undeclared names are ignored.
  void Set(const std::string& name, const MetricLabels& labels, double value);
  /// Adds `delta` (may be negative) to a gauge. Undeclared names are ignored.
  void Add(const std::string& name, const MetricLabels& labels, double delta);
  /// Records one observation in a histogram. Undeclared names are ignored.
  void Observe(const std::string& name, const MetricLabels& labels, double value);

  /// Current value of a counter or gauge series; 0 when absent.
  double Value(const std::string& name, const MetricLabels& labels = {}) const;

  /// The whole registry in Prometheus text format, families in name order.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct HistogramData {
    std::vector<double> counts;  // per bucket (non-cumulative), last is +Inf
    double sum = 0;
    double count = 0;
  };
  struct Family {
    Kind kind = Kind::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<MetricLabels, double> values;
    std::map<MetricLabels, HistogramData> histograms;
  };

  void Declare(const std::string& name, Kind kind, const std::string& help,
               std::vector<double> buckets);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;  // guarded by mu_
};

/// Escapes a label value for the text format (backslash, double quote, newline).
std::string EscapeMetricLabelValue(const std::string& value);

/// Formats a sample value: integers without a fraction, +Inf/-Inf/NaN as Prometheus expects.
std::string FormatMetricValue(double value);

}  // namespace kiln
