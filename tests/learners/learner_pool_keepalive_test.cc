// A learner whose host hangs is noticed by connect.keepalive's pings, not
// when a call's deadline passes (issue 13); and the pings are accepted by a
// learner on gRPC's default ping policy.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <future>

#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
using aggregator::AggregatorConfig;
using aggregator::LearnerState;
namespace pb = aggregator::v1;

namespace {

constexpr milliseconds kKeepaliveTime(1000);
constexpr milliseconds kKeepaliveTimeout(1000);
// The documented bound (README, "Keepalive"): keepalive.time + .timeout, give
// or take gRPC's timers. What must show is that the pings notice the hang well
// before call_timeout (60 s): 8 s of slack for a loaded 2-core machine under
// TSan; the measured time is printed.
constexpr milliseconds kBound = kKeepaliveTime + kKeepaliveTimeout;
constexpr milliseconds kSlack(8000);

AggregatorConfig KeepaliveConfig(const std::string& address) {
  AggregatorConfig config = FastConfig({Endpoint("hung", address)}, 1);
  config.connect.keepalive_time = kKeepaliveTime;
  config.connect.keepalive_timeout = kKeepaliveTimeout;
  // Far beyond the bound: what notices the hang must be the pings.
  config.service.call_timeout = milliseconds(60000);
  config.connect.attempt_timeout = milliseconds(60000);
  return config;
}

}  // namespace

TEST_CASE(
    "A learner whose process is stopped leaves the ready set within "
    "keepalive.time + keepalive.timeout, and a call in flight fails then") {
  auto learner =
      Spawn({"tools/examples/example_learner", "--listen", "127.0.0.1:0"});
  const std::string address =
      LastWord(WaitForLine(*learner, "example_learner listening on"));
  auto aggregator = StartReadyAggregator(KeepaliveConfig(address));
  auto stub = LearnerStub(aggregator->address());
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());

  REQUIRE(learner->Signal(SIGSTOP).ok());
  const auto stopped = Clock::now();
  REQUIRE(StoppedWithin(learner->pid(), kLongWait));
  // A Learn sent to the stopped learner: only the pings can end it early.
  auto learn = std::async(std::launch::async, [&] {
    pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()), "s");
    batch.set_plan_id(demand.plan_id());
    pb::LearnReply reply;
    grpc::Status status =
        stub->Learn(Deadline(milliseconds(60000)).get(), batch, &reply);
    return std::make_pair(status, Clock::now());
  });
  REQUIRE(Eventually(
      [&] { return StateOf(*aggregator, "hung") != LearnerState::kReady; },
      kBound + kSlack));
  const double noticed = Seconds(Clock::now() - stopped);
  REQUIRE(learn.wait_for(kBound + kSlack) == std::future_status::ready);
  const auto [status, failed_at] = learn.get();
  const double call_failed = Seconds(failed_at - stopped);
  std::printf(
      "stopped learner noticed after %.2f s, its Learn failed after %.2f s "
      "(keepalive %lld ms + %lld ms; call_timeout 60 s)\n",
      noticed, call_failed, static_cast<long long>(kKeepaliveTime.count()),
      static_cast<long long>(kKeepaliveTimeout.count()));
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(), Catch::Contains("hung (" + address + ")"));
  CHECK(noticed < Seconds(kBound + kSlack));
  CHECK(call_failed < Seconds(kBound + kSlack));

  // Continued, it is ready again: the pool reconnects as to any lost learner.
  REQUIRE(learner->Signal(SIGCONT).ok());
  CHECK(Eventually(
      [&] { return StateOf(*aggregator, "hung") == LearnerState::kReady; },
      milliseconds(15000)));
}

TEST_CASE(
    "An idle learner on gRPC's default ping policy keeps its connection: the "
    "resource refreshes between the pings satisfy it") {
  // No keepalive arguments: gRPC's defaults (a ping without calls is allowed
  // once in 2 hours, with calls once in 5 minutes; 2 strikes).
  aggregator::ExampleLearner service({});
  std::string address;
  std::unique_ptr<grpc::Server> server = ServeOnLoopback(&service, &address);
  AggregatorConfig config = KeepaliveConfig(address);
  config.connect.resource_refresh = milliseconds(400);
  auto aggregator = StartReadyAggregator(config);
  const uint64_t epoch = aggregator->pool().Ready().at(0).epoch;

  // Six pings' time: a connection closed for "too many pings" would reconnect
  // under a new epoch (or not be ready).
  const auto until = Clock::now() + 6 * kKeepaliveTime;
  bool same = true;
  while (same && Clock::now() < until) {
    const auto ready = aggregator->pool().Ready();
    same = ready.size() == 1 && ready[0].epoch == epoch;
    std::this_thread::sleep_for(milliseconds(20));
  }
  CHECK(same);
  service.Stop();
  server->Shutdown(std::chrono::system_clock::now());
}
