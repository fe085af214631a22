// Mutex, MutexLock, ReleasableMutexLock, CondVar: the locks every package
// uses, with Mutex's API and its thread-safety annotations (checked by
// `bazel build --config=clang`).
//
// In every build but ThreadSanitizer's they are absl's own types. Debian's
// libabsl is not built with ThreadSanitizer's hooks, so TSan cannot see
// Mutex lock and unlock and would report every guarded access as a race.
// Under TSan they are a small stand-in on std::mutex, whose pthread calls TSan
// intercepts.
#ifndef LIB_BASE_MUTEX_H_
#define LIB_BASE_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AGGREGATOR_TSAN_MUTEX 1
#endif
#endif

#ifdef AGGREGATOR_TSAN_MUTEX
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace aggregator {

#ifndef AGGREGATOR_TSAN_MUTEX

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using ReleasableMutexLock = absl::ReleasableMutexLock;
using CondVar = absl::CondVar;

#else  // AGGREGATOR_TSAN_MUTEX

// Mutex's Await: conditions are evaluated again after every Unlock, and
// after every wait that releases the lock (as absl's waits do: what the waiter
// changed before waiting may be what another waiter awaits).
//
// Unlock wakes the waiters before it releases the lock, never after: once
// released, the next holder may free the Mutex (as absl::Mutex allows), and a
// wake-up after the release wrote into freed, reused memory.
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    changed_.notify_all();
    mu_.unlock();
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  void Await(const absl::Condition& condition)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    changed_.notify_all();
    changed_.wait(lock, [&] { return condition.Eval(); });
    lock.release();
  }
  bool AwaitWithTimeout(const absl::Condition& condition,
                        absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return AwaitWithDeadline(condition, absl::Now() + timeout);
  }
  bool AwaitWithDeadline(const absl::Condition& condition, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    changed_.notify_all();
    const bool met = changed_.wait_until(lock, absl::ToChronoTime(deadline),
                                         [&] { return condition.Eval(); });
    lock.release();
    return met;
  }

 private:
  friend class CondVar;
  std::mutex mu_;
  std::condition_variable changed_;  // notified on every Unlock
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex* mu_;
};

class CondVar {
 public:
  void Wait(Mutex* mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->changed_.notify_all();
    cv_.wait(lock);
    lock.release();
  }
  // True when the deadline passed, as CondVar.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->changed_.notify_all();
    const bool timed_out = cv_.wait_until(lock, absl::ToChronoTime(deadline)) ==
                           std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    return WaitWithDeadline(mu, absl::Now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

#endif  // AGGREGATOR_TSAN_MUTEX

}  // namespace aggregator

#endif  // LIB_BASE_MUTEX_H_
