// LearnerPool's connection timing on a FakeClock: backoff delays,
// connect.timeout and readiness move only when the test moves the clock. The
// delays are hours, so a pool that read the real clock could not pass within
// the waits' real deadlines; nothing sleeps. The learner is a real one on a
// loopback port that the test opens and closes.
#include "lib/learners/learner_pool.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "lib/base/clock.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"

namespace aggregator {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using testing::Endpoint;
using testing::Eventually;
using testing::StartLearner;

// Real-time bounds for what the connector does at once (refused connections
// on loopback, a probe), with room for a loaded machine under TSan.
constexpr std::chrono::seconds kRealWait(10);

ConnectConfig HourlyConnect() {
  ConnectConfig connect;
  connect.timeout = minutes(30);
  connect.attempt_timeout = std::chrono::seconds(10);
  connect.backoff = BackoffOptions{hours(1), 2.0, 0.0, hours(4)};
  connect.resource_refresh = hours(10);
  return connect;
}

struct PoolOnFakeClock {
  FakeClock clock;
  std::unique_ptr<LearnerPool> pool;

  PoolOnFakeClock() {
    LearnerPoolHooks hooks;
    hooks.clock = &clock;
    pool = std::make_unique<LearnerPool>(HourlyConnect(), int64_t{1} << 20,
                                         std::move(hooks));
  }
  LearnerSnapshot Only() const {
    const std::vector<LearnerSnapshot> status = pool->Status();
    REQUIRE(status.size() == 1);
    return status[0];
  }
  // Waits (in real time) until the learner's last error ends its attempt `n`.
  bool FailedAttempt(int n) const {
    const std::string tail = "(attempt " + std::to_string(n) + ")";
    return Eventually(
        [&] {
          const std::string error = Only().last_error;
          return error.size() >= tail.size() &&
                 error.compare(error.size() - tail.size(), tail.size(), tail) ==
                     0;
        },
        kRealWait);
  }
  bool ReadyNow() const {
    return pool->WaitForReady(1, std::chrono::steady_clock::now() + kRealWait);
  }
};

TEST_CASE(
    "A refused learner is marked failed when connect.timeout passes on the "
    "pool's clock, tried again when its backoff delay has, and ready then") {
  PoolOnFakeClock fixture;
  const std::string address =
      "127.0.0.1:" + std::to_string(testing::ClosedPort());
  fixture.pool->SetLearners({Endpoint("l0", address)});
  REQUIRE(fixture.FailedAttempt(1));
  CHECK(fixture.Only().state == LearnerState::kConnecting);
  CHECK_THAT(fixture.Only().last_error,
             Catch::StartsWith("connection failed: "));

  // connect.timeout (30 min) passes: failed. The retry is an hour off, and
  // the same look at the clock that failed it found it not due.
  fixture.clock.Advance(minutes(30));
  REQUIRE(
      Eventually([&] { return fixture.Only().state == LearnerState::kFailed; },
                 kRealWait));
  CHECK(fixture.FailedAttempt(1));

  // The learner comes up; the pool finds it when the retry is due.
  auto learner = StartLearner({}, address);
  fixture.clock.Advance(minutes(30));
  REQUIRE(fixture.ReadyNow());
  CHECK(fixture.Only().state == LearnerState::kReady);
  CHECK(fixture.Only().last_error.empty());
}

TEST_CASE(
    "A learner whose connection is lost is tried again at once, then after "
    "each backoff delay on the pool's clock, doubling; ready when it is back") {
  PoolOnFakeClock fixture;
  const std::string address =
      "127.0.0.1:" + std::to_string(testing::ClosedPort());
  auto learner = StartLearner({}, address);
  fixture.pool->SetLearners({Endpoint("l0", address)});
  REQUIRE(fixture.ReadyNow());

  learner.reset();  // gone: the pool sees the connection close
  REQUIRE(fixture.FailedAttempt(1));
  CHECK(fixture.Only().state == LearnerState::kConnecting);
  fixture.clock.Advance(hours(1));
  REQUIRE(fixture.FailedAttempt(2));
  fixture.clock.Advance(hours(2));
  REQUIRE(fixture.FailedAttempt(3));

  learner = StartLearner({}, address);
  fixture.clock.Advance(hours(4));
  REQUIRE(fixture.ReadyNow());
  CHECK(fixture.Only().last_error.empty());
}

}  // namespace
}  // namespace aggregator
