#include "common/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kiln {
namespace {

std::string RenderLabels(const MetricLabels& labels, const std::string& extra_name = "",
                         const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + EscapeMetricLabelValue(v) + "\"";
  }
  if (!extra_name.empty()) {
    if (!first) out += ",";
    out += extra_name + "=\"" + extra_value + "\"";
  }
  return out + "}";
}

const char* KindName(int kind) {
  switch (kind) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

}  // namespace

std::string EscapeMetricLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", value);
    return buf;
  }
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {  // shortest round-tripping form
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

void MetricsRegistry::Declare(const std::string& name, Kind kind, const std::string& help,
                              std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  if (families_.count(name)) return;
  Family f;
  f.kind = kind;
  f.help = help;
  f.buckets = std::move(buckets);
  families_.emplace(name, std::move(f));
}

void MetricsRegistry::DeclareCounter(const std::string& name, const std::string& help) {
  Declare(name, Kind::kCounter, help, {});
}

void MetricsRegistry::DeclareGauge(const std::string& name, const std::string& help) {
  Declare(name, Kind::kGauge, help, {});
}

void MetricsRegistry::DeclareHistogram(const std::string& name, const std::string& help,
                                       std::vector<double> buckets) {
  Declare(name, Kind::kHistogram, help, std::move(buckets));
}

void MetricsRegistry::Increment(const std::string& name, const MetricLabels& labels, double value) {
  if (value < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != Kind::kCounter) return;
  it->second.values[labels] += value;
}

void MetricsRegistry::Set(const std::string& name, const MetricLabels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != Kind::kGauge) return;
  it->second.values[labels] = value;
}

void MetricsRegistry::Add(const std::string& name, const MetricLabels& labels, double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != Kind::kGauge) return;
  it->second.values[labels] += delta;
}

void MetricsRegistry::Observe(const std::string& name, const MetricLabels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != Kind::kHistogram) return;
  Family& f = it->second;
  HistogramData& h = f.histograms[labels];
  if (h.counts.empty()) h.counts.assign(f.buckets.size() + 1, 0);
  size_t i = 0;
  while (i < f.buckets.size() && value > f.buckets[i]) ++i;
  h.counts[i] += 1;
  h.sum += value;
  h.count += 1;
}

double MetricsRegistry::Value(const std::string& name, const MetricLabels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto v = it->second.values.find(labels);
  return v == it->second.values.end() ? 0 : v->second;
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << " " << f.help << "\n";
    out << "# TYPE " << name << " " << KindName(static_cast<int>(f.kind)) << "\n";
    if (f.kind != Kind::kHistogram) {
      for (const auto& [labels, v] : f.values) {
        out << name << RenderLabels(labels) << " " << FormatMetricValue(v) << "\n";
      }
      continue;
    }
    for (const auto& [labels, h] : f.histograms) {
      double cumulative = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cumulative += h.counts[i];
        out << name << "_bucket" << RenderLabels(labels, "le", FormatMetricValue(f.buckets[i]))
            << " " << FormatMetricValue(cumulative) << "\n";
      }
      cumulative += h.counts.back();
      out << name << "_bucket" << RenderLabels(labels, "le", "+Inf") << " "
          << FormatMetricValue(cumulative) << "\n";
      out << name << "_sum" << RenderLabels(labels) << " " << FormatMetricValue(h.sum) << "\n";
      out << name << "_count" << RenderLabels(labels) << " " << FormatMetricValue(h.count) << "\n";
    }
  }
  return out.str();
}

}  // namespace kiln
