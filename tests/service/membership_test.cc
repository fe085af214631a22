// Membership (lib/service/membership): which ready learners take part in the
// plans under on_learner_failure, and the standings status shows.
#include "lib/service/membership.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace aggregator {
namespace {

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
  membership.Rejoined(ready[1]);
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

}  // namespace
}  // namespace aggregator
