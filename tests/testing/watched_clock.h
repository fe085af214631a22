// WatchedClock: a FakeClock that also says when its waiters have looked at it,
// so a test can check what did NOT happen after it moved the clock.
//
// Everything that waits for a time point on a Clock (a TimerThread, the
// pool's connector) asks RealDelayUntil(when) each time it has read the time
// and goes to wait again. So a look at `when` after the clock moved means the
// waiter saw the move and found `when` not yet due, and a look at a time point
// means a timer for it is set. Waiting for these is waiting on a condition,
// with a real deadline; nothing sleeps.
//
// Thread-safety: all methods may be called from any thread.
#ifndef TESTS_TESTING_WATCHED_CLOCK_H_
#define TESTS_TESTING_WATCHED_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"

namespace aggregator::testing {

class WatchedClock final : public FakeClock {
 public:
  std::optional<Duration> RealDelayUntil(TimePoint when) const override;

  // How many times a waiter has looked at `when` / at any time point.
  int64_t Looks(TimePoint when) const;
  int64_t Looks() const;
  // Waits until waiters have looked at `when` (at any time point: nullopt)
  // `count` times in all; false if `timeout` (real) passed first.
  bool AwaitLooks(int64_t count, std::optional<TimePoint> when,
                  std::chrono::milliseconds timeout) const;

  // Advances the clock by `delta` and waits until the waiter for `when`
  // (nullopt: the only waiter on this clock, whatever it waits for) has read
  // the new time and gone back to waiting: two of its looks after the move
  // (the first may have read the time just before it), the second prompted by
  // a move of zero. Then whatever that waiter does at the new time is done.
  // False if `timeout` (real) passed first.
  bool AdvanceAndSettle(Duration delta, std::optional<TimePoint> when,
                        std::chrono::milliseconds timeout);

 private:
  mutable Mutex looks_mu_;
  mutable std::map<TimePoint, int64_t> looks_ ABSL_GUARDED_BY(looks_mu_);
  mutable int64_t all_looks_ ABSL_GUARDED_BY(looks_mu_) = 0;
};

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_WATCHED_CLOCK_H_
