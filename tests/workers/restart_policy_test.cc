// DecideRestart, rule by rule, as a table: policy, exit, history -> action,
// delay and the history kept.
#include "lib/workers/restart_policy.h"

#include <catch2/catch.hpp>

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Action = RestartDecision::Action;
using TimePoint = RestartHistory::TimePoint;

const TimePoint kNow = TimePoint() + std::chrono::hours(100);

WorkerSpec Spec(RestartPolicy policy) {
  WorkerSpec spec;
  spec.name = "w";
  spec.restart = policy;
  spec.backoff = {milliseconds(1000), 2.0, 0.0, milliseconds(5000)};
  spec.max_restarts = 3;
  spec.restart_window = seconds(60);
  return spec;
}

const ReplicaExit kCleanAfterUptime{/*failed=*/false, /*ran_min_uptime=*/true};
const ReplicaExit kFailedAfterUptime{true, true};
const ReplicaExit kFailedEarly{true, false};

TEST_CASE("The policy decides by exit: a table") {
  struct Row {
    RestartPolicy policy;
    ReplicaExit exit;
    Action action;
  };
  for (const Row& row : {
           Row{RestartPolicy::kAlways, kCleanAfterUptime, Action::kRestart},
           Row{RestartPolicy::kAlways, kFailedAfterUptime, Action::kRestart},
           Row{RestartPolicy::kAlways, kFailedEarly, Action::kRestart},
           Row{RestartPolicy::kOnFailure, kCleanAfterUptime, Action::kStop},
           Row{RestartPolicy::kOnFailure, kFailedAfterUptime, Action::kRestart},
           Row{RestartPolicy::kOnFailure, kFailedEarly, Action::kRestart},
           Row{RestartPolicy::kNever, kCleanAfterUptime, Action::kStop},
           Row{RestartPolicy::kNever, kFailedAfterUptime, Action::kFail},
           Row{RestartPolicy::kNever, kFailedEarly, Action::kFail},
       }) {
    INFO(RestartPolicyName(row.policy)
         << " failed=" << row.exit.failed
         << " ran_min_uptime=" << row.exit.ran_min_uptime);
    const RestartDecision decision =
        DecideRestart(Spec(row.policy), row.exit, RestartHistory(), kNow);
    CHECK(decision.action == row.action);
    CHECK(decision.reason.empty());
  }
}

TEST_CASE("Failed starts back off exponentially up to max") {
  const WorkerSpec spec = Spec(RestartPolicy::kAlways);
  struct Row {
    int failed_starts;
    ReplicaExit exit;
    milliseconds delay;
    int failed_starts_after;
  };
  for (const Row& row : {
           Row{0, kFailedEarly, milliseconds(1000), 1},
           Row{1, kFailedEarly, milliseconds(2000), 2},
           Row{2, kFailedEarly, milliseconds(4000), 3},
           Row{3, kFailedEarly, milliseconds(5000), 4},
           Row{9, kFailedEarly, milliseconds(5000), 10},
           // A start that ran min_uptime was good: the backoff starts over.
           Row{9, kFailedAfterUptime, milliseconds(1000), 1},
           Row{9, kCleanAfterUptime, milliseconds(1000), 1},
       }) {
    INFO("failed_starts " << row.failed_starts);
    RestartHistory history;
    history.failed_starts = row.failed_starts;
    const RestartDecision decision =
        DecideRestart(spec, row.exit, history, kNow);
    REQUIRE(decision.action == Action::kRestart);
    CHECK(decision.delay == row.delay);
    CHECK(decision.history.failed_starts == row.failed_starts_after);
    CHECK(decision.history.recent_restarts.back() == kNow);
  }
}

TEST_CASE("More than max_restarts within restart_window fails the replica") {
  const WorkerSpec spec = Spec(RestartPolicy::kAlways);
  struct Row {
    std::vector<seconds> ago;  // earlier restarts, this long before now
    Action action;
    size_t kept;  // restarts remembered afterwards
  };
  for (const Row& row : {
           Row{{}, Action::kRestart, 1},
           Row{{seconds(10), seconds(5)}, Action::kRestart, 3},
           Row{{seconds(50), seconds(10), seconds(5)}, Action::kFail, 3},
           // Older than the window: forgotten.
           Row{{seconds(61), seconds(60), seconds(5)}, Action::kRestart, 2},
       }) {
    INFO(row.ago.size() << " earlier restarts");
    RestartHistory history;
    for (seconds ago : row.ago) history.recent_restarts.push_back(kNow - ago);
    const RestartDecision decision =
        DecideRestart(spec, kFailedEarly, history, kNow);
    CHECK(decision.action == row.action);
    CHECK(decision.history.recent_restarts.size() == row.kept);
    if (row.action == Action::kFail) {
      CHECK(decision.reason ==
            "not restarted: it would be restart 4 within 1m (max_restarts 3)");
    }
  }
}

TEST_CASE("max_restarts 0 never restarts") {
  WorkerSpec spec = Spec(RestartPolicy::kAlways);
  spec.max_restarts = 0;
  const RestartDecision decision =
      DecideRestart(spec, kFailedEarly, RestartHistory(), kNow);
  CHECK(decision.action == Action::kFail);
  CHECK(decision.reason ==
        "not restarted: it would be restart 1 within 1m (max_restarts 0)");
}

}  // namespace
}  // namespace aggregator
