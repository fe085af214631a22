#include "tests/testing/watched_clock.h"

namespace aggregator::testing {

std::optional<Clock::Duration> WatchedClock::RealDelayUntil(
    TimePoint when) const {
  {
    MutexLock lock(&looks_mu_);
    ++looks_[when];
    ++all_looks_;
  }
  return FakeClock::RealDelayUntil(when);
}

int64_t WatchedClock::Looks(TimePoint when) const {
  MutexLock lock(&looks_mu_);
  auto it = looks_.find(when);
  return it == looks_.end() ? 0 : it->second;
}

int64_t WatchedClock::Looks() const {
  MutexLock lock(&looks_mu_);
  return all_looks_;
}

bool WatchedClock::AwaitLooks(int64_t count, std::optional<TimePoint> when,
                              std::chrono::milliseconds timeout) const {
  MutexLock lock(&looks_mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(looks_mu_) {
    if (!when) return all_looks_ >= count;
    auto it = looks_.find(*when);
    return it != looks_.end() && it->second >= count;
  };
  return looks_mu_.AwaitWithTimeout(absl::Condition(&enough),
                                    absl::FromChrono(timeout));
}

bool WatchedClock::AdvanceAndSettle(Duration delta,
                                    std::optional<TimePoint> when,
                                    std::chrono::milliseconds timeout) {
  auto looks = [&] { return when ? Looks(*when) : Looks(); };
  const int64_t before = looks();
  Advance(delta);
  if (!AwaitLooks(before + 1, when, timeout)) return false;
  const int64_t seen = looks();
  Advance(Duration::zero());
  return AwaitLooks(seen + 1, when, timeout);
}

}  // namespace aggregator::testing
