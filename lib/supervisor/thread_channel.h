// A thread child's channel (lib/supervisor/supervisor.h). Private to
// lib/supervisor.
#ifndef LIB_SUPERVISOR_THREAD_CHANNEL_H_
#define LIB_SUPERVISOR_THREAD_CHANNEL_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/base/mutex.h"
#include "lib/process/child_loop.h"
#include "lib/supervisor/worker_runtime.h"
#include "proto/worker.pb.h"

namespace aggregator {
namespace supervisor_internal {

using RealClock = std::chrono::steady_clock;

// CondVar takes absl::Time: a steady deadline as wall-clock time.
inline std::chrono::system_clock::time_point ToSystem(
    RealClock::time_point when) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             when - RealClock::now());
}

// A thread child's channel: a request queue and a reply queue under the
// child's own mutex. The child spins on `queued_` for a while before it
// blocks, so back-to-back requests skip the futex wake-up.
//
// Thread-safety: all methods are thread-safe; the Push/Take pairs are used by
// the supervisor on one side and the child thread on the other. Ownership:
// shared by the supervisor and the child thread (which may outlive the
// supervisor when it had to be detached).
class ThreadChannel {
 public:
  ThreadChannel(std::shared_ptr<LoopWaker> waker, std::chrono::nanoseconds spin)
      : waker_(std::move(waker)), spin_(spin) {}

  // Supervisor side.
  void PushRequest(v1::WorkerRequest request) {
    bool wake;
    {
      MutexLock lock(&mu_);
      requests_.push_back(std::move(request));
      queued_.fetch_add(1, std::memory_order_release);
      wake = child_waiting_;
    }
    if (wake) cv_.SignalAll();
  }
  bool has_replies() const {
    return has_replies_.load(std::memory_order_acquire);
  }
  // Moves the replies into `out`, which must be empty.
  void TakeReplies(std::vector<v1::WorkerReply>& out) {
    MutexLock lock(&mu_);
    out.swap(replies_);
    has_replies_.store(false, std::memory_order_release);
  }
  // Ends the serving loop after the current request and asks a method
  // waiting in WorkerObject::SleepFor to return.
  void RequestStop() {
    std::shared_ptr<WorkerObject> object;
    {
      MutexLock lock(&mu_);
      stop_ = true;
      stopping_.store(true, std::memory_order_release);
      object = object_;
    }
    cv_.SignalAll();
    if (object != nullptr) object->RequestStop();
  }
  bool WaitExited(RealClock::time_point deadline) {
    MutexLock lock(&mu_);
    while (!exited_) {
      if (cv_.WaitWithDeadline(&mu_, absl::FromChrono(ToSystem(deadline)))) {
        return exited_;
      }
    }
    return true;
  }

  // Child side. False once a stop was requested.
  bool PopRequest(v1::WorkerRequest* request) {
    if (spin_.count() > 0 && queued_.load(std::memory_order_acquire) == 0) {
      const RealClock::time_point end = RealClock::now() + spin_;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             !stopping_.load(std::memory_order_acquire) &&
             RealClock::now() < end) {
        SpinPause();
      }
    }
    MutexLock lock(&mu_);
    while (requests_.empty() && !stop_) {
      child_waiting_ = true;
      cv_.Wait(&mu_);
      child_waiting_ = false;
    }
    if (stop_) return false;
    *request = std::move(requests_.front());
    requests_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    return true;
  }
  void PushReply(v1::WorkerReply reply) {
    {
      MutexLock lock(&mu_);
      replies_.push_back(std::move(reply));
      has_replies_.store(true, std::memory_order_release);
    }
    waker_->Signal();
  }
  void SetObject(std::shared_ptr<WorkerObject> object) {
    bool stop;
    {
      MutexLock lock(&mu_);
      object_ = object;
      stop = stop_;
    }
    if (stop && object != nullptr) object->RequestStop();
  }
  void MarkExited() {
    {
      MutexLock lock(&mu_);
      exited_ = true;
    }
    cv_.SignalAll();
  }

 private:
  const std::shared_ptr<LoopWaker> waker_;
  const std::chrono::nanoseconds spin_;

  Mutex mu_;
  // With mu_: requests arrived or a stop (for the child), exit (for the
  // supervisor).
  CondVar cv_;
  std::deque<v1::WorkerRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerReply> replies_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<WorkerObject> object_ ABSL_GUARDED_BY(mu_);
  bool child_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  // Lock-free views for spinning.
  std::atomic<size_t> queued_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> has_replies_{false};
};

}  // namespace supervisor_internal
}  // namespace aggregator

#endif  // LIB_SUPERVISOR_THREAD_CHANNEL_H_
