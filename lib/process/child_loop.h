// ChildLoop: the wait both supervisors (lib/supervisor, lib/workers) run on.
// One round of it: a poll set over the children's pidfds and channel (or
// output) fds, the earliest deadline on the injectable Clock (or in real
// time), and a waker that other threads, and the clock's jumps, signal. It
// also bounds how many frames a round reads from one channel, and holds the
// stop escalation of processes (SIGTERM, then SIGKILL after the grace).
//
// A round: Begin(), Watch() each fd, WakeAt() / WakeAtReal() each deadline,
// then Wait(seen); ready(i) tells which watched fds have something. `seen` is
// wake_seq() taken before the caller looked at what it has to do: Wait
// returns at once if anything woke the loop since, so no wake-up is lost.
//
// Waking costs a system call only while the loop is blocked: Wake() bumps a
// sequence number and writes the eventfd only when Wait is in ppoll, so a
// wake-up that comes while Wait spins (Options::spin) is seen without one.
// With a fake clock (no real timers), a clock deadline is met by the clock's
// waker: Advance wakes the loop, which sees what became due.
//
// Thread-safety: Wake, wake_seq, waker and the static functions from any
// thread; a round (Begin ... ready) by one thread at a time. Ownership: the
// loop owns its eventfd (through its waker, which channels may share and
// outlive the loop with) and its place among the clock's wakers.
#ifndef LIB_PROCESS_CHILD_LOOP_H_
#define LIB_PROCESS_CHILD_LOOP_H_

#include <poll.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/clock.h"
#include "lib/process/subprocess.h"

namespace aggregator {

// One step of a spin-wait: sched_yield, not a pause instruction. The thread
// we wait for is often on this very CPU (the scheduler puts a woken thread
// next to its waker), and only a yield lets it run; alone on a CPU, a yield
// returns at once.
inline void SpinPause() { sched_yield(); }

// A loop's waker: an eventfd and a sequence number. Shared, so that a channel
// that signals it (a thread child's) may outlive the loop.
class LoopWaker {
 public:
  LoopWaker();
  ~LoopWaker();
  LoopWaker(const LoopWaker&) = delete;
  LoopWaker& operator=(const LoopWaker&) = delete;

  // -1 when the eventfd could not be created; error() is then its errno.
  int fd() const { return fd_; }
  int error() const { return error_; }
  // Moves on with every Signal.
  uint64_t seq() const { return seq_.load(std::memory_order_seq_cst); }
  // Wakes the loop: at once when it is blocked, else its next Wait.
  void Signal();

 private:
  friend class ChildLoop;
  void SetBlocked(bool blocked) {
    blocked_.store(blocked, std::memory_order_seq_cst);
  }
  void Drain();

  const int fd_;
  const int error_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> blocked_{false};
};

class ChildLoop {
 public:
  using TimePoint = Clock::TimePoint;
  using RealTime = std::chrono::steady_clock::time_point;

  // A bound for waits given absurd timeouts (the arithmetic must not
  // overflow).
  static constexpr std::chrono::hours kLongestWait{24 * 365};

  struct Options {
    // Deadlines are on this clock; not owned, must outlive the loop.
    // nullptr: SteadyClock().
    Clock* clock = nullptr;
    // How long Wait polls without blocking before it blocks: a wake-up or fd
    // that comes sooner skips the system calls of sleeping. 0: never spins.
    std::chrono::nanoseconds spin{0};
    // Frames ReadFrames takes from one channel per round, so a child that
    // never stops writing cannot keep the loop from the others.
    size_t frames_per_round = 64;
    // The longest a round blocks without a deadline that comes sooner.
    std::chrono::nanoseconds idle_wait = kLongestWait;
  };
  explicit ChildLoop(Options options);
  ~ChildLoop();
  ChildLoop(const ChildLoop&) = delete;
  ChildLoop& operator=(const ChildLoop&) = delete;

  // False when the waker's eventfd could not be created (waker()->error()).
  bool ok() const { return waker_->fd() >= 0; }
  Clock& clock() const { return *clock_; }
  TimePoint Now() const { return clock_->Now(); }
  const std::shared_ptr<LoopWaker>& waker() const { return waker_; }
  void Wake() const { waker_->Signal(); }
  uint64_t wake_seq() const { return waker_->seq(); }
  // The real time at which `deadline` (on the clock) is due, bounded by
  // kLongestWait; with a fake clock (no real timer) kLongestWait from now.
  RealTime RealDeadline(TimePoint deadline) const;

  // Starts a round: no fds, no deadlines, nothing ready.
  void Begin();
  // Adds `fd` (POLLIN) to the round; returns its index for ready().
  size_t Watch(int fd);
  // The round ends by `when` on the clock, or by `when` in real time.
  void WakeAt(TimePoint when);
  void WakeAtReal(RealTime when);
  // The caller has something to do already: Wait neither spins nor blocks
  // nor polls (ready() is false for every fd).
  void MarkReady() { marked_ready_ = true; }
  // Waits until a watched fd is ready, the waker moved past `seen`, or the
  // round's deadline. Returns the errno of a failed ppoll (EINTR among them;
  // ready() is then false for every fd), else 0.
  int Wait(uint64_t seen);
  bool ready(size_t index) const { return fds_[index].revents != 0; }

  // Reads at most Options::frames_per_round frames from one channel:
  // `read_one(i)` reads frame i and says whether there was one, or fails,
  // which ends the channel (`*error`). Returns the frames read.
  size_t ReadFrames(absl::FunctionRef<absl::StatusOr<bool>(size_t)> read_one,
                    absl::Status* error) const;

  // Stop escalation in the loop: BeginStop sends SIGTERM to the process (its
  // group) and makes SIGKILL due `grace` later on the clock; WatchStop makes
  // the round wake when it is due; EnforceStop sends it once the clock has
  // reached it and says whether it did just now.
  void BeginStop(Subprocess& process, std::chrono::nanoseconds grace) const;
  void WatchStop(const Subprocess& process);
  bool EnforceStop(Subprocess& process) const;

  // Stop escalation, blocking, in real time, for processes being stopped
  // together that were asked to stop another way first: each gets until
  // `term_at` to exit, then `escalate(i, SIGTERM)`, until `kill_at`, then
  // `escalate(i, SIGKILL)`, and `kill_wait` more to end. Only processes still
  // running are escalated; a negative pidfd has nothing to wait for.
  static void EscalateStops(const std::vector<int>& pidfds, RealTime term_at,
                            RealTime kill_at,
                            std::chrono::nanoseconds kill_wait,
                            absl::FunctionRef<void(size_t, int)> escalate);
  // Waits until the process of `pidfd` has exited (its pidfd is readable) or
  // `deadline`; says whether it has.
  static bool WaitExited(int pidfd, RealTime deadline);

 private:
  const Options options_;
  Clock* const clock_;
  const std::shared_ptr<LoopWaker> waker_;
  int clock_token_ = 0;

  // The round's state, owned by the thread running it.
  std::vector<struct pollfd> fds_;
  TimePoint clock_deadline_ = TimePoint::max();
  RealTime wake_by_{};
  bool marked_ready_ = false;
};

}  // namespace aggregator

#endif  // LIB_PROCESS_CHILD_LOOP_H_
