// The restart decision for one worker replica whose process ended: a pure
// function of the exit, the replica's restart history and its spec, so every
// rule (policy, backoff, min_uptime, OTP-style intensity) is tested by table.
#ifndef LIB_WORKERS_RESTART_POLICY_H_
#define LIB_WORKERS_RESTART_POLICY_H_

#include <chrono>
#include <deque>
#include <string>

#include "lib/config/config.h"

namespace aggregator {

// How a replica's process ended, as the policy sees it.
struct ReplicaExit {
  // A non-zero exit code, a signal, an exit sooner than min_uptime, or a
  // process that could not be started.
  bool failed = false;
  // It ran at least min_uptime: a good start, which resets the backoff.
  bool ran_min_uptime = false;
};

// What the policy remembers of a replica between exits.
struct RestartHistory {
  using TimePoint = std::chrono::steady_clock::time_point;
  // Restarts since the last start that ran min_uptime: the backoff exponent.
  int failed_starts = 0;
  // When each restart within the last restart_window happened.
  std::deque<TimePoint> recent_restarts;
};

struct RestartDecision {
  enum class Action {
    kRestart,  // start again after `delay` (zero: at once)
    kStop,     // a clean exit the policy does not restart: stopped
    kFail,     // not restarted: a failed exit under `restart: never`, or
               // restart intensity exceeded (`reason` says which)
  };
  Action action = Action::kStop;
  std::chrono::milliseconds delay{0};
  // For kFail by intensity: "not restarted: it would be restart 6 within 1m
  // (max_restarts 5)". Empty otherwise.
  std::string reason;
  // The history to keep, updated for this decision.
  RestartHistory history;
};

RestartDecision DecideRestart(const WorkerSpec& spec, const ReplicaExit& exit,
                              const RestartHistory& history,
                              RestartHistory::TimePoint now);

}  // namespace aggregator

#endif  // LIB_WORKERS_RESTART_POLICY_H_
