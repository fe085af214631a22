// Clock: the time every timer of the daemon runs on (restart delays, stop
// escalation, call deadlines), injected so tests drive time exactly.
//
// A waiter for a time point asks RealDelayUntil how long to sleep in real time.
// The steady clock answers with the real remaining time. A fake clock answers
// "no real timer" (nullopt) and instead calls its wakers whenever it is
// advanced, so a waiter wakes, reads Now() and sees what became due.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LIB_BASE_CLOCK_H_
#define LIB_BASE_CLOCK_H_

#include <chrono>
#include <functional>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "lib/base/mutex.h"
#include "absl/time/time.h"

namespace aggregator {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::nanoseconds;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // How long, in real time, a waiter for `when` should sleep before looking at
  // the clock again (zero when it is due); nullopt: wait for a waker instead.
  virtual std::optional<Duration> RealDelayUntil(TimePoint when) const = 0;
  // `wake` is called (on the thread moving the clock) whenever the time jumps;
  // it must return quickly and must not call the clock. Returns a token for
  // RemoveWaker, after which `wake` is never called again.
  virtual int AddWaker(std::function<void()> wake) = 0;
  virtual void RemoveWaker(int token) = 0;
};

// The real time left until a steady_clock deadline (negative once passed), for
// Mutex::AwaitWithTimeout and CondVar::WaitWithTimeout.
inline absl::Duration TimeUntil(
    std::chrono::steady_clock::time_point deadline) {
  return absl::FromChrono(deadline - std::chrono::steady_clock::now());
}

// std::chrono::steady_clock. It never jumps, so it keeps no wakers.
Clock& SteadyClock();

// `clock`, or SteadyClock() when it is null.
inline Clock& ClockOrSteady(Clock* clock) {
  return clock != nullptr ? *clock : SteadyClock();
}

// A clock that only moves when told to, for tests.
class FakeClock : public Clock {
 public:
  // Starts at an arbitrary fixed point far from steady_clock's epoch.
  FakeClock();

  TimePoint Now() const override;
  std::optional<Duration> RealDelayUntil(TimePoint when) const override;
  int AddWaker(std::function<void()> wake) override;
  void RemoveWaker(int token) override;

  // Moves the time forward and calls every waker.
  void Advance(Duration delta);

 private:
  mutable Mutex mu_;
  TimePoint now_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::function<void()>> wakers_ ABSL_GUARDED_BY(mu_);
  int next_token_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace aggregator

#endif  // LIB_BASE_CLOCK_H_
