// Jittered exponential backoff, as gRPC's connection-backoff spec: the first
// delay is `initial`, each next one is `multiplier` times larger up to `max`,
// and each is spread uniformly by +-`jitter` of itself so that many learners do
// not retry in step.
//
// Thread-safety: not thread-safe; one per retrying thing. The random source is
// injected so tests know every delay exactly.
#ifndef LIB_BASE_BACKOFF_H_
#define LIB_BASE_BACKOFF_H_

#include <chrono>
#include <functional>

#include "lib/config/config.h"

namespace aggregator {

// Returns a number in [0, 1).
using UniformRandom = std::function<double()>;

// A UniformRandom seeded from std::random_device; each returned function has
// its own generator.
UniformRandom MakeUniformRandom();

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
  double current_ms_ = 0;  // 0: no attempt has failed since the last Reset
};

}  // namespace aggregator

#endif  // LIB_BASE_BACKOFF_H_
