// StragglerWatch's arithmetic: streaks, flags once per episode, percentiles.
#include "lib/service/straggler_watch.h"

#include <catch2/catch.hpp>

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

}  // namespace
}  // namespace aggregator
