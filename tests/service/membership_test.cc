// Membership (lib/service/membership): which ready learners take part in the
// plans under on_learner_failure, and the standings status shows.
#include "lib/service/membership.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "lib/base/clock.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;

LearnerHandle Learner(const std::string& id, uint64_t epoch = 1) {
  LearnerHandle learner;
  learner.id = id;
  learner.address = HostPort::Tcp("127.0.0.1", 1);
  learner.epoch = epoch;
  return learner;
}

std::vector<std::string> Ids(const std::vector<LearnerHandle>& learners) {
  std::vector<std::string> ids;
  for (const LearnerHandle& learner : learners) ids.push_back(learner.id);
  return ids;
}

TEST_CASE(
    "A reload from shrink to fail clears the standings: a learner out under "
    "shrink is neither out in status nor left out of the plans (issue 26 "
    "item 12)") {
  // Retries far off: only the policy can bring it back within the test.
  Membership membership(std::chrono::minutes(10), std::chrono::minutes(10));
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  membership.SetPolicy(OnLearnerFailure::kShrink);
  REQUIRE(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0", "l1"});
  membership.Failed(ready[1], "Learn: connection reset");
  REQUIRE(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0"});
  REQUIRE(membership.Standings().count("l1") == 1);
  CHECK(membership.Standings().at("l1").state == LearnerStanding::kOut);

  membership.SetPolicy(OnLearnerFailure::kFail);
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0", "l1"});
  CHECK(membership.Standings().empty());

  // Back to shrink: the old failure (and its retry delay) is gone too.
  membership.SetPolicy(OnLearnerFailure::kShrink);
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0", "l1"});
  CHECK(membership.Standings().empty());
}

TEST_CASE(
    "A reload to fail keeps who has the open task: back under shrink, only "
    "a learner that never had it is replayed") {
  Membership membership(std::chrono::minutes(10), std::chrono::minutes(10));
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  aggregator::v1::StartTaskRequest task;
  membership.TaskStarted(task, {ready[0]});
  membership.SetPolicy(OnLearnerFailure::kFail);
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const Membership::View view = membership.Select(ready);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0"});
  CHECK(Ids(view.to_replay) == std::vector<std::string>{"l1"});
}

TEST_CASE(
    "A replay of a task replaced or closed while it was in flight does not "
    "make its learner a member of the new task: the new one is replayed") {
  Membership membership(std::chrono::minutes(10), std::chrono::minutes(10));
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  aggregator::v1::StartTaskRequest first;
  first.mutable_task_info()->mutable_fields()->operator[]("n").set_number_value(
      1);
  aggregator::v1::StartTaskRequest second = first;
  second.mutable_task_info()
      ->mutable_fields()
      ->
      operator[]("n")
      .set_number_value(2);

  for (const bool closed_between : {false, true}) {
    INFO("closed between: " << closed_between);
    membership.TaskStarted(first, {ready[0]});
    const Membership::View old = membership.Select(ready, true);
    REQUIRE(Ids(old.to_replay) == std::vector<std::string>{"l1"});
    REQUIRE(old.task.has_value());
    // The coordinator starts another task (on l0) while l1's replay of the
    // first is in flight; the replay then succeeds.
    if (closed_between) membership.TaskClosed();
    membership.TaskStarted(second, {ready[0]});
    membership.ReplayEnded(ready[1]);
    membership.Rejoined(ready[1], old.task_seq);

    const Membership::View next = membership.Select(ready, true);
    CHECK(Ids(next.members) == std::vector<std::string>{"l0"});
    REQUIRE(Ids(next.to_replay) == std::vector<std::string>{"l1"});
    REQUIRE(next.task.has_value());
    CHECK(next.task->task_info().fields().at("n").number_value() == 2);
    membership.ReplayEnded(ready[1]);
    membership.Rejoined(ready[1], next.task_seq);
    CHECK(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0", "l1"});
    membership.TaskClosed();
  }
}

TEST_CASE(
    "A joining learner's task replay is handed to one call at a time, "
    "however many GetData select at once (issue 26 item 6)") {
  Membership membership(std::chrono::minutes(10), std::chrono::minutes(10));
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  aggregator::v1::StartTaskRequest task;
  membership.TaskStarted(task, {ready[0]});

  // Three GetData at once: the first replays to l1, the others plan without
  // it and do not replay again.
  const Membership::View first = membership.Select(ready, true);
  CHECK(Ids(first.members) == std::vector<std::string>{"l0"});
  CHECK(Ids(first.to_replay) == std::vector<std::string>{"l1"});
  REQUIRE(first.task.has_value());
  for (int i = 0; i < 2; ++i) {
    const Membership::View other = membership.Select(ready, true);
    CHECK(Ids(other.members) == std::vector<std::string>{"l0"});
    CHECK(other.to_replay.empty());
    CHECK(Ids(other.replaying) == std::vector<std::string>{"l1"});
  }
  // A look that replays nothing claims nothing.
  CHECK(Ids(membership.Select(ready).replaying) ==
        std::vector<std::string>{"l1"});

  // A replay that ended without success (its learner not out: the policy
  // may have changed meanwhile) can be handed out again.
  membership.ReplayEnded(ready[1]);
  CHECK(Ids(membership.Select(ready).to_replay) ==
        std::vector<std::string>{"l1"});
  const Membership::View again = membership.Select(ready, true);
  CHECK(Ids(again.to_replay) == std::vector<std::string>{"l1"});
  membership.ReplayEnded(ready[1]);
  membership.Rejoined(ready[1], again.task_seq);
  const Membership::View joined = membership.Select(ready, true);
  CHECK(Ids(joined.members) == std::vector<std::string>{"l0", "l1"});
  CHECK(joined.to_replay.empty());
  CHECK(joined.replaying.empty());

  // Reconnected (a new epoch) while a replay to the old connection is in
  // flight: the new connection gets its own.
  membership.TaskClosed();
  membership.TaskStarted(task, {ready[0]});
  REQUIRE(Ids(membership.Select(ready, true).to_replay) ==
          std::vector<std::string>{"l1"});
  const std::vector<LearnerHandle> restarted = {Learner("l0"),
                                                Learner("l1", 2)};
  CHECK(Ids(membership.Select(restarted, true).to_replay) ==
        std::vector<std::string>{"l1"});
  membership.ReplayEnded(ready[1]);  // the old one's: says nothing now
  CHECK(Ids(membership.Select(restarted, true).replaying) ==
        std::vector<std::string>{"l1"});
}

// Probes the out learners whose retry is due, as the rejoin step does, each
// answering; returns their ids.
std::vector<std::string> ProbeAnswered(
    Membership& membership, const std::vector<LearnerHandle>& ready) {
  const std::vector<LearnerHandle> due = membership.DueProbes(ready);
  for (const LearnerHandle& learner : due) membership.ProbeAnswered(learner);
  return Ids(due);
}

// Timing on a FakeClock: every delay is exact, and nothing waits in real time.

TEST_CASE(
    "Under shrink a failed learner is probed first_retry after it failed, "
    "the delay doubling up to max_retry while it keeps failing, and is back "
    "when its probe answers") {
  FakeClock clock;
  Membership membership(milliseconds(1000), milliseconds(4000), &clock);
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  REQUIRE(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0", "l1"});
  // Each failure: out for exactly its delay, then back in the plans.
  for (const int64_t delay_ms : {1000, 2000, 4000, 4000}) {
    INFO("retry delay " << delay_ms << " ms");
    membership.Failed(ready[1], "Learn: UNAVAILABLE: connection reset");
    CHECK(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0"});
    clock.Advance(milliseconds(delay_ms - 1));
    CHECK(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0"});
    REQUIRE(membership.Standings().count("l1") == 1);
    CHECK(membership.Standings().at("l1").state == LearnerStanding::kOut);
    CHECK(membership.Standings().at("l1").why ==
          "Learn: UNAVAILABLE: connection reset");
    CHECK(membership.DueProbes(ready).empty());
    clock.Advance(milliseconds(1));
    CHECK(ProbeAnswered(membership, ready) == std::vector<std::string>{"l1"});
    CHECK(Ids(membership.Select(ready).members) ==
          std::vector<std::string>{"l0", "l1"});
    CHECK(membership.Standings().empty());
  }
}

TEST_CASE(
    "A learner that reconnected is back at once, its retry delay started "
    "afresh; a failure of a call from before it reconnected is ignored") {
  FakeClock clock;
  Membership membership(milliseconds(1000), milliseconds(60000), &clock);
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> before = {Learner("l0"), Learner("l1", 1)};
  const std::vector<LearnerHandle> after = {Learner("l0"), Learner("l1", 2)};
  membership.Select(before);
  membership.Failed(before[1], "Learn: connection reset");
  clock.Advance(milliseconds(1000));
  REQUIRE(ProbeAnswered(membership, before) == std::vector<std::string>{"l1"});
  membership.Select(before);
  membership.Failed(before[1], "Learn: connection reset");  // 2 s now
  CHECK(Ids(membership.Select(before).members) ==
        std::vector<std::string>{"l0"});

  // Reconnected: in again without waiting.
  CHECK(Ids(membership.Select(after).members) ==
        std::vector<std::string>{"l0", "l1"});
  // A late failure of the old connection's call says nothing of the new.
  membership.Failed(before[1], "Learn: connection reset");
  CHECK(Ids(membership.Select(after).members) ==
        std::vector<std::string>{"l0", "l1"});
  // The new connection's first failure waits first_retry, not 4 s.
  membership.Failed(after[1], "Learn: DEADLINE_EXCEEDED");
  clock.Advance(milliseconds(999));
  CHECK(membership.DueProbes(after).empty());
  CHECK(Ids(membership.Select(after).members) ==
        std::vector<std::string>{"l0"});
  clock.Advance(milliseconds(1));
  // A probe of the old connection says nothing of the new.
  CHECK_FALSE(membership.ProbeAnswered(before[1]));
  CHECK(ProbeAnswered(membership, after) == std::vector<std::string>{"l1"});
  CHECK(Ids(membership.Select(after).members) ==
        std::vector<std::string>{"l0", "l1"});
}

TEST_CASE(
    "While a task is open a learner that stayed connected comes back as it "
    "was, one that reconnected rejoins through the task's replay, and the "
    "generation moves once per change of members") {
  FakeClock clock;
  Membership membership(milliseconds(1000), milliseconds(1000), &clock);
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  const uint64_t start = membership.Select(ready).generation;
  CHECK(membership.Select(ready).generation == start);  // nothing changed
  aggregator::v1::StartTaskRequest task;
  (*task.mutable_task_info()->mutable_fields())["name"].set_string_value(
      "task-7");
  membership.TaskStarted(task, ready);
  CHECK(membership.Select(ready).generation == start);

  membership.Failed(ready[1], "Learn: DEADLINE_EXCEEDED");
  Membership::View view = membership.Select(ready, true);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0"});
  CHECK(view.generation == start + 1);
  CHECK(membership.generation() == start + 1);
  // Still connected, so it still has the task: back without a replay.
  clock.Advance(milliseconds(1000));
  REQUIRE(ProbeAnswered(membership, ready) == std::vector<std::string>{"l1"});
  view = membership.Select(ready, true);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0", "l1"});
  CHECK(view.to_replay.empty());
  CHECK(view.generation == start + 2);

  // Reconnected: its task is gone. It is replayed to before it joins; the
  // members did not change, nor did the generation.
  const std::vector<LearnerHandle> restarted = {Learner("l0"),
                                                Learner("l1", 2)};
  view = membership.Select(restarted, true);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0"});
  CHECK(Ids(view.to_replay) == std::vector<std::string>{"l1"});
  REQUIRE(view.task.has_value());
  CHECK(view.task->SerializeAsString() == task.SerializeAsString());
  CHECK(view.generation == start + 3);
  CHECK(membership.Standings().at("l1").state == LearnerStanding::kRejoining);

  // A failed replay puts it out, for first_retry.
  membership.ReplayEnded(restarted[1]);
  membership.Failed(restarted[1], "StartTask (replay) failed: UNAVAILABLE");
  CHECK(membership.Standings().at("l1").state == LearnerStanding::kOut);
  clock.Advance(milliseconds(999));
  view = membership.Select(restarted, true);
  CHECK(view.to_replay.empty());
  CHECK(view.replaying.empty());
  clock.Advance(milliseconds(1));
  REQUIRE(ProbeAnswered(membership, restarted) ==
          std::vector<std::string>{"l1"});
  view = membership.Select(restarted, true);
  REQUIRE(Ids(view.to_replay) == std::vector<std::string>{"l1"});
  CHECK(view.generation == start + 3);

  // Replayed: a member again, one generation later.
  membership.ReplayEnded(restarted[1]);
  membership.Rejoined(restarted[1], view.task_seq);
  view = membership.Select(restarted, true);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0", "l1"});
  CHECK(view.generation == start + 4);
  CHECK(membership.Standings().empty());
  const aggregator::v1::Membership stamp = Membership::ToProto(view);
  CHECK(stamp.generation() == start + 4);
  CHECK(std::vector<std::string>(stamp.members().begin(),
                                 stamp.members().end()) ==
        std::vector<std::string>{"l0", "l1"});
}

TEST_CASE(
    "An out learner whose retry is due stays out until its probe answers; "
    "a failed probe keeps it out and it is probed again first_retry later, "
    "its retry delay kept for its next failure (issue 28)") {
  FakeClock clock;
  Membership membership(milliseconds(1000), milliseconds(30000), &clock);
  membership.SetPolicy(OnLearnerFailure::kShrink);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  const uint64_t start = membership.Select(ready).generation;
  membership.Failed(ready[1], "GetData: late");
  membership.Select(ready);
  clock.Advance(milliseconds(1000));
  membership.Failed(ready[1], "GetData: late");  // out for 2 s now
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0"});
  clock.Advance(milliseconds(2000));

  // Due: not back in the plans by itself, probed once at a time.
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0"});
  CHECK(membership.Standings().at("l1").state == LearnerStanding::kOut);
  REQUIRE(Ids(membership.DueProbes(ready)) == std::vector<std::string>{"l1"});
  CHECK(membership.DueProbes(ready).empty());  // claimed
  clock.Advance(milliseconds(5000));
  CHECK(membership.DueProbes(ready).empty());  // still claimed
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0"});

  // Its probe failed: out still, due again first_retry later (not 4 s).
  membership.ProbeFailed(ready[1]);
  CHECK(membership.Standings().at("l1").state == LearnerStanding::kOut);
  CHECK(membership.Standings().at("l1").why == "GetData: late");
  clock.Advance(milliseconds(999));
  CHECK(membership.DueProbes(ready).empty());
  clock.Advance(milliseconds(1));
  REQUIRE(Ids(membership.DueProbes(ready)) == std::vector<std::string>{"l1"});
  CHECK(membership.Select(ready).generation == start + 1);

  // Answered: back, the generation moves.
  CHECK(membership.ProbeAnswered(ready[1]));
  Membership::View view = membership.Select(ready);
  CHECK(Ids(view.members) == std::vector<std::string>{"l0", "l1"});
  CHECK(view.generation == start + 2);
  CHECK(membership.Standings().empty());
  CHECK_FALSE(membership.ProbeAnswered(ready[1]));  // in: nothing to do

  // Its delay was kept: failing again waits 4 s before its next probe.
  membership.Failed(ready[1], "GetData: late");
  clock.Advance(milliseconds(3999));
  CHECK(membership.DueProbes(ready).empty());
  clock.Advance(milliseconds(1));
  CHECK(Ids(membership.DueProbes(ready)) == std::vector<std::string>{"l1"});

  // A probe of an old connection, or a reconnect meanwhile: not its business.
  const std::vector<LearnerHandle> restarted = {Learner("l0"),
                                                Learner("l1", 2)};
  CHECK(Ids(membership.Select(restarted).members) ==
        std::vector<std::string>{"l0", "l1"});
  CHECK_FALSE(membership.ProbeAnswered(ready[1]));
  membership.ProbeFailed(ready[1]);
  CHECK(membership.Standings().empty());
  CHECK(membership.DueProbes(restarted).empty());
}

TEST_CASE("Under fail no learner is probed") {
  FakeClock clock;
  Membership membership(milliseconds(1000), milliseconds(30000), &clock);
  const std::vector<LearnerHandle> ready = {Learner("l0"), Learner("l1")};
  membership.SetPolicy(OnLearnerFailure::kShrink);
  membership.Failed(ready[1], "Learn: late");
  membership.SetPolicy(OnLearnerFailure::kFail);
  clock.Advance(milliseconds(5000));
  CHECK(membership.DueProbes(ready).empty());
  CHECK(Ids(membership.Select(ready).members) ==
        std::vector<std::string>{"l0", "l1"});
}

}  // namespace
}  // namespace aggregator
