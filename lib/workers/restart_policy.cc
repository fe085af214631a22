#include "lib/workers/restart_policy.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/base/backoff.h"

namespace aggregator {

RestartDecision DecideRestart(const WorkerSpec& spec, const ReplicaExit& exit,
                              const RestartHistory& history,
                              RestartHistory::TimePoint now) {
  RestartDecision decision;
  decision.history = history;
  RestartHistory& next = decision.history;
  if (exit.ran_min_uptime) next.failed_starts = 0;

  const bool restart =
      spec.restart == RestartPolicy::kAlways ||
      (spec.restart == RestartPolicy::kOnFailure && exit.failed);
  if (!restart) {
    decision.action = exit.failed ? RestartDecision::Action::kFail
                                  : RestartDecision::Action::kStop;
    return decision;
  }
  while (!next.recent_restarts.empty() &&
         next.recent_restarts.front() <= now - spec.restart_window) {
    next.recent_restarts.pop_front();
  }
  if (next.recent_restarts.size() >= static_cast<size_t>(spec.max_restarts)) {
    decision.action = RestartDecision::Action::kFail;
    decision.reason = absl::StrCat(
        "not restarted: it would be restart ", next.recent_restarts.size() + 1,
        " within ", absl::FormatDuration(absl::FromChrono(spec.restart_window)),
        " (max_restarts ", spec.max_restarts, ")");
    return decision;
  }
  decision.action = RestartDecision::Action::kRestart;
  decision.delay = BackoffDelay(spec.backoff, next.failed_starts);
  ++next.failed_starts;
  next.recent_restarts.push_back(now);
  return decision;
}

}  // namespace aggregator
