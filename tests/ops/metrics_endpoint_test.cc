// The daemon's metrics served by the real endpoint (prometheus-cpp's Exposer)
// on loopback, scraped over HTTP and checked with promtool.
#include "lib/ops/metrics_endpoint.h"

#include <httplib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "lib/ops/aggregator_metrics.h"
#include "tests/testing/process_helpers.h"

using aggregator::AggregatorMetrics;
using aggregator::HostPort;
using aggregator::MetricsEndpoint;
using namespace aggregator::testing;

namespace {

std::unique_ptr<MetricsEndpoint> StartEndpoint(
    const AggregatorMetrics& metrics) {
  auto endpoint = MetricsEndpoint::Start(HostPort::Tcp("127.0.0.1", 0),
                                         metrics.collectable());
  INFO(endpoint.status().ToString());
  REQUIRE(endpoint.ok());
  return std::move(*endpoint);
}

std::string Scrape(const MetricsEndpoint& endpoint) {
  httplib::Client client("127.0.0.1", endpoint.port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto response = client.Get("/metrics");
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK_THAT(response->get_header_value("Content-Type"),
             Catch::StartsWith("text/plain"));
  return response->body;
}

}  // namespace

TEST_CASE("The metrics endpoint serves every metric and passes promtool") {
  AggregatorMetrics metrics;
  metrics.Served("Learn", grpc::StatusCode::OK, 0.002);
  metrics.Served("GetData", grpc::StatusCode::UNAVAILABLE, 0.0001);
  metrics.LearnerCall("learner0", "Learn", grpc::StatusCode::OK, 0.001);
  metrics.Forwarded("learner0", 4096);
  metrics.SetLearners("ready", 2);
  metrics.SetWorkerRestarts("learner", 0, 3);
  metrics.Reloaded(false);
  auto endpoint = StartEndpoint(metrics);
  const std::string body = Scrape(*endpoint);
  CHECK_THAT(
      body,
      Catch::Contains(
          "aggregator_requests_total{code=\"UNAVAILABLE\",rpc=\"GetData\"} 1"));
  CHECK_THAT(body, Catch::Contains("aggregator_request_duration_seconds_bucket{"
                                   "rpc=\"Learn\",le=\"0.0025\"} 1"));
  CHECK_THAT(body, Catch::Contains("aggregator_learner_calls_total{code=\"OK\","
                                   "learner=\"learner0\",rpc=\"Learn\"} 1"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_learner_call_duration_seconds_"
                             "count{learner=\"learner0\",rpc=\"Learn\"} 1"));
  CHECK_THAT(
      body, Catch::Contains(
                "aggregator_forwarded_bytes_total{learner=\"learner0\"} 4096"));
  CHECK_THAT(body, Catch::Contains("aggregator_learners{state=\"ready\"} 2"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_worker_restarts_total{index=\"0\","
                             "worker=\"learner\"} 3"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_reloads_total{result=\"failed\"} 1"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_reloads_total{result=\"ok\"} 0"));
  CHECK_THAT(body, Catch::Contains("aggregator_build_info{version="));

  const std::string path = WriteFile(TempDir() + "/scrape.txt", body);
  auto promtool =
      Spawn({"/bin/sh", "-c", "promtool check metrics < '" + path + "' 2>&1"});
  const std::string out = ReadAll(*promtool, false);
  auto exit = promtool->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  INFO(out);
  CHECK(exit->ok());
}

TEST_CASE("Collectors set their figures before each scrape") {
  AggregatorMetrics metrics;
  int scrapes = 0;
  metrics.AddCollector([&] { metrics.SetLearners("ready", ++scrapes); });
  // Restarts are a counter: a collector reports the total, the counter adds.
  metrics.AddCollector(
      [&] { metrics.SetWorkerRestarts("w", 1, scrapes == 1 ? 2 : 5); });
  auto endpoint = StartEndpoint(metrics);
  std::string body = Scrape(*endpoint);
  CHECK_THAT(body, Catch::Contains("aggregator_learners{state=\"ready\"} 1\n"));
  CHECK_THAT(
      body,
      Catch::Contains(
          "aggregator_worker_restarts_total{index=\"1\",worker=\"w\"} 2\n"));
  body = Scrape(*endpoint);
  CHECK_THAT(body, Catch::Contains("aggregator_learners{state=\"ready\"} 2\n"));
  CHECK_THAT(
      body,
      Catch::Contains(
          "aggregator_worker_restarts_total{index=\"1\",worker=\"w\"} 5\n"));
}

TEST_CASE("A metrics address in use is refused, naming it") {
  AggregatorMetrics metrics;
  auto first = StartEndpoint(metrics);
  const HostPort taken = HostPort::Tcp("127.0.0.1", first->port());
  auto second = MetricsEndpoint::Start(taken, metrics.collectable());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  // Named, and who holds it (this test).
  CHECK_THAT(
      std::string(second.status().message()),
      Catch::Contains(taken.ToString()) &&
          Catch::Contains("already in use by pid " + std::to_string(getpid())));
}

TEST_CASE(
    "The metrics endpoint stops at once even when stopped right after start") {
  // Regression: an HTTP server stopped before its listen loop ran stayed
  // blocked in accept(), and the daemon hung on SIGTERM. Run in a thread we
  // can abandon, so a hang fails the test instead of hanging it.
  auto metrics = std::make_shared<AggregatorMetrics>();
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> finished = done->get_future();
  std::thread([done, metrics] {
    for (int i = 0; i < 50; ++i) {
      auto endpoint = MetricsEndpoint::Start(HostPort::Tcp("127.0.0.1", 0),
                                             metrics->collectable());
      if (!endpoint.ok()) {
        done->set_value(false);
        return;
      }
      (*endpoint)->Stop(std::chrono::steady_clock::now() +
                        std::chrono::seconds(5));
    }
    done->set_value(true);
  }).detach();
  REQUIRE(finished.wait_for(std::chrono::seconds(30)) ==
          std::future_status::ready);
  CHECK(finished.get());
}

TEST_CASE(
    "Per-learner readiness goes with its learner; a failed reload marks the "
    "configuration stale until one succeeds") {
  AggregatorMetrics metrics;
  auto endpoint = StartEndpoint(metrics);
  CHECK_THAT(Scrape(*endpoint),
             Catch::Contains("aggregator_config_last_reload_successful 1"));
  metrics.SetLearnerReady({{"a", true}, {"b", false}});
  metrics.SetMinLearners(2);
  metrics.SetInflight(1024, 4096);
  std::string body = Scrape(*endpoint);
  CHECK_THAT(body,
             Catch::Contains("aggregator_learner_ready{learner=\"a\"} 1"));
  CHECK_THAT(body,
             Catch::Contains("aggregator_learner_ready{learner=\"b\"} 0"));
  CHECK_THAT(body, Catch::Contains("aggregator_min_learners 2"));
  CHECK_THAT(body, Catch::Contains("aggregator_learn_inflight_bytes 1024"));
  CHECK_THAT(body, Catch::Contains("aggregator_max_inflight_bytes 4096"));

  metrics.SetLearnerReady({{"a", true}});
  metrics.Reloaded(false);
  body = Scrape(*endpoint);
  CHECK_THAT(body, !Catch::Contains("learner=\"b\""));
  CHECK_THAT(body,
             Catch::Contains("aggregator_config_last_reload_successful 0"));
  metrics.Reloaded(true);
  CHECK_THAT(Scrape(*endpoint),
             Catch::Contains("aggregator_config_last_reload_successful 1"));
}

TEST_CASE(
    "GET / serves the page with a policy that refuses scripts; /metrics is "
    "still served; other methods and paths are refused") {
  AggregatorMetrics metrics;
  int renders = 0;
  auto endpoint = MetricsEndpoint::Start(
      HostPort::Tcp("127.0.0.1", 0), metrics.collectable(), [&renders] {
        ++renders;
        return std::string("<!DOCTYPE html><title>status</title>");
      });
  REQUIRE(endpoint.ok());
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  client.set_read_timeout(5);
  auto page = client.Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body == "<!DOCTYPE html><title>status</title>");
  CHECK_THAT(page->get_header_value("Content-Type"),
             Catch::StartsWith("text/html"));
  CHECK_THAT(page->get_header_value("Content-Security-Policy"),
             Catch::Contains("default-src 'none'"));
  CHECK(page->get_header_value("X-Content-Type-Options") == "nosniff");
  auto head = client.Head("/");
  REQUIRE(head);
  CHECK(head->status == 200);
  auto post = client.Post("/", "x", "text/plain");
  REQUIRE(post);
  CHECK(post->status == 405);
  auto other = client.Get("/other");
  REQUIRE(other);
  CHECK(other->status == 404);
  CHECK(renders == 2);
  CHECK_THAT(Scrape(**endpoint), Catch::Contains("aggregator_build_info"));
  CHECK((*endpoint)->Stop(std::chrono::steady_clock::now() +
                          std::chrono::seconds(5)));
  CHECK(renders == 2);
}

TEST_CASE("Without a page, GET / is not found") {
  AggregatorMetrics metrics;
  auto endpoint = StartEndpoint(metrics);
  httplib::Client client("127.0.0.1", endpoint->port());
  client.set_read_timeout(5);
  auto page = client.Get("/");
  REQUIRE(page);
  CHECK(page->status == 404);
}
