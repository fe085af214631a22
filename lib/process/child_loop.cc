#include "lib/process/child_loop.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace aggregator {
namespace {

using RealClock = std::chrono::steady_clock;

struct timespec TimespecUntil(RealClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
      deadline - RealClock::now());
  const int64_t ns = std::max<int64_t>(0, left.count());
  return {static_cast<time_t>(ns / 1000000000),
          static_cast<long>(ns % 1000000000)};
}

}  // namespace

LoopWaker::LoopWaker()
    : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      error_(fd_ < 0 ? errno : 0) {}

LoopWaker::~LoopWaker() {
  if (fd_ >= 0) close(fd_);
}

void LoopWaker::Signal() {
  // seq_cst on both sides (here and in Wait's SetBlocked/seq) so that either
  // the loop sees the new seq before blocking, or this sees it blocked and
  // writes the eventfd.
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (blocked_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    ssize_t n;
    do {
      n = write(fd_, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  }
}

void LoopWaker::Drain() {
  uint64_t value;
  ssize_t n;
  do {
    n = read(fd_, &value, sizeof(value));
  } while (n < 0 && errno == EINTR);
}

ChildLoop::ChildLoop(Options options)
    : options_(options),
      clock_(&ClockOrSteady(options_.clock)),
      waker_(std::make_shared<LoopWaker>()) {
  // A fake clock's jump wakes the loop, which sees what became due.
  std::weak_ptr<LoopWaker> waker = waker_;
  clock_token_ = clock_->AddWaker([waker] {
    if (auto w = waker.lock()) w->Signal();
  });
}

ChildLoop::~ChildLoop() { clock_->RemoveWaker(clock_token_); }

ChildLoop::RealTime ChildLoop::RealDeadline(TimePoint deadline) const {
  const Clock::Duration left = std::clamp<Clock::Duration>(
      clock_->RealDelayUntil(deadline).value_or(kLongestWait),
      Clock::Duration::zero(), kLongestWait);
  return RealClock::now() + left;
}

void ChildLoop::Begin() {
  fds_.clear();
  clock_deadline_ = TimePoint::max();
  wake_by_ =
      RealClock::now() +
      std::clamp<std::chrono::nanoseconds>(
          options_.idle_wait, std::chrono::nanoseconds::zero(), kLongestWait);
  marked_ready_ = false;
}

size_t ChildLoop::Watch(int fd) {
  fds_.push_back({fd, POLLIN, 0});
  return fds_.size() - 1;
}

void ChildLoop::WakeAt(TimePoint when) {
  clock_deadline_ = std::min(clock_deadline_, when);
  // A fake clock has no real timer: its waker ends the wait instead.
  if (clock_->RealDelayUntil(when).has_value()) {
    wake_by_ = std::min(wake_by_, RealDeadline(when));
  }
}

void ChildLoop::WakeAtReal(RealTime when) {
  wake_by_ = std::min(wake_by_, when);
}

int ChildLoop::Wait(uint64_t seen) {
  const size_t watched = fds_.size();
  bool ready = marked_ready_;
  if (!ready && options_.spin.count() > 0 && Now() < clock_deadline_) {
    const RealClock::time_point spin_end = RealClock::now() + options_.spin;
    struct timespec zero = {0, 0};
    for (;;) {
      if (waker_->seq() != seen) {
        ready = true;
        break;
      }
      if (watched > 0 && ppoll(fds_.data(), watched, &zero, nullptr) > 0) {
        ready = true;
        break;
      }
      if (RealClock::now() >= spin_end || Now() >= clock_deadline_) break;
      SpinPause();
    }
  }
  if (ready) return 0;
  int error = 0;
  fds_.push_back({waker_->fd(), POLLIN, 0});
  waker_->SetBlocked(true);
  if (waker_->seq() == seen) {
    const struct timespec timeout = TimespecUntil(wake_by_);
    if (ppoll(fds_.data(), fds_.size(), &timeout, nullptr) < 0) {
      error = errno;
      for (struct pollfd& pfd : fds_) pfd.revents = 0;
    }
  }
  waker_->SetBlocked(false);
  if (fds_.back().revents != 0) waker_->Drain();
  fds_.pop_back();
  return error;
}

size_t ChildLoop::ReadFrames(
    absl::FunctionRef<absl::StatusOr<bool>(size_t)> read_one,
    absl::Status* error) const {
  size_t count = 0;
  while (count < options_.frames_per_round) {
    absl::StatusOr<bool> got = read_one(count);
    if (!got.ok()) {
      *error = got.status();
      break;
    }
    if (!*got) break;
    ++count;
  }
  return count;
}

void ChildLoop::BeginStop(Subprocess& process,
                          std::chrono::nanoseconds grace) const {
  process.BeginStop(Now() + grace);
}

void ChildLoop::WatchStop(const Subprocess& process) {
  if (std::optional<TimePoint> due = process.kill_due()) WakeAt(*due);
}

bool ChildLoop::EnforceStop(Subprocess& process) const {
  return process.EnforceStop(Now());
}

void ChildLoop::EscalateStops(const std::vector<int>& pidfds, RealTime term_at,
                              RealTime kill_at,
                              std::chrono::nanoseconds kill_wait,
                              absl::FunctionRef<void(size_t, int)> escalate) {
  // Each step against a deadline shared by all.
  auto wait_all = [&pidfds](RealTime deadline) {
    bool all = true;
    for (int pidfd : pidfds) {
      if (pidfd >= 0 && !WaitExited(pidfd, deadline)) all = false;
    }
    return all;
  };
  auto signal_running = [&](int signo) {
    for (size_t i = 0; i < pidfds.size(); ++i) {
      if (pidfds[i] >= 0 && !WaitExited(pidfds[i], RealClock::now())) {
        escalate(i, signo);
      }
    }
  };
  if (wait_all(term_at)) return;
  signal_running(SIGTERM);
  if (wait_all(kill_at)) return;
  signal_running(SIGKILL);
  wait_all(RealClock::now() + kill_wait);
}

bool ChildLoop::WaitExited(int pidfd, RealTime deadline) {
  for (;;) {
    const struct timespec timeout = TimespecUntil(deadline);
    struct pollfd pfd = {pidfd, POLLIN, 0};
    const int n = ppoll(&pfd, 1, &timeout, nullptr);
    if (n > 0) return true;
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}

}  // namespace aggregator
