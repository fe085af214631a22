#include "lib/ops/repeat_limiter.h"

#include <optional>
#include <vector>

namespace aggregator {

RepeatLimiter::RepeatLimiter(Options options, Summarize summarize)
    : options_(options),
      summarize_(std::move(summarize)),
      clock_(ClockOrSteady(options.clock)) {
  waker_token_ = clock_.AddWaker([this] { Wake(); });
}

RepeatLimiter::~RepeatLimiter() {
  std::thread thread;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
  clock_.RemoveWaker(waker_token_);
}

void RepeatLimiter::Wake() {
  MutexLock lock(&mu_);
  ++ticks_;
  changed_.SignalAll();
}

bool RepeatLimiter::Admit(const std::string& source) {
  // Read without mu_: a fake clock calls Wake (which takes mu_) under its own
  // lock.
  const Clock::TimePoint now = clock_.Now();
  uint64_t summary = 0;
  bool admitted = false;
  {
    MutexLock lock(&mu_);
    Window& window = windows_[source];  // a new one has ended long ago
    if (now >= window.ends) {
      if (window.suppressed > 0) {  // the thread has not written it yet
        pending_.erase({window.ends, source});
        summary = window.suppressed;
      }
      window = Window{now + options_.window, 0, 0};
    }
    admitted = window.written < options_.burst;
    if (admitted) {
      ++window.written;
    } else if (window.suppressed++ == 0) {
      pending_.emplace(window.ends, source);
      ++ticks_;
      changed_.SignalAll();
      if (!thread_.joinable() && !stopping_) {
        thread_ = std::thread([this] { Run(); });
      }
    }
  }
  if (summary > 0) summarize_(source, summary);
  return admitted;
}

void RepeatLimiter::Run() {
  mu_.Lock();
  while (!pending_.empty() || !stopping_) {
    if (pending_.empty()) {
      changed_.Wait(&mu_);  // idle: no wake-ups until a line is suppressed
      continue;
    }
    const Clock::TimePoint when = pending_.begin()->first;
    const uint64_t seen = ticks_;
    mu_.Unlock();
    const Clock::TimePoint now = clock_.Now();
    const std::optional<Clock::Duration> delay = clock_.RealDelayUntil(when);
    mu_.Lock();
    std::vector<std::pair<std::string, uint64_t>> due;
    while (!pending_.empty() && (stopping_ || pending_.begin()->first <= now)) {
      const std::string source = pending_.begin()->second;
      pending_.erase(pending_.begin());
      auto window = windows_.find(source);
      due.emplace_back(source, window->second.suppressed);
      windows_.erase(window);  // its next line starts a new window
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (const auto& [source, suppressed] : due) {
        summarize_(source, suppressed);
      }
      mu_.Lock();
      continue;
    }
    if (ticks_ != seen) continue;  // something changed while it looked
    if (delay.has_value()) {
      changed_.WaitWithTimeout(&mu_, absl::FromChrono(*delay));
    } else {
      changed_.Wait(&mu_);
    }
  }
  mu_.Unlock();
}

}  // namespace aggregator
