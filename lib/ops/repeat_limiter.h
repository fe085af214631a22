// RepeatLimiter: bounds the log lines one source (a gRPC file:line) writes.
// Each source may write `burst` lines per `window`; past that its lines are
// only counted, and once the window is over one summary says how many were
// left out. A peer can make gRPC log one error line per connection (5,000
// junk connections wrote 5,000 "Handshake failed" lines); with the limiter
// they write at most `burst` lines and a summary per window.
//
// Summaries are written by a TimerThread of the limiter's own, made at the
// first suppressed line: a limiter that never suppressed has no thread, and
// an idle one makes no wake-ups.
//
// Thread-safety: all methods may be called from any thread. `summarize` is
// called without the limiter's lock, on its timer thread or in Admit.
#ifndef LIB_OPS_REPEAT_LIMITER_H_
#define LIB_OPS_REPEAT_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/base/timer_thread.h"

namespace aggregator {

class RepeatLimiter {
 public:
  struct Options {
    int burst = 5;
    Clock::Duration window = std::chrono::seconds(10);
    Clock* clock = nullptr;  // null: the steady clock; must outlive the limiter
  };
  // Writes the summary of `source`'s window: `suppressed` lines left out.
  using Summarize =
      std::function<void(const std::string& source, uint64_t suppressed)>;

  RepeatLimiter(Options options, Summarize summarize);
  // Writes the summaries still pending, then stops its thread.
  ~RepeatLimiter();
  RepeatLimiter(const RepeatLimiter&) = delete;
  RepeatLimiter& operator=(const RepeatLimiter&) = delete;

  // Whether a line from `source` may be written now (else it is counted).
  // The summary of `source`'s last window, if still pending, is written
  // first.
  bool Admit(const std::string& source) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Window {
    Clock::TimePoint ends;
    int written = 0;
    uint64_t suppressed = 0;
    TimerThread::Id summary = 0;  // while suppressed > 0
  };

  // The timer of the window of `source` that ends at `ends`: writes its
  // summary unless Admit has already (a new window has begun).
  void SummaryDue(const std::string& source, Clock::TimePoint ends)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const Summarize summarize_;
  Clock& clock_;
  Mutex mu_;
  // By source. Sources are a program's log call sites: a bounded set.
  std::map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
  // Made at the first suppressed line; stopped before the rest is destroyed.
  std::unique_ptr<TimerThread> timers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aggregator

#endif  // LIB_OPS_REPEAT_LIMITER_H_
