// TimerThread: runs callbacks at time points of a Clock, on a thread of its
// own, so a timer (a late learner's, the rejoin step's, a log summary) never
// waits for a call to finish, nor a call for a timer. The thread waits without
// waking while no timer is pending: an idle TimerThread costs no CPU. It
// starts with the TimerThread, so a process's thread count does not grow
// when its first timer comes (the soak counts threads). On a fake clock it
// wakes whenever the clock is advanced.
//
// Thread-safety: all methods may be called from any thread, callbacks
// included. Callbacks run one at a time; they must not block for long.
#ifndef LIB_BASE_TIMER_THREAD_H_
#define LIB_BASE_TIMER_THREAD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"

namespace aggregator {

class TimerThread {
 public:
  using Id = uint64_t;  // 0 is never a timer

  // `clock` (null: the steady clock) must outlive the thread.
  explicit TimerThread(Clock* clock = nullptr);
  // Stops the thread; timers not yet run never run.
  ~TimerThread();
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  // Runs `callback` once `when` has come.
  Id Schedule(Clock::TimePoint when, std::function<void()> callback);
  // The timer will not run, unless it is running now (Cancel does not wait
  // for it: a callback may cancel timers, and take locks a canceller holds).
  void Cancel(Id id);

  Clock& clock() const { return clock_; }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void Wake();

  Clock& clock_;
  int waker_token_ = 0;
  mutable Mutex mu_;
  CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by what must make the thread look again: a timer before
  // sleeps_until_, a clock jump.
  uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
  // The thread looks at the timers again by then at the latest (the first
  // timer when it last looked; cancelled since, it wakes for nothing).
  Clock::TimePoint sleeps_until_ ABSL_GUARDED_BY(mu_) = Clock::TimePoint::max();
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<std::pair<Clock::TimePoint, Id>> order_ ABSL_GUARDED_BY(mu_);
  std::map<Id, std::pair<Clock::TimePoint, std::function<void()>>> timers_
      ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace aggregator

#endif  // LIB_BASE_TIMER_THREAD_H_
