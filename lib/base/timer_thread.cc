#include "lib/base/timer_thread.h"

namespace aggregator {

TimerThread::TimerThread(Clock* clock) : clock_(ClockOrSteady(clock)) {
  waker_token_ = clock_.AddWaker([this] { Wake(); });
  thread_ = std::thread([this] { Run(); });
}

TimerThread::~TimerThread() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  thread_.join();
  clock_.RemoveWaker(waker_token_);
}

void TimerThread::Wake() {
  MutexLock lock(&mu_);
  ++ticks_;
  changed_.SignalAll();
}

TimerThread::Id TimerThread::Schedule(Clock::TimePoint when,
                                      std::function<void()> callback) {
  MutexLock lock(&mu_);
  const Id id = next_id_++;
  order_.emplace(when, id);
  timers_.emplace(id, std::make_pair(when, std::move(callback)));
  // A timer after the one the thread sleeps until is found when it wakes.
  // Waking it for every timer cost each fan-out that armed a late timer (and
  // cancelled it) thread switches (tools/bench section 1).
  if (when < sleeps_until_) {
    ++ticks_;
    changed_.SignalAll();
  }
  return id;
}

void TimerThread::Cancel(Id id) {
  MutexLock lock(&mu_);
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  order_.erase({it->second.first, id});
  timers_.erase(it);
  // Not woken: at worst it wakes for a timer that is gone and sleeps again.
}

void TimerThread::Run() {
  mu_.Lock();
  while (!stopping_) {
    if (order_.empty()) {
      sleeps_until_ = Clock::TimePoint::max();
      changed_.Wait(&mu_);
      continue;
    }
    const auto [when, id] = *order_.begin();
    sleeps_until_ = when;
    const uint64_t seen = ticks_;
    // The clock is read without mu_: a fake clock calls Wake (which takes mu_)
    // under its own lock.
    mu_.Unlock();
    const Clock::TimePoint now = clock_.Now();
    const std::optional<Clock::Duration> delay = clock_.RealDelayUntil(when);
    mu_.Lock();
    if (stopping_) break;
    if (now >= when) {
      auto it = timers_.find(id);
      if (it == timers_.end()) continue;  // cancelled meanwhile
      std::function<void()> callback = std::move(it->second.second);
      order_.erase({when, id});
      timers_.erase(it);
      mu_.Unlock();
      callback();
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
