// Learner workers with `channel: true` (issue 12): the daemon runs them on the
// worker channel, and a Python learner (learner_aggregator.serve) announces its
// port there, so it joins the pool at once instead of after a refused first
// connection and connect.backoff.initial.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
using aggregator::AggregatorConfig;
using aggregator::WorkerSpec;

namespace {

// Long enough that a learner found by retrying cannot look like one that
// announced itself, even on a loaded machine (where a sanitized daemon took
// 3 s to start the Python learner).
constexpr milliseconds kBackoffInitial(5000);

AggregatorConfig PythonLearnerWorker(bool channel) {
  AggregatorConfig config = FastConfig({}, 1);
  config.connect.backoff =
      aggregator::BackoffOptions{kBackoffInitial, 1.6, 0.0, kBackoffInitial};
  config.connect.timeout = milliseconds(30000);
  WorkerSpec worker;
  worker.name = "py";
  worker.command = {"tools/python/run",
                    "tools/python/examples/example_learner.py", "--listen",
                    "127.0.0.1:{port}"};
  worker.port_base = ClosedPort();
  worker.learner = true;
  worker.channel = channel;
  worker.stop_timeout = milliseconds(5000);
  config.workers = {worker};
  return config;
}

// Seconds from start to the first ready learner.
double StartToReady(bool channel) {
  const auto started = Clock::now();
  auto server = StartAggregator(PythonLearnerWorker(channel));
  REQUIRE(server->WaitUntilReady(Clock::now() + std::chrono::seconds(20)));
  return Seconds(Clock::now() - started);
}

}  // namespace

TEST_CASE(
    "A channel learner worker is ready as soon as it listens, not after a "
    "backoff") {
  const double with_channel = StartToReady(true);
  const double without = StartToReady(false);
  std::printf(
      "start to ready: %.3f s with channel: true, %.3f s without "
      "(connect.backoff.initial %.1f s)\n",
      with_channel, without, kBackoffInitial.count() / 1000.0);
  // Without it the first connection is refused (Python is still starting)
  // and the next comes a backoff later.
  CHECK(without >= kBackoffInitial.count() / 1000.0);
  CHECK(with_channel < kBackoffInitial.count() / 1000.0);
}

TEST_CASE(
    "A channel learner worker that is killed leaves the pool and rejoins") {
  auto server = StartAggregator(PythonLearnerWorker(true));
  REQUIRE(server->WaitUntilReady(Clock::now() + std::chrono::seconds(20)));
  REQUIRE(server->pool().size() == 1);
  int pid = 0;
  for (const auto& worker : server->workers().Status()) pid = worker.pid;
  REQUIRE(pid > 0);
  // The guard's child is the learner; killing the guard's whole group is
  // what a crash of the worker looks like to the daemon.
  REQUIRE(kill(-pid, SIGKILL) == 0);
  REQUIRE(Eventually([&] { return server->pool().size() == 0; },
                     milliseconds(10000)));
  // Restarted after its backoff (1 s by default), it announces itself again.
  REQUIRE(Eventually([&] { return server->pool().ReadyCount() == 1; },
                     milliseconds(20000)));
}
