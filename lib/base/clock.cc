#include "lib/base/clock.h"

#include <utility>

namespace aggregator {
namespace {

class SteadyClockImpl : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  std::optional<Duration> RealDelayUntil(TimePoint when) const override {
    const TimePoint now = Now();
    return when <= now ? Duration::zero() : when - now;
  }
  int AddWaker(std::function<void()>) override { return 0; }
  void RemoveWaker(int) override {}
};

}  // namespace

Clock& SteadyClock() {
  static SteadyClockImpl* clock = new SteadyClockImpl();
  return *clock;
}

FakeClock::FakeClock() : now_(TimePoint() + std::chrono::hours(1000)) {}

Clock::TimePoint FakeClock::Now() const {
  MutexLock lock(&mu_);
  return now_;
}

std::optional<Clock::Duration> FakeClock::RealDelayUntil(TimePoint) const {
  return std::nullopt;
}

int FakeClock::AddWaker(std::function<void()> wake) {
  MutexLock lock(&mu_);
  const int token = next_token_++;
  wakers_.emplace(token, std::move(wake));
  return token;
}

void FakeClock::RemoveWaker(int token) {
  MutexLock lock(&mu_);
  wakers_.erase(token);
}

void FakeClock::Advance(Duration delta) {
  // Wakers run under the lock, so once RemoveWaker returns its waker is never
  // called again (its owner may close what it writes to).
  MutexLock lock(&mu_);
  now_ += delta;
  for (const auto& [token, wake] : wakers_) wake();
}

}  // namespace aggregator
