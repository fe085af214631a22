// StragglerWatch's arithmetic: streaks, flags once per episode, percentiles;
// and the watch fed by fan-outs timed on a FakeClock, whose calls answer when
// the test says (no network, no sleeps).
#include "lib/service/straggler_watch.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

#include "lib/base/clock.h"
#include "lib/learners/fan_out.h"

namespace aggregator {
namespace {

std::vector<std::pair<std::string, double>> Step(double a, double b, double c) {
  return {{"a", a}, {"b", b}, {"c", c}};
}

TEST_CASE(
    "A learner slower than factor x the others' median for window steps "
    "is flagged once, and unflagged on its first normal step") {
  StragglerWatch watch;
  StragglerConfig config;
  config.factor = 3;
  config.window = 3;
  CHECK(watch.Observe(config, Step(0.010, 0.011, 0.050)).empty());
  CHECK(watch.Observe(config, Step(0.010, 0.011, 0.050)).empty());
  auto flagged = watch.Observe(config, Step(0.010, 0.010, 0.050));
  REQUIRE(flagged.size() == 1);
  CHECK(flagged[0].id == "c");
  CHECK(flagged[0].flagged);
  CHECK(flagged[0].ratio == Approx(5.0));
  // Still slow: no second report.
  CHECK(watch.Observe(config, Step(0.010, 0.010, 0.050)).empty());
  CHECK(watch.Learners()["c"].flagged);
  auto recovered = watch.Observe(config, Step(0.010, 0.010, 0.012));
  REQUIRE(recovered.size() == 1);
  CHECK_FALSE(recovered[0].flagged);
  // A streak broken by one normal step starts again.
  watch.Observe(config, Step(0.010, 0.010, 0.050));
  watch.Observe(config, Step(0.010, 0.010, 0.050));
  watch.Observe(config, Step(0.010, 0.010, 0.010));
  CHECK(watch.Observe(config, Step(0.010, 0.010, 0.050)).empty());
  // One learner alone has nobody to be slower than.
  CHECK(watch.Observe(config, {{"a", 9.0}}).empty());
}

TEST_CASE("Each learner's p50 and p99 cover its last 256 Learns") {
  StragglerWatch watch;
  StragglerConfig config;
  for (int i = 1; i <= 100; ++i) {
    watch.Observe(config, {{"a", i / 1000.0}, {"b", 0.001}});
  }
  StragglerWatch::Learner a = watch.Learners()["a"];
  CHECK(a.p50_seconds == Approx(0.050));
  CHECK(a.p99_seconds == Approx(0.099));
  CHECK(a.ewma_seconds > 0.080);
  // Old steps fall out of the window.
  for (int i = 0; i < 300; ++i) watch.Observe(config, {{"a", 0.002}});
  a = watch.Learners()["a"];
  CHECK(a.p50_seconds == Approx(0.002));
  CHECK(a.p99_seconds == Approx(0.002));
}

TEST_CASE("Reset forgets a learner's streak and flag") {
  StragglerWatch watch;
  StragglerConfig config;
  config.window = 1;
  REQUIRE(watch.Observe(config, Step(0.01, 0.01, 0.1)).size() == 1);
  watch.Reset("c");
  CHECK_FALSE(watch.Learners()["c"].flagged);
  CHECK(watch.Observe(config, Step(0.01, 0.01, 0.1)).size() == 1);
}

// Calls to in-process learners: each waits in `Pending()` until the test
// answers it.
std::vector<std::function<void(grpc::Status)>>& Pending() {
  static auto* pending = new std::vector<std::function<void(grpc::Status)>>();
  return *pending;
}

void StartPending(const LearnerHandle&, grpc::ClientContext*, const int*, int*,
                  std::function<void(grpc::Status)> done) {
  Pending().push_back(std::move(done));
}

// One Learn step over learners a, b, c on `clock`: learner i answers
// `ms[i]` ms after the step started (failing where `fails` says), the clock
// moving to each answer. Returns what the watch made of the step.
std::vector<StragglerWatch::Change> TimedStep(
    FakeClock& clock, StragglerWatch& watch, const StragglerConfig& config,
    std::vector<int> ms, std::vector<bool> fails = {false, false, false}) {
  std::vector<LearnerHandle> learners(3);
  learners[0].id = "a";
  learners[1].id = "b";
  learners[2].id = "c";
  std::vector<StragglerWatch::Change> changes;
  bool done = false;
  Pending().clear();
  FanOut<int, int>(
      nullptr, std::chrono::hours(1), "", learners, {0}, &StartPending,
      [&](LearnerCalls<int, int>& calls) {
        changes = watch.Observe(config, StragglerWatch::Times(calls));
        done = true;
      },
      nullptr, &clock);
  REQUIRE(Pending().size() == 3);
  std::vector<size_t> order = {0, 1, 2};
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return ms[x] < ms[y]; });
  int elapsed = 0;
  for (const size_t i : order) {
    clock.Advance(std::chrono::milliseconds(ms[i] - elapsed));
    elapsed = ms[i];
    Pending()[i](fails[i] ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")
                          : grpc::Status::OK);
  }
  REQUIRE(done);
  return changes;
}

TEST_CASE(
    "On a FakeClock, a learner whose Learns answer over factor x the others' "
    "median for window steps is flagged, and unflagged when it answers in "
    "time again; a failed step changes nothing") {
  FakeClock clock;
  StragglerWatch watch;
  StragglerConfig config;
  config.factor = 3;
  config.window = 2;
  CHECK(TimedStep(clock, watch, config, {10, 12, 40}).empty());
  const auto flagged = TimedStep(clock, watch, config, {10, 12, 40});
  REQUIRE(flagged.size() == 1);
  CHECK(flagged[0].id == "c");
  CHECK(flagged[0].flagged);
  CHECK(flagged[0].ratio == Approx(40.0 / 11));
  CHECK(watch.Learners()["c"].flagged);
  CHECK(watch.Learners()["c"].ewma_seconds == Approx(0.040));
  // A step where a learner failed is not a slow step, nor a normal one.
  CHECK(TimedStep(clock, watch, config, {10, 12, 5}, {false, false, true})
            .empty());
  CHECK(watch.Learners()["c"].flagged);
  // Twice the others' median: under factor, in time again.
  const auto recovered = TimedStep(clock, watch, config, {10, 12, 22});
  REQUIRE(recovered.size() == 1);
  CHECK(recovered[0].id == "c");
  CHECK_FALSE(recovered[0].flagged);
  CHECK(recovered[0].ratio == Approx(2.0));
  CHECK_FALSE(watch.Learners()["c"].flagged);
}

}  // namespace
}  // namespace aggregator
