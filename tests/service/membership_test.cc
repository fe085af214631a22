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

}  // namespace
}  // namespace aggregator
