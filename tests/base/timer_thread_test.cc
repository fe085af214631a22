// TimerThread on a fake clock: a timer runs once its time has come on the
// clock and not before, in time order; a cancelled one never runs; a callback
// may schedule and cancel; pending ones die with the TimerThread.
#include "lib/base/timer_thread.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"

namespace aggregator {
namespace {

using std::chrono::seconds;

// What the timers did, in order; waits for it with a deadline.
class Runs {
 public:
  std::function<void()> Record(std::string name) {
    return [this, name] {
      std::lock_guard<std::mutex> lock(mu_);
      runs_.push_back(name);
      changed_.notify_all();
    };
  }
  // The first `count` runs, once there (fewer at the deadline).
  std::vector<std::string> WaitFor(size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, seconds(10), [&] { return runs_.size() >= count; });
    return runs_;
  }
  std::vector<std::string> Now() {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> runs_;
};

TEST_CASE("Timers run when the clock reaches them, in time order") {
  FakeClock clock;
  Runs runs;
  TimerThread timers(&clock);
  const Clock::TimePoint start = clock.Now();
  timers.Schedule(start + seconds(20), runs.Record("b"));
  timers.Schedule(start + seconds(10), runs.Record("a"));
  timers.Schedule(start + seconds(30), runs.Record("c"));

  clock.Advance(seconds(9));
  // A timer due now on the clock runs; one that is not due did not run
  // before it (the timers run in order, one at a time).
  timers.Schedule(clock.Now(), runs.Record("now"));
  CHECK(runs.WaitFor(1) == std::vector<std::string>{"now"});

  clock.Advance(seconds(11));  // 20 s: a and b are due
  CHECK(runs.WaitFor(3) == std::vector<std::string>{"now", "a", "b"});
  timers.Schedule(clock.Now(), runs.Record("marker"));
  CHECK(runs.WaitFor(4).back() == "marker");  // c (30 s) has not run
  clock.Advance(seconds(10));
  CHECK(runs.WaitFor(5).back() == "c");
}

TEST_CASE("A cancelled timer never runs; a callback may schedule and cancel") {
  FakeClock clock;
  Runs runs;
  TimerThread timers(&clock);
  const Clock::TimePoint start = clock.Now();
  const TimerThread::Id cancelled =
      timers.Schedule(start + seconds(5), runs.Record("cancelled"));
  TimerThread::Id later = 0;
  later = timers.Schedule(start + seconds(20), runs.Record("later"));
  timers.Schedule(start + seconds(5), [&] {
    timers.Cancel(later);
    timers.Schedule(start + seconds(6), runs.Record("scheduled by a timer"));
  });
  timers.Cancel(cancelled);
  timers.Cancel(cancelled);  // twice is fine
  timers.Cancel(12345);      // as is a timer that never was

  clock.Advance(seconds(30));
  CHECK(runs.WaitFor(1) == std::vector<std::string>{"scheduled by a timer"});
  timers.Schedule(clock.Now(), runs.Record("marker"));
  CHECK(runs.WaitFor(2) ==
        std::vector<std::string>{"scheduled by a timer", "marker"});
}

TEST_CASE("Timers still pending when the TimerThread goes never run") {
  FakeClock clock;
  Runs runs;
  {
    TimerThread timers(&clock);
    timers.Schedule(clock.Now() + seconds(1), runs.Record("never"));
  }
  clock.Advance(seconds(2));  // the destroyed thread's waker is gone too
  CHECK(runs.Now().empty());
}

TEST_CASE("On the steady clock a timer runs once its time has come") {
  Runs runs;
  TimerThread timers;
  const auto start = std::chrono::steady_clock::now();
  timers.Schedule(timers.clock().Now() + std::chrono::milliseconds(30),
                  runs.Record("due"));
  CHECK(runs.WaitFor(1) == std::vector<std::string>{"due"});
  CHECK(std::chrono::steady_clock::now() - start >=
        std::chrono::milliseconds(30));
}

// A FakeClock that counts how often another thread than the test's reads it:
// the timer thread reads it each time it wakes to look at its timers.
class CountingClock : public FakeClock {
 public:
  TimePoint Now() const override {
    if (std::this_thread::get_id() != test_thread_) ++looks_;
    return FakeClock::Now();
  }
  int looks() const { return looks_; }

 private:
  const std::thread::id test_thread_ = std::this_thread::get_id();
  mutable std::atomic<int> looks_{0};
};

TEST_CASE(
    "Timers after the one the thread sleeps until, and cancelled timers, do "
    "not wake it; an earlier timer does") {
  CountingClock clock;
  Runs runs;
  TimerThread timers(&clock);
  const Clock::TimePoint start = clock.Now();
  timers.Schedule(start + std::chrono::hours(1), runs.Record("in an hour"));
  // It looks at the clock once for its first timer, then sleeps until the
  // clock moves.
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (clock.looks() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(clock.looks() == 1);
  // What a fan-out does on each call: a late timer armed, then cancelled.
  // The pause synchronises nothing (the count below does not depend on it):
  // it gives a thread that was woken the time to look, which it must not.
  for (int i = 0; i < 20; ++i) {
    timers.Cancel(timers.Schedule(start + std::chrono::hours(2) + seconds(i),
                                  runs.Record("cancelled")));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<int> looks_when_run{-1};
  timers.Schedule(start, [&] { looks_when_run = clock.looks(); });
  timers.Schedule(start, runs.Record("now"));
  CHECK(runs.WaitFor(1) == std::vector<std::string>{"now"});
  // One look more: for the timers due now, none for the 40 changes before.
  CHECK(looks_when_run == 2);
}

TEST_CASE(
    "On the steady clock, an earlier timer runs at its time while the thread "
    "sleeps for a later one; a cancelled first one never runs") {
  Runs runs;
  TimerThread timers;
  const Clock::TimePoint now = timers.clock().Now();
  timers.Schedule(now + std::chrono::hours(1), runs.Record("in an hour"));
  // The thread sleeps until the cancelled one: it wakes for nothing, then
  // runs the one after it.
  timers.Cancel(timers.Schedule(now + std::chrono::milliseconds(10),
                                runs.Record("cancelled")));
  timers.Schedule(now + std::chrono::milliseconds(30), runs.Record("due"));
  CHECK(runs.WaitFor(1) == std::vector<std::string>{"due"});
}

}  // namespace
}  // namespace aggregator
