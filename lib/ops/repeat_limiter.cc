#include "lib/ops/repeat_limiter.h"

#include <utility>
#include <vector>

namespace aggregator {

RepeatLimiter::RepeatLimiter(Options options, Summarize summarize)
    : options_(options),
      summarize_(std::move(summarize)),
      clock_(ClockOrSteady(options.clock)) {}

RepeatLimiter::~RepeatLimiter() {
  std::vector<std::pair<std::string, uint64_t>> pending;
  std::unique_ptr<TimerThread> timers;
  {
    MutexLock lock(&mu_);
    for (auto& [source, window] : windows_) {
      if (window.suppressed == 0) continue;
      pending.emplace_back(source, window.suppressed);
      window.suppressed = 0;  // a timer running now writes nothing
    }
    timers = std::move(timers_);
  }
  timers.reset();  // joins its thread, which may be waiting for mu_
  for (const auto& [source, suppressed] : pending) {
    summarize_(source, suppressed);
  }
}

bool RepeatLimiter::Admit(const std::string& source) {
  // Read without mu_: a fake clock wakes the timer thread under its own lock.
  const Clock::TimePoint now = clock_.Now();
  uint64_t summary = 0;
  bool admitted = false;
  {
    MutexLock lock(&mu_);
    Window& window = windows_[source];  // a new one has ended long ago
    if (now >= window.ends) {
      if (window.suppressed > 0) {  // its timer has not written it yet
        timers_->Cancel(window.summary);
        summary = window.suppressed;
      }
      window = Window{now + options_.window};
    }
    admitted = window.written < options_.burst;
    if (admitted) {
      ++window.written;
    } else if (window.suppressed++ == 0) {
      const Clock::TimePoint ends = window.ends;
      if (timers_ == nullptr) timers_ = std::make_unique<TimerThread>(&clock_);
      window.summary = timers_->Schedule(
          ends, [this, source, ends] { SummaryDue(source, ends); });
    }
  }
  if (summary > 0) summarize_(source, summary);
  return admitted;
}

void RepeatLimiter::SummaryDue(const std::string& source,
                               Clock::TimePoint ends) {
  uint64_t suppressed = 0;
  {
    MutexLock lock(&mu_);
    auto window = windows_.find(source);
    if (window == windows_.end() || window->second.ends != ends ||
        window->second.suppressed == 0) {
      return;
    }
    suppressed = window->second.suppressed;
    windows_.erase(window);  // its next line starts a new window
  }
  summarize_(source, suppressed);
}

}  // namespace aggregator
