#include "lib/base/backoff.h"

#include <catch2/catch.hpp>

using aggregator::Backoff;
using aggregator::BackoffOptions;
using std::chrono::milliseconds;

TEST_CASE("Without jitter the delays grow by the multiplier up to max") {
  BackoffOptions options{milliseconds(1000), 1.6, 0.0, milliseconds(5000)};
  Backoff backoff(options, [] { return 0.5; });
  CHECK(backoff.Next() == milliseconds(1000));
  CHECK(backoff.Next() == milliseconds(1600));
  CHECK(backoff.Next() == milliseconds(2560));
  CHECK(backoff.Next() == milliseconds(4096));
  CHECK(backoff.Next() == milliseconds(5000));
  CHECK(backoff.Next() == milliseconds(5000));
  backoff.Reset();
  CHECK(backoff.Next() == milliseconds(1000));
}

TEST_CASE("Jitter spreads each delay by +-jitter of itself") {
  BackoffOptions options{milliseconds(1000), 2.0, 0.2, milliseconds(120000)};
  double next_random = 0.0;
  Backoff backoff(options, [&] { return next_random; });
  CHECK(backoff.Next() == milliseconds(800));  // 1000 - 20 %
  next_random = 0.999999;
  CHECK(backoff.Next() == milliseconds(2400));  // 2000 + 20 %
  next_random = 0.5;
  CHECK(backoff.Next() == milliseconds(4000));
}

TEST_CASE("The real random source stays within the jitter band") {
  BackoffOptions options{milliseconds(1000), 1.6, 0.2, milliseconds(120000)};
  Backoff backoff(options, aggregator::MakeUniformRandom());
  bool varied = false;
  auto first = backoff.Next();
  CHECK(first >= milliseconds(800));
  CHECK(first <= milliseconds(1200));
  for (int i = 0; i < 20; ++i) {
    backoff.Reset();
    auto d = backoff.Next();
    CHECK(d >= milliseconds(800));
    CHECK(d <= milliseconds(1200));
    varied = varied || d != first;
  }
  CHECK(varied);
}
