// AggregatorMetrics as a scrape reads it (collectable()->Collect(), no
// endpoint): served and learner calls with their latency, reloads and the
// stale flag, learners' ready series that go with them, late learners,
// counters that a collector sets to a total, learner sources' series, and
// ClearCollectors, which waits for a scrape running them.
#include "lib/ops/aggregator_metrics.h"

#include <prometheus/metric_family.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "lib/base/version.h"

namespace aggregator {
namespace {

using Labels = std::map<std::string, std::string>;

// The series of `name` with exactly `labels`: a counter's or gauge's value,
// a histogram's sample count; nullopt when there is none.
std::optional<double> Value(const AggregatorMetrics& metrics,
                            const std::string& name, const Labels& labels) {
  for (const auto& family : metrics.collectable()->Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      Labels found;
      for (const auto& label : metric.label) found[label.name] = label.value;
      if (found != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

TEST_CASE(
    "Calls served and calls to learners count by rpc and code, their latency "
    "by rpc") {
  AggregatorMetrics metrics;
  metrics.Served("Learn", grpc::StatusCode::OK, 0.002);
  metrics.Served("Learn", grpc::StatusCode::OK, 0.003);
  metrics.Served("Learn", grpc::StatusCode::UNAVAILABLE, 0.1);
  CHECK(Value(metrics, "aggregator_requests_total",
              {{"rpc", "Learn"}, {"code", "OK"}}) == 2);
  CHECK(Value(metrics, "aggregator_requests_total",
              {{"rpc", "Learn"}, {"code", "UNAVAILABLE"}}) == 1);
  CHECK(Value(metrics, "aggregator_request_duration_seconds",
              {{"rpc", "Learn"}}) == 3);
  metrics.LearnerCall("l0", "GetData", grpc::StatusCode::DEADLINE_EXCEEDED,
                      1.5);
  CHECK(Value(metrics, "aggregator_learner_calls_total",
              {{"learner", "l0"},
               {"rpc", "GetData"},
               {"code", "DEADLINE_EXCEEDED"}}) == 1);
  CHECK(Value(metrics, "aggregator_learner_call_duration_seconds",
              {{"learner", "l0"}, {"rpc", "GetData"}}) == 1);
  metrics.Forwarded("l0", 1000);
  metrics.Forwarded("l0", 24);
  CHECK(Value(metrics, "aggregator_forwarded_bytes_total",
              {{"learner", "l0"}}) == 1024);
}

TEST_CASE(
    "Reloads: counted by result; a failed one marks the configuration stale "
    "until one succeeds; the start counts as a success") {
  AggregatorMetrics metrics;
  const double start = static_cast<double>(std::time(nullptr));
  CHECK(Value(metrics, "aggregator_config_last_reload_successful", {}) == 1);
  CHECK(*Value(metrics,
               "aggregator_config_last_reload_success_timestamp_seconds",
               {}) >= start - 1);
  // Both results exist from the start, at 0.
  CHECK(Value(metrics, "aggregator_reloads_total", {{"result", "failed"}}) ==
        0);
  metrics.Reloaded(false);
  CHECK(Value(metrics, "aggregator_config_last_reload_successful", {}) == 0);
  CHECK(Value(metrics, "aggregator_reloads_total", {{"result", "failed"}}) ==
        1);
  metrics.Reloaded(true);
  CHECK(Value(metrics, "aggregator_config_last_reload_successful", {}) == 1);
  CHECK(Value(metrics, "aggregator_reloads_total", {{"result", "ok"}}) == 1);
  CHECK(Value(metrics, "aggregator_build_info", {{"version", kVersion}}) == 1);
}

TEST_CASE("A learner's ready series goes with it") {
  AggregatorMetrics metrics;
  metrics.SetLearnerReady({{"l0", true}, {"l1", false}});
  CHECK(Value(metrics, "aggregator_learner_ready", {{"learner", "l0"}}) == 1);
  CHECK(Value(metrics, "aggregator_learner_ready", {{"learner", "l1"}}) == 0);
  metrics.SetLearnerReady({{"l1", true}});
  CHECK_FALSE(Value(metrics, "aggregator_learner_ready", {{"learner", "l0"}}));
  CHECK(Value(metrics, "aggregator_learner_ready", {{"learner", "l1"}}) == 1);
}

TEST_CASE(
    "Late: both series from the first call, the total counting each time "
    "found") {
  AggregatorMetrics metrics;
  metrics.SetLate("l2", false);
  CHECK(Value(metrics, "aggregator_learner_late", {{"learner", "l2"}}) == 0);
  CHECK(Value(metrics, "aggregator_learner_late_total", {{"learner", "l2"}}) ==
        0);
  metrics.SetLate("l2", true, /*found=*/true);
  metrics.SetLate("l2", true);
  CHECK(Value(metrics, "aggregator_learner_late", {{"learner", "l2"}}) == 1);
  CHECK(Value(metrics, "aggregator_learner_late_total", {{"learner", "l2"}}) ==
        1);
}

TEST_CASE(
    "Counters set from a total only go up; gauges take the figure as it is") {
  AggregatorMetrics metrics;
  metrics.SetTlsHandshakeFailures(3);
  metrics.SetTlsHandshakeFailures(2);  // a stale figure: no step back
  CHECK(Value(metrics, "aggregator_tls_handshake_failures_total", {}) == 3);
  metrics.SetTlsHandshakeFailures(7);
  CHECK(Value(metrics, "aggregator_tls_handshake_failures_total", {}) == 7);
  metrics.SetWorkerRestarts("sim", 0, 4);
  CHECK(Value(metrics, "aggregator_worker_restarts_total",
              {{"worker", "sim"}, {"index", "0"}}) == 4);
  metrics.SetInflight(100, 1000);
  metrics.SetInflight(40, 1000);
  CHECK(Value(metrics, "aggregator_learn_inflight_bytes", {}) == 40);
  CHECK(Value(metrics, "aggregator_max_inflight_bytes", {}) == 1000);
  metrics.SetStreamBuffered(10, 50);
  CHECK(Value(metrics, "aggregator_learn_stream_buffered_bytes",
              {{"at", "peak"}}) == 50);
  metrics.SetStandings({{"in", 2}, {"out", 1}});
  CHECK(Value(metrics, "aggregator_learners_standing", {{"standing", "out"}}) ==
        1);
}

TEST_CASE(
    "A learner source's series are labelled by its key, go when it goes, "
    "and start again with a new instance") {
  AggregatorMetrics metrics;
  auto value = [&](const std::string& name,
                   const std::string& source) -> std::optional<double> {
    for (const auto& family : metrics.collectable()->Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        for (const auto& label : metric.label) {
          if (label.name == "source" && label.value == source) {
            return family.type == prometheus::MetricType::Counter
                       ? metric.counter.value
                       : metric.gauge.value;
          }
        }
      }
    }
    return std::nullopt;
  };
  const std::string dns = "dns learners.test:22300";
  const std::string orchestrator = "orchestrator http://o:80 ns/a";
  metrics.SetSources({{"dns", dns, 1, 10, 2, 3, 0},
                      {"orchestrator", orchestrator, 2, 5, 0, 1, 1}});
  CHECK(value("aggregator_source_refreshes_total", dns) == 10);
  CHECK(value("aggregator_source_errors_total", dns) == 2);
  CHECK(value("aggregator_source_learners", dns) == 3);
  CHECK(value("aggregator_source_failed_reports_total", orchestrator) == 1);

  // The orchestrator source is removed (a reload): its series go.
  metrics.SetSources({{"dns", dns, 1, 12, 2, 2, 0}});
  CHECK(value("aggregator_source_refreshes_total", dns) == 12);
  CHECK(value("aggregator_source_learners", dns) == 2);
  for (const char* name :
       {"aggregator_source_refreshes_total", "aggregator_source_errors_total",
        "aggregator_source_learners",
        "aggregator_source_failed_reports_total"}) {
    INFO(name);
    CHECK_FALSE(value(name, orchestrator).has_value());
  }
  // The dns source removed and added again between two scrapes: a new
  // instance, its counters from 0 (a reset Prometheus sees), not stuck at 12.
  metrics.SetSources({{"dns", dns, 3, 4, 1, 2, 0}});
  CHECK(value("aggregator_source_refreshes_total", dns) == 4);
  CHECK(value("aggregator_source_errors_total", dns) == 1);
}

TEST_CASE(
    "Collectors run before each scrape; ClearCollectors waits for a scrape "
    "running them, and later scrapes run none") {
  AggregatorMetrics metrics;
  std::mutex mu;
  std::condition_variable changed;
  bool in_collector = false;
  bool release = false;
  int runs = 0;
  metrics.AddCollector([&] {
    std::unique_lock<std::mutex> lock(mu);
    ++runs;
    in_collector = true;
    changed.notify_all();
    changed.wait_for(lock, std::chrono::seconds(15), [&] { return release; });
    in_collector = false;
  });
  auto scrape = std::async(std::launch::async,
                           [&metrics] { metrics.collectable()->Collect(); });
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(15),
                             [&] { return in_collector; }));
  }
  std::atomic<bool> cleared{false};
  auto clearing = std::async(std::launch::async, [&] {
    metrics.ClearCollectors();
    cleared = true;
  });
  // Still in the collector: Clear has not returned.
  CHECK(clearing.wait_for(std::chrono::milliseconds(50)) ==
        std::future_status::timeout);
  CHECK_FALSE(cleared);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    changed.notify_all();
  }
  REQUIRE(clearing.wait_for(std::chrono::seconds(15)) ==
          std::future_status::ready);
  REQUIRE(scrape.wait_for(std::chrono::seconds(15)) ==
          std::future_status::ready);
  metrics.collectable()->Collect();
  std::lock_guard<std::mutex> lock(mu);
  CHECK(runs == 1);
}

}  // namespace
}  // namespace aggregator
