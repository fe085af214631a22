// LateAnswers: straggler.late_after at work in the fan-outs (issue 28). Once
// every learner of a fan-out but one has answered, a timer is armed for the
// time LateWatch gives (lib/service/late_watch.h); if it fires before the
// fan-out ends, the silent learner is late: logged once, flagged (status,
// aggregator_learner_late) until it answers a call again, and its call is
// cancelled, so the fan-out ends now instead of at call_timeout. What becomes
// of the call (fails naming it, or completes over the others under
// on_learner_failure: shrink) is the Learner service's business.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_SERVICE_LATE_ANSWERS_H_
#define LIB_SERVICE_LATE_ANSWERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/base/timer_thread.h"
#include "lib/config/config.h"
#include "lib/learners/fan_out.h"
#include "lib/learners/learner_pool.h"
#include "lib/ops/aggregator_metrics.h"
#include "lib/service/late_watch.h"

namespace aggregator {

class LateAnswers {
 public:
  // One learner's answer in a fan-out.
  struct Answer {
    bool ok = false;
    Clock::Duration took{0};
  };
  // The learner of a fan-out found late.
  struct Late {
    size_t index = 0;  // in the fan-out's learners
    std::string why;   // "late: silent 250 ms after ..."
  };
  // One fan-out being watched.
  struct Watch;

  // `clock` (null: the steady clock) runs the timers; `metrics` (optional)
  // must outlive this.
  LateAnswers(Clock* clock, AggregatorMetrics* metrics);

  // Watches a fan-out of `method` to `learners`. Pass Hook(watch) to FanOut as
  // its one_left, and call End from its done.
  std::shared_ptr<Watch> Begin(const char* method,
                               const StragglerConfig::LateAfter& rule,
                               OnLearnerFailure policy,
                               std::vector<LearnerHandle> learners);
  OneLeft Hook(const std::shared_ptr<Watch>& watch);
  // The fan-out ended with `answers` (in its learners' order): its timer will
  // not fire, the times of the learners not found late are learned, and each
  // that answered is no longer flagged late. Returns the learner found late.
  std::optional<Late> End(Watch& watch, const std::vector<Answer>& answers);

  // The learners flagged late now, and how long (ms) since the others of
  // that call answered.
  std::map<std::string, int64_t> LateMs() const;
  // Sets each of `learners`' series (0 unless late), so alerts and dashboards
  // find them before the first late learner.
  void Collect(const std::vector<std::string>& learners) const;

  TimerThread& timers() { return timers_; }

 private:
  // The timer fired: the silent learner is late.
  void Fire(const std::shared_ptr<Watch>& watch, size_t silent,
            Clock::TimePoint others_answered, Clock::Duration after,
            const std::function<void()>& cancel);

  Clock& clock_;
  AggregatorMetrics* const metrics_;
  LateWatch rule_;
  mutable Mutex mu_;
  // Learners flagged late: since when the others of the call had answered.
  std::map<std::string, Clock::TimePoint> late_since_ ABSL_GUARDED_BY(mu_);
  TimerThread timers_;  // last: stopped before the rest goes
};

}  // namespace aggregator

#endif  // LIB_SERVICE_LATE_ANSWERS_H_
