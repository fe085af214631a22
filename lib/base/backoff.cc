#include "lib/base/backoff.h"

#include <algorithm>
#include <random>
#include <utility>

namespace aggregator {

UniformRandom MakeUniformRandom() {
  auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [engine] {
    return std::uniform_real_distribution<double>(0.0, 1.0)(*engine);
  };
}

Backoff::Backoff(const BackoffOptions& options, UniformRandom random)
    : options_(options), random_(std::move(random)) {}

std::chrono::milliseconds Backoff::Next() {
  const double max_ms = static_cast<double>(options_.max.count());
  current_ms_ = current_ms_ == 0
                    ? static_cast<double>(options_.initial.count())
                    : std::min(current_ms_ * options_.multiplier, max_ms);
  const double spread = options_.jitter * current_ms_;
  const double delay = current_ms_ - spread + 2 * spread * random_();
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.0, delay) + 0.5));
}

void Backoff::Reset() { current_ms_ = 0; }

}  // namespace aggregator
