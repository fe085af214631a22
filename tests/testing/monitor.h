// Monitor: a test's waits on state it shares with other threads (gRPC's,
// a child's): changes under one lock wake the waiters, and every wait has a
// deadline, so a test that goes wrong fails instead of hanging.
#ifndef TESTS_TESTING_MONITOR_H_
#define TESTS_TESTING_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace aggregator {
namespace testing {

class Monitor {
 public:
  explicit Monitor(
      std::chrono::milliseconds deadline = std::chrono::seconds(15))
      : deadline_(deadline) {}

  // Runs `change` under the lock and wakes the waiters.
  void Change(const std::function<void()>& change) {
    std::lock_guard<std::mutex> lock(mu_);
    change();
    changed_.notify_all();
  }
  // True if `condition` (read under the lock) held within the deadline.
  bool Await(const std::function<bool()>& condition) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, deadline_, condition);
  }
  template <typename T>
  T Read(const std::function<T()>& read) {
    std::lock_guard<std::mutex> lock(mu_);
    return read();
  }

 private:
  const std::chrono::milliseconds deadline_;
  std::mutex mu_;
  std::condition_variable changed_;
};

}  // namespace testing
}  // namespace aggregator

#endif  // TESTS_TESTING_MONITOR_H_
