#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kiln {
namespace {

TEST(MetricsRegistryTest, CounterWithLabelsRendersHelpTypeAndSamples) {
  MetricsRegistry m;
  m.DeclareCounter("kiln_requests_total", "Requests.");
  m.Increment("kiln_requests_total", {{"method", "ping"}, {"status", "200"}});
  m.Increment("kiln_requests_total", {{"method", "ping"}, {"status", "200"}}, 2);
  m.Increment("kiln_requests_total", {{"method", "tools/call"}, {"status", "400"}});
  std::string text = m.Render();
  EXPECT_NE(text.find("# HELP kiln_requests_total Requests.\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kiln_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kiln_requests_total{method=\"ping\",status=\"200\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("kiln_requests_total{method=\"tools/call\",status=\"400\"} 1\n"),
            std::string::npos);
}

TEST(MetricsRegistryTest, CounterIgnoresNegativeAndUndeclared) {
  MetricsRegistry m;
  m.DeclareCounter("c", "c");
  m.Increment("c", {}, -5);
  m.Increment("undeclared");
  EXPECT_EQ(m.Value("c"), 0);
  EXPECT_EQ(m.Render().find("undeclared"), std::string::npos);
}

TEST(MetricsRegistryTest, GaugeSetAndAdd) {
  MetricsRegistry m;
  m.DeclareGauge("g", "gauge");
  m.Set("g", {}, 5);
  m.Add("g", {}, -2);
  EXPECT_EQ(m.Value("g"), 3);
  EXPECT_NE(m.Render().find("g 3\n"), std::string::npos);
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulative) {
  MetricsRegistry m;
  m.DeclareHistogram("h", "latency", {0.1, 1});
  m.Observe("h", {{"tool", "x"}}, 0.05);
  m.Observe("h", {{"tool", "x"}}, 0.5);
  m.Observe("h", {{"tool", "x"}}, 5);
  std::string text = m.Render();
  EXPECT_NE(text.find("# TYPE h histogram\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{tool=\"x\",le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_bucket{tool=\"x\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{tool=\"x\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("h_sum{tool=\"x\"} 5.55\n"), std::string::npos);
  EXPECT_NE(text.find("h_count{tool=\"x\"} 3\n"), std::string::npos);
}

TEST(MetricsRegistryTest, LabelValuesAreEscaped) {
  MetricsRegistry m;
  m.DeclareCounter("c", "c");
  m.Increment("c", {{"v", "a\"b\\c\nd"}});
  EXPECT_NE(m.Render().find("c{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos);
}

TEST(MetricsRegistryTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry m;
  m.DeclareCounter("c", "c");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) m.Increment("c", {{"k", "v"}});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.Value("c", {{"k", "v"}}), 40000);
}

TEST(MetricsRegistryTest, FormatValue) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.5), "0.5");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
}

}  // namespace
}  // namespace kiln
