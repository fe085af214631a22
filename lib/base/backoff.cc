#include "lib/base/backoff.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <utility>

namespace aggregator {

UniformRandom MakeUniformRandom() {
  auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [engine] {
    return std::uniform_real_distribution<double>(0.0, 1.0)(*engine);
  };
}

std::chrono::milliseconds BackoffDelay(const BackoffOptions& options, int n,
                                       double random01) {
  const double max_ms = static_cast<double>(options.max.count());
  const double base_ms =
      std::min(static_cast<double>(options.initial.count()) *
                   std::pow(options.multiplier, std::max(0, n)),
               max_ms);  // pow may overflow to inf: min caps it
  const double spread = options.jitter * base_ms;
  const double delay = base_ms - spread + 2 * spread * random01;
  return std::chrono::milliseconds(std::llround(std::max(0.0, delay)));
}

Backoff::Backoff(const BackoffOptions& options, UniformRandom random)
    : options_(options), random_(std::move(random)) {}

std::chrono::milliseconds Backoff::Next() {
  const double random01 = options_.jitter > 0 ? random_() : 0.5;
  const std::chrono::milliseconds delay =
      BackoffDelay(options_, failures_, random01);
  // Past max, n only matters as "still failing": keep it from overflowing.
  if (failures_ < 1000) ++failures_;
  return delay;
}

void Backoff::Reset() { failures_ = 0; }

}  // namespace aggregator
