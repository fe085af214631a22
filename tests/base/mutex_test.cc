// Mutex, CondVar and the locks with absl's semantics, in every build: absl's
// own types, or under ThreadSanitizer the stand-in on std::mutex (run this
// test with --config=tsan too). Conditions are evaluated again after every
// Unlock and after every wait that releases the lock, so a waiter that
// changed what another awaits, and then waits itself, wakes that other one.
// Every wait has a deadline.
#include "lib/base/mutex.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

namespace aggregator {
namespace {

const absl::Duration kDeadline = absl::Seconds(15);

struct Shared {
  Mutex mu;
  CondVar cv;
  int x ABSL_GUARDED_BY(mu) = 0;
  int y ABSL_GUARDED_BY(mu) = 0;
  bool waiting ABSL_GUARDED_BY(mu) = false;
};

TEST_CASE("Await wakes when another thread changes the state and unlocks") {
  Shared s;
  auto waiter = std::async(std::launch::async, [&s] {
    MutexLock lock(&s.mu);
    auto x_set = [&s]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.x == 1; };
    return s.mu.AwaitWithTimeout(absl::Condition(&x_set), kDeadline);
  });
  {
    MutexLock lock(&s.mu);
    s.x = 1;
  }
  REQUIRE(waiter.wait_for(std::chrono::seconds(20)) ==
          std::future_status::ready);
  CHECK(waiter.get());
}

TEST_CASE("AwaitWithTimeout is false at its timeout, true at once if met") {
  Shared s;
  MutexLock lock(&s.mu);
  auto never = []() { return false; };
  const absl::Time start = absl::Now();
  CHECK_FALSE(
      s.mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(30)));
  CHECK(absl::Now() - start >= absl::Milliseconds(30));
  auto always = []() { return true; };
  CHECK(s.mu.AwaitWithTimeout(absl::Condition(&always), absl::ZeroDuration()));
  CHECK(s.mu.AwaitWithDeadline(absl::Condition(&always), absl::InfinitePast()));
}

TEST_CASE(
    "A waiter that changed what another awaits, then waits itself without "
    "unlocking, wakes the other") {
  // Woken at once, not by the other's timeout (whose condition then holds).
  const auto start = std::chrono::steady_clock::now();
  Shared s;
  // B waits for x, then sets y.
  auto b = std::async(std::launch::async, [&s] {
    MutexLock lock(&s.mu);
    s.waiting = true;
    auto x_set = [&s]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.x == 1; };
    const bool woke = s.mu.AwaitWithTimeout(absl::Condition(&x_set), kDeadline);
    s.y = 1;
    return woke;
  });
  bool a_woke = false;
  {
    MutexLock lock(&s.mu);
    // B holds the lock from setting `waiting` until its Await releases it:
    // once A sees it, B is waiting.
    auto b_waiting = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
      return s.waiting;
    };
    REQUIRE(s.mu.AwaitWithTimeout(absl::Condition(&b_waiting), kDeadline));
    s.x = 1;
    // A never unlocks before this wait: only the wait's release can let B in.
    auto y_set = [&s]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.y == 1; };
    a_woke = s.mu.AwaitWithTimeout(absl::Condition(&y_set), kDeadline);
  }
  REQUIRE(b.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(b.get());
  CHECK(a_woke);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE(
    "A CondVar wait releases the lock: an Await elsewhere sees what the "
    "waiter changed") {
  const auto start = std::chrono::steady_clock::now();
  Shared s;
  auto b = std::async(std::launch::async, [&s] {
    MutexLock lock(&s.mu);
    s.waiting = true;
    auto x_set = [&s]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.x == 1; };
    const bool woke = s.mu.AwaitWithTimeout(absl::Condition(&x_set), kDeadline);
    s.y = 1;
    s.cv.SignalAll();
    return woke;
  });
  MutexLock lock(&s.mu);
  // Once A sees `waiting`, B is in its Await.
  auto b_waiting = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    return s.waiting;
  };
  REQUIRE(s.mu.AwaitWithTimeout(absl::Condition(&b_waiting), kDeadline));
  s.x = 1;
  const absl::Time deadline = absl::Now() + kDeadline;
  bool timed_out = false;
  while (s.y != 1 && !timed_out) {
    timed_out = s.cv.WaitWithDeadline(&s.mu, deadline);
  }
  CHECK(s.y == 1);
  CHECK_FALSE(timed_out);
  REQUIRE(b.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(b.get());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("CondVar: true when the deadline passed, false when signalled") {
  Shared s;
  {
    MutexLock lock(&s.mu);
    CHECK(s.cv.WaitWithTimeout(&s.mu, absl::Milliseconds(20)));
    CHECK(s.cv.WaitWithDeadline(&s.mu, absl::Now() - absl::Seconds(1)));
  }
  auto signaller = std::async(std::launch::async, [&s] {
    MutexLock lock(&s.mu);
    s.x = 1;
    s.cv.Signal();
  });
  MutexLock lock(&s.mu);
  const absl::Time deadline = absl::Now() + kDeadline;
  bool timed_out = false;
  while (s.x != 1 && !timed_out) {
    timed_out = s.cv.WaitWithDeadline(&s.mu, deadline);
  }
  CHECK(s.x == 1);
  CHECK_FALSE(timed_out);
}

// Whether another thread could take `mu` now (and give it back).
bool FreeForAnotherThread(Mutex& mu) {
  return std::async(std::launch::async,
                    [&mu] {
                      if (!mu.TryLock()) return false;
                      mu.Unlock();
                      return true;
                    })
      .get();
}

TEST_CASE("ReleasableMutexLock unlocks early, once; TryLock sees the lock") {
  Mutex mu;
  {
    ReleasableMutexLock lock(&mu);
    CHECK_FALSE(FreeForAnotherThread(mu));
    lock.Release();
    CHECK(FreeForAnotherThread(mu));
  }
  // And free after the scope.
  CHECK(FreeForAnotherThread(mu));
}

// Whoever locks a Mutex last may free it at once, as with absl::Mutex and
// std::mutex. The TSan stand-in's Unlock woke its waiters after releasing the
// lock, so it could still be inside a Mutex that the next holder had already
// seen done and freed: pthread_cond_broadcast writing into freed, reused
// memory (found hunting aggregator_server_test's crash under TSan).
struct Freed {
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
};

TEST_CASE("A Mutex may be freed as soon as its last user has locked it") {
  // Many rounds: each is a chance for the finisher's Unlock to still be in
  // the Mutex when it is freed (TSan sees it whenever the wake-up follows the
  // release).
  for (int round = 0; round < 200; ++round) {
    auto freed = std::make_unique<Freed>();
    Freed* raw = freed.get();
    std::thread finisher([raw] {
      MutexLock lock(&raw->mu);
      raw->done = true;
    });
    {
      MutexLock lock(&raw->mu);
      auto done = [raw]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(raw->mu) {
        return raw->done;
      };
      REQUIRE(raw->mu.AwaitWithTimeout(absl::Condition(&done), kDeadline));
    }
    // The finisher has released the lock: the Mutex is this thread's to free.
    freed.reset();
    finisher.join();
  }
}

}  // namespace
}  // namespace aggregator
