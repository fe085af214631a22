// Exponential backoff, as gRPC's connection-backoff spec: the first delay is
// `initial`, each next one is `multiplier` times larger up to `max`, and each
// is spread uniformly by +-`jitter` of itself so that many retrying things do
// not retry in step. With jitter 0 the delays are exact (worker restarts).
//
// Thread-safety: Backoff is not thread-safe; one per retrying thing. The
// random source is injected so tests know every delay exactly.
#ifndef LIB_BASE_BACKOFF_H_
#define LIB_BASE_BACKOFF_H_

#include <chrono>
#include <functional>
#include <tuple>

namespace aggregator {

struct BackoffOptions {
  std::chrono::milliseconds initial{1000};
  double multiplier = 1.6;                // >= 1
  double jitter = 0.2;                    // 0..1
  std::chrono::milliseconds max{120000};  // >= initial

  bool operator==(const BackoffOptions& other) const {
    const auto& [a_initial, a_multiplier, a_jitter, a_max] = *this;
    const auto& [b_initial, b_multiplier, b_jitter, b_max] = other;
    return std::tie(a_initial, a_multiplier, a_jitter, a_max) ==
           std::tie(b_initial, b_multiplier, b_jitter, b_max);
  }
  bool operator!=(const BackoffOptions& other) const {
    return !(*this == other);
  }
};

// Returns a number in [0, 1).
using UniformRandom = std::function<double()>;

// A UniformRandom seeded from std::random_device; each returned function has
// its own generator.
UniformRandom MakeUniformRandom();

// The delay before retry `n` (0 for the first retry): initial * multiplier^n,
// capped at max, spread by jitter with `random01` in [0, 1).
std::chrono::milliseconds BackoffDelay(const BackoffOptions& options, int n,
                                       double random01 = 0.5);

class Backoff {
 public:
  Backoff(const BackoffOptions& options, UniformRandom random);

  // The delay before the next attempt.
  std::chrono::milliseconds Next();
  // After a success: the next delay is `initial` again.
  void Reset();

 private:
  BackoffOptions options_;
  UniformRandom random_;
  int failures_ = 0;  // since the last Reset
};

}  // namespace aggregator

#endif  // LIB_BASE_BACKOFF_H_
