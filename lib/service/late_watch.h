// LateWatch: when a learner that has not answered a fan-out, though every
// other learner of the call has, becomes late (straggler.late_after).
//
// It keeps, per RPC and learner, the times of its last kRecent answers. With
// late_after: auto a still-silent learner is late, after the others all
// answered, the largest of
//   - kFloor (500 ms: the "at least 250 ms", doubled so that a
//     first 300 ms pause of a learner among others answering in a
//     millisecond is not taken for a hang; a hang still costs well under a
//     second),
//   - kOthersP99Factor (10) x the slowest recent p99 among the other learners
//     of the call,
//   - kOwnFactor (2) x its own slowest recent answer,
// and never while any other learner has fewer than kMinSamples answers to
// that RPC: a learner that is merely slower than the others (a straggler,
// StragglerWatch's business) is covered by its own history. A fixed duration
// is that; off is never.
//
// Pure bookkeeping: the caller arms the timers (lib/service/late_timers.h).
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_SERVICE_LATE_WATCH_H_
#define LIB_SERVICE_LATE_WATCH_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"

namespace aggregator {

class LateWatch {
 public:
  static constexpr size_t kRecent = 256;
  static constexpr size_t kMinSamples = 10;
  static constexpr std::chrono::milliseconds kFloor{500};
  static constexpr int kOthersP99Factor = 10;
  static constexpr int kOwnFactor = 2;

  // `clock` (null: the steady clock) is what IsLate reads.
  explicit LateWatch(Clock* clock = nullptr);

  // `learner` answered `method` (successfully or not) after `took`.
  void Observe(const std::string& method, const std::string& learner,
               Clock::Duration took);

  // How long after the `others` of a call (the learners that answered) a
  // still-silent `learner` becomes late on `method`; nullopt: it never does
  // (off, no others, or under auto too few answers to go by).
  std::optional<Clock::Duration> LateAfter(
      const StragglerConfig::LateAfter& rule, const std::string& method,
      const std::string& learner, const std::vector<std::string>& others) const;

  // The same as a time point, the others having all answered at
  // `others_answered`.
  std::optional<Clock::TimePoint> LateAt(
      const StragglerConfig::LateAfter& rule, const std::string& method,
      const std::string& learner, const std::vector<std::string>& others,
      Clock::TimePoint others_answered) const;

  // Whether, by the clock's Now(), `learner` is late.
  bool IsLate(const StragglerConfig::LateAfter& rule, const std::string& method,
              const std::string& learner,
              const std::vector<std::string>& others,
              Clock::TimePoint others_answered) const;

  Clock& clock() const { return clock_; }

 private:
  struct Recent {
    std::vector<Clock::Duration> times;  // a ring of the last kRecent
    size_t next = 0;
    // The same times in order, kept as they come: LateAfter runs on every
    // fan-out, and sorting a copy per learner there cost each call tens of
    // microseconds (tools/bench section 1).
    std::vector<Clock::Duration> sorted;
  };
  // The nearest-rank p99 of `recent`.
  static Clock::Duration P99(const Recent& recent);

  Clock& clock_;
  mutable Mutex mu_;
  // By method, then learner id.
  std::map<std::string, std::map<std::string, Recent>> recent_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace aggregator

#endif  // LIB_SERVICE_LATE_WATCH_H_
