// The supervisor reader's waker (lib/supervisor/supervisor.h) and the pause of
// its spin-waits. Private to lib/supervisor.
#ifndef LIB_SUPERVISOR_WAKER_H_
#define LIB_SUPERVISOR_WAKER_H_

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace aggregator {
namespace supervisor_internal {

// Lets the thread blocked in ppoll() for everyone know that something other
// than a process channel changed: a thread child replied, a result was added,
// the set of channels changed. seq() tells whether anything happened since a
// given moment; the eventfd is written only while the reader is blocked, so a
// reply that arrives while it spins costs no system call.
class Waker {
 public:
  Waker() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Waker() {
    if (fd_ >= 0) close(fd_);
  }
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  int fd() const { return fd_; }
  uint64_t seq() const { return seq_.load(std::memory_order_seq_cst); }

  void Signal() {
    // seq_cst on both sides (here and in the reader's SetBlocked/seq) so that
    // either the reader sees the new seq before blocking, or this sees it
    // blocked and writes the eventfd.
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (blocked_.load(std::memory_order_seq_cst)) {
      const uint64_t one = 1;
      ssize_t n;
      do {
        n = write(fd_, &one, sizeof(one));
      } while (n < 0 && errno == EINTR);
    }
  }
  void SetBlocked(bool blocked) {
    blocked_.store(blocked, std::memory_order_seq_cst);
  }
  void Drain() {
    uint64_t value;
    ssize_t n;
    do {
      n = read(fd_, &value, sizeof(value));
    } while (n < 0 && errno == EINTR);
  }

 private:
  const int fd_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> blocked_{false};
};

// One step of a spin-wait: sched_yield, not a pause instruction. The thread
// we wait for is often on this very CPU (the scheduler puts a woken thread
// next to its waker), and only a yield lets it run; alone on a CPU, a yield
// returns at once.
inline void SpinPause() { sched_yield(); }

}  // namespace supervisor_internal
}  // namespace aggregator

#endif  // LIB_SUPERVISOR_WAKER_H_
