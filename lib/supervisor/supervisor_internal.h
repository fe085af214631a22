// What the Supervisor's source files (supervisor.cc, supervisor_lifecycle.cc,
// supervisor_reader.cc, recv_all.cc) share: the child record, the limits, the
// helpers and the wait every receiving call runs. Private to lib/supervisor.
#ifndef LIB_SUPERVISOR_SUPERVISOR_INTERNAL_H_
#define LIB_SUPERVISOR_SUPERVISOR_INTERNAL_H_

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/process/child_loop.h"
#include "lib/supervisor/incarnation.h"
#include "lib/supervisor/supervisor.h"
#include "lib/supervisor/thread_channel.h"

namespace aggregator {
namespace supervisor_internal {

// Requests a RecvAll that fails lists in its message.
inline constexpr size_t kListedRequests = 5;
// Frames read from one channel per round, so a child that never stops writing
// cannot keep the reader from the others.
inline constexpr size_t kFramesPerRound = 64;
// How long a process that closed its channel may take to exit before it is
// killed.
inline constexpr std::chrono::milliseconds kExitGrace(100);
// A bound for waits given absurd timeouts (the arithmetic must not overflow).
inline constexpr std::chrono::hours kLongestWait = ChildLoop::kLongestWait;

inline std::string FormatDuration(std::chrono::nanoseconds d) {
  return absl::FormatDuration(absl::FromChrono(d));
}

// "exited with exit code 3", "was killed by SIGKILL".
inline std::string DescribeExit(const ExitStatus& status) {
  if (status.signal == 0)
    return absl::StrCat("exited with ", status.ToString());
  return absl::StrCat("was ", status.ToString());
}

}  // namespace supervisor_internal

// For the supervisor's source files (this header is theirs alone).
using supervisor_internal::DescribeExit;
using supervisor_internal::FormatDuration;
using supervisor_internal::Incarnation;
using supervisor_internal::kExitGrace;
using supervisor_internal::kFramesPerRound;
using supervisor_internal::kListedRequests;
using supervisor_internal::kLongestWait;
using supervisor_internal::RealClock;
using supervisor_internal::ThreadChannel;
using supervisor_internal::ToSystem;

struct Supervisor::Child {
  int proc_id = -1;
  std::variant<ProcessChildSpec, ThreadChildSpec> spec;
  bool is_process() const { return spec.index() == 0; }
  // Guarded by Supervisor::mu_.
  ChildState state = ChildState::kRegistered;
  std::string last_error;
  int restarts = 0;
  int generation = 0;
  std::shared_ptr<supervisor_internal::Incarnation> current;
};

struct RecvAllHandle::Call {
  struct Wanted {
    int proc_id;
    std::string method;
    int index;  // in the caller's payloads; -1 for added requests
  };
  Supervisor* supervisor;
  // Guarded by supervisor->mu_.
  std::unordered_map<std::string, Wanted> wanted;
};

template <typename Predicate>
bool Supervisor::WaitLocked(TimePoint deadline, Predicate done) {
  for (;;) {
    if (done()) return true;
    if (Now() >= deadline) return false;
    if (!reading_) {
      reading_ = true;
      // Read under mu_, so a result completed after `done` was checked
      // counts as news for PollOnce.
      const uint64_t seen = loop_.wake_seq();
      mu_.Unlock();
      PollOnce(deadline, seen);
      mu_.Lock();
      reading_ = false;
      // Another waiter may need to take the reader role over.
      if (waiters_ > 0) cv_.SignalAll();
    } else {
      ++waiters_;
      cv_.WaitWithDeadline(&mu_, absl::FromChrono(supervisor_internal::ToSystem(
                                     loop_.RealDeadline(deadline))));
      --waiters_;
    }
  }
}

}  // namespace aggregator

#endif  // LIB_SUPERVISOR_SUPERVISOR_INTERNAL_H_
