// Clock: the steady clock's real delays; the FakeClock that moves only when
// told, calls its wakers on every Advance (and never after RemoveWaker), and
// has no real timer; a waiter on another thread woken by Advance.
#include "lib/base/clock.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_CASE("ClockOrSteady: the clock given, else the steady clock") {
  FakeClock fake;
  CHECK(&ClockOrSteady(&fake) == &fake);
  CHECK(&ClockOrSteady(nullptr) == &SteadyClock());
}

TEST_CASE(
    "The steady clock is steady_clock; its real delay is the time left, zero "
    "once due") {
  Clock& clock = SteadyClock();
  const auto before = std::chrono::steady_clock::now();
  const Clock::TimePoint now = clock.Now();
  CHECK(now >= before);
  CHECK(now <= std::chrono::steady_clock::now());
  CHECK(clock.RealDelayUntil(now - seconds(1)) == Clock::Duration::zero());
  const std::optional<Clock::Duration> delay =
      clock.RealDelayUntil(clock.Now() + seconds(60));
  REQUIRE(delay.has_value());
  CHECK(*delay > seconds(50));
  CHECK(*delay <= seconds(60));
  // TimeUntil: the same, as an absl::Duration, negative once passed.
  CHECK(TimeUntil(std::chrono::steady_clock::now() + seconds(60)) >
        absl::Seconds(50));
  CHECK(TimeUntil(std::chrono::steady_clock::now() - seconds(1)) <
        absl::ZeroDuration());
}

TEST_CASE(
    "A FakeClock moves only when advanced, by exactly that, and has no real "
    "timer") {
  FakeClock clock;
  const Clock::TimePoint start = clock.Now();
  // Far from steady_clock's epoch, so "now - a few hours" is still positive.
  CHECK(start.time_since_epoch() >= std::chrono::hours(24));
  CHECK(clock.Now() == start);
  clock.Advance(milliseconds(250));
  CHECK(clock.Now() == start + milliseconds(250));
  clock.Advance(Clock::Duration::zero());
  CHECK(clock.Now() == start + milliseconds(250));
  CHECK_FALSE(clock.RealDelayUntil(start + seconds(1)).has_value());
  CHECK_FALSE(clock.RealDelayUntil(start).has_value());
}

TEST_CASE("Advance calls every waker; RemoveWaker stops only that one") {
  FakeClock clock;
  int a = 0;
  int b = 0;
  const int token_a = clock.AddWaker([&a] { ++a; });
  const int token_b = clock.AddWaker([&b] { ++b; });
  CHECK(token_a != token_b);
  clock.Advance(milliseconds(1));
  CHECK(a == 1);
  CHECK(b == 1);
  clock.RemoveWaker(token_a);
  clock.Advance(milliseconds(1));
  clock.Advance(milliseconds(1));
  CHECK(a == 1);
  CHECK(b == 3);
  clock.RemoveWaker(token_b);
  clock.Advance(milliseconds(1));
  CHECK(b == 3);
  // The steady clock never jumps: its wakers are never kept.
  SteadyClock().RemoveWaker(SteadyClock().AddWaker([] {}));
}

TEST_CASE(
    "A waiter on another thread, woken by its waker, sees the time it waits "
    "for") {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable woken;
  int wakes = 0;
  // Takes only `mu`; the waiter reads the clock without holding it (a waker
  // runs under the clock's lock and must not wait for a reader of it).
  const int token = clock.AddWaker([&] {
    std::lock_guard<std::mutex> lock(mu);
    ++wakes;
    woken.notify_all();
  });
  const Clock::TimePoint due = clock.Now() + seconds(10);
  std::atomic<bool> saw_due{false};
  std::thread waiter([&] {
    // Real time, only a bound for a broken clock.
    const auto give_up = std::chrono::steady_clock::now() + seconds(15);
    for (;;) {
      int seen = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        seen = wakes;
      }
      if (clock.Now() >= due) break;
      std::unique_lock<std::mutex> lock(mu);
      if (!woken.wait_until(lock, give_up, [&] { return wakes > seen; })) {
        return;
      }
    }
    saw_due = true;
  });
  for (int i = 0; i < 10; ++i) clock.Advance(seconds(1));
  waiter.join();
  CHECK(saw_due);
  clock.RemoveWaker(token);
  std::lock_guard<std::mutex> lock(mu);
  CHECK(wakes == 10);
}

TEST_CASE(
    "Once RemoveWaker returns, its waker is never called again, even while "
    "another thread advances") {
  FakeClock clock;
  std::atomic<bool> stop{false};
  std::thread advancer([&] {
    while (!stop) clock.Advance(milliseconds(1));
  });
  struct Round {
    std::atomic<bool> removed{false};
    std::atomic<bool> called_after{false};
    std::atomic<int> calls{0};
  };
  std::vector<std::shared_ptr<Round>> rounds;
  for (int i = 0; i < 200; ++i) {
    auto round = std::make_shared<Round>();
    rounds.push_back(round);
    const int token = clock.AddWaker([round] {
      ++round->calls;
      if (round->removed) round->called_after = true;
    });
    // Let the advancer call it at least once (bounded by a real deadline).
    const auto give_up = std::chrono::steady_clock::now() + seconds(15);
    while (round->calls == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    clock.RemoveWaker(token);
    round->removed = true;
    REQUIRE(round->calls > 0);
  }
  stop = true;
  advancer.join();
  int called_after = 0;
  for (const auto& round : rounds) called_after += round->called_after;
  CHECK(called_after == 0);
}

}  // namespace
}  // namespace aggregator
