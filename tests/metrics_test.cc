#include "lib/ops/metrics.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "lib/ops/aggregator_metrics.h"
#include "lib/ops/metrics_http.h"
#include "tests/process_helpers.h"

using aggregator::MetricsRegistry;
using namespace aggregator::testing;

TEST_CASE("Counters, gauges and labels render in the text format") {
  MetricsRegistry registry;
  auto* calls = registry.AddCounter("x_calls_total", "Calls.", {"rpc", "code"});
  calls->WithLabels({"Learn", "OK"})->Increment();
  calls->WithLabels({"Learn", "OK"})->Increment(2);
  calls->WithLabels({"Get\"Data\\\n", "OK"})->Increment();
  registry.AddGauge("x_ready", "Ready.")->WithLabels({})->Set(3);
  const std::string text = registry.Render();
  CHECK_THAT(text, Catch::Contains("# HELP x_calls_total Calls.\n"
                                   "# TYPE x_calls_total counter\n"));
  CHECK_THAT(text,
             Catch::Contains("x_calls_total{rpc=\"Learn\",code=\"OK\"} 3\n"));
  CHECK_THAT(text,
             Catch::Contains(
                 "x_calls_total{rpc=\"Get\\\"Data\\\\\\n\",code=\"OK\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE x_ready gauge\nx_ready 3\n"));
}

TEST_CASE("Histogram buckets are cumulative with sum and count") {
  MetricsRegistry registry;
  static const std::vector<double> bounds = {0.1, 1};
  auto* latency =
      registry.AddHistogram("x_seconds", "Latency.", {"rpc"}, &bounds);
  auto* series = latency->WithLabels({"Learn"});
  series->Observe(0.05);
  series->Observe(0.5);
  series->Observe(0.5);
  series->Observe(7);
  const std::string text = registry.Render();
  CHECK_THAT(text,
             Catch::Contains("x_seconds_bucket{rpc=\"Learn\",le=\"0.1\"} 1\n"
                             "x_seconds_bucket{rpc=\"Learn\",le=\"1\"} 3\n"
                             "x_seconds_bucket{rpc=\"Learn\",le=\"+Inf\"} 4\n"
                             "x_seconds_sum{rpc=\"Learn\"} 8.05"));
  CHECK_THAT(text, Catch::Contains("x_seconds_count{rpc=\"Learn\"} 4\n"));
}

TEST_CASE("Collectors run before each render") {
  MetricsRegistry registry;
  auto* gauge = registry.AddGauge("x_now", "Now.")->WithLabels({});
  int scrapes = 0;
  registry.AddCollector([&] { gauge->Set(++scrapes); });
  CHECK_THAT(registry.Render(), Catch::Contains("x_now 1\n"));
  CHECK_THAT(registry.Render(), Catch::Contains("x_now 2\n"));
}

TEST_CASE("The metrics endpoint serves the registry and passes promtool") {
  aggregator::AggregatorMetrics metrics;
  metrics.Served("Learn", grpc::StatusCode::OK, 0.002);
  metrics.Served("GetData", grpc::StatusCode::UNAVAILABLE, 0.0001);
  metrics.LearnerCall("learner0", "Learn", grpc::StatusCode::OK, 0.001);
  metrics.Forwarded("learner0", 4096);
  metrics.SetLearners("ready", 2);
  metrics.SetWorkerRestarts("learner", 0, 3);
  metrics.Reloaded(false);
  auto server = aggregator::MetricsHttpServer::Start(
      aggregator::HostPort::Tcp("127.0.0.1", 0), &metrics.registry());
  REQUIRE(server.ok());
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto response = client.Get("/metrics");
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK_THAT(response->get_header_value("Content-Type"),
             Catch::Contains("version=0.0.4"));
  const std::string& body = response->body;
  CHECK_THAT(
      body,
      Catch::Contains(
          "aggregator_requests_total{rpc=\"GetData\",code=\"UNAVAILABLE\"} 1"));
  CHECK_THAT(
      body, Catch::Contains(
                "aggregator_forwarded_bytes_total{learner=\"learner0\"} 4096"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_reloads_total{result=\"failed\"} 1"));
  CHECK_THAT(body, Catch::Contains("aggregator_build_info{version="));

  const std::string path = WriteFile(TempDir() + "/scrape.txt", body);
  auto promtool =
      Spawn({"/bin/sh", "-c", "promtool check metrics < '" + path + "' 2>&1"});
  const std::string out = ReadAll(*promtool, false);
  auto exit = promtool->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  INFO(out);
  CHECK(exit->ok());
  (*server)->Stop();
}

TEST_CASE(
    "The metrics endpoint stops at once even when stopped right after start") {
  // Regression: stopping before httplib's listen loop ran left it blocked in
  // accept(), and the daemon hung on SIGTERM. Run in a thread we can abandon,
  // so a hang fails the test instead of hanging it.
  MetricsRegistry registry;
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> finished = done->get_future();
  std::thread([done, &registry] {
    for (int i = 0; i < 200; ++i) {
      auto server = aggregator::MetricsHttpServer::Start(
          aggregator::HostPort::Tcp("127.0.0.1", 0), &registry);
      if (!server.ok()) {
        done->set_value(false);
        return;
      }
      (*server)->Stop();
    }
    done->set_value(true);
  }).detach();
  REQUIRE(finished.wait_for(std::chrono::seconds(30)) ==
          std::future_status::ready);
  CHECK(finished.get());
}
