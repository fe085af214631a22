#include "lib/aggregation/split_planner.h"

#include <catch2/catch.hpp>

using aggregator::PlanClaim;
using aggregator::PlanSlice;
using aggregator::SplitPlanner;

namespace {

std::string Message(const absl::StatusOr<PlanClaim>& claim) {
  REQUIRE_FALSE(claim.ok());
  CHECK(claim.status().code() == absl::StatusCode::kFailedPrecondition);
  return std::string(claim.status().message());
}

}  // namespace

TEST_CASE("Learn before any GetData is a precondition failure") {
  SplitPlanner planner;
  CHECK_THAT(Message(planner.Claim("")), Catch::Contains("GetData first"));
  CHECK(planner.LargestTotal() == 0);
}

TEST_CASE("Plans are kept by id: concurrent coordinators each use their own") {
  SplitPlanner planner;
  auto first = planner.Record({PlanSlice{"a", 1, 2, ""}});
  auto second = planner.Record({PlanSlice{"a", 1, 3, ""}});
  CHECK(first->id != second->id);
  CHECK(second->total == 3);
  CHECK(planner.LargestTotal() == 3);
  // Both are valid at once (step t learns while step t+1 is planned).
  auto claim_first = planner.Claim(first->id);
  auto claim_second = planner.Claim(second->id);
  REQUIRE(claim_first.ok());
  REQUIRE(claim_second.ok());
  CHECK(claim_first->plan().id == first->id);
  CHECK(claim_second->plan().total == 3);
}

TEST_CASE("An empty plan_id means the newest plan") {
  SplitPlanner planner;
  planner.Record({PlanSlice{"a", 1, 2, ""}});
  auto second = planner.Record({PlanSlice{"a", 1, 3, ""}});
  auto claim = planner.Claim("");
  REQUIRE(claim.ok());
  CHECK(claim->plan().id == second->id);
  claim->Consume();
  // A retry without GetData must not fall back to the older plan.
  CHECK_THAT(Message(planner.Claim("")), Catch::Contains("already used"));
}

TEST_CASE("A plan trains once: consumed by success, given back by failure") {
  SplitPlanner planner;
  auto plan = planner.Record({PlanSlice{"a", 1, 4, ""}});
  {
    auto claim = planner.Claim(plan->id);
    REQUIRE(claim.ok());
    // While a Learn holds it, another Learn cannot use it.
    CHECK_THAT(Message(planner.Claim(plan->id)), Catch::Contains("in use"));
  }  // the Learn failed: the plan is back
  auto retry = planner.Claim(plan->id);
  REQUIRE(retry.ok());
  retry->Consume();
  CHECK_THAT(Message(planner.Claim(plan->id)),
             Catch::Contains("already used") && Catch::Contains(plan->id));
  CHECK(planner.LargestTotal() == 0);
}

TEST_CASE("Only the newest plans are kept; older ones expire") {
  SplitPlanner planner(/*capacity=*/2);
  auto oldest = planner.Record({PlanSlice{"a", 1, 1, ""}});
  auto held = planner.Record({PlanSlice{"a", 1, 2, ""}});
  auto claim = planner.Claim(held->id);  // a claimed plan never expires
  REQUIRE(claim.ok());
  planner.Record({PlanSlice{"a", 1, 3, ""}});
  planner.Record({PlanSlice{"a", 1, 4, ""}});
  CHECK_THAT(
      Message(planner.Claim(oldest->id)),
      Catch::Contains("unknown or expired") && Catch::Contains("2 newest"));
  claim->Consume();
}

TEST_CASE("Plan ids differ between planners (process restarts)") {
  SplitPlanner a;
  SplitPlanner b;
  CHECK(a.Record({})->id != b.Record({})->id);
  CHECK_THAT(Message(b.Claim(a.Record({})->id)),
             Catch::Contains("unknown or expired"));
}

TEST_CASE("A wrong sample count names both numbers and the split") {
  SplitPlanner planner;
  auto plan =
      planner.Record({PlanSlice{"l0", 1, 32, ""}, PlanSlice{"l1", 1, 32, ""}});
  CHECK(aggregator::CheckSampleCount(*plan, 64).ok());
  auto wrong = aggregator::CheckSampleCount(*plan, 63);
  CHECK(wrong.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(wrong.message()), Catch::Contains("63") &&
                                               Catch::Contains("64") &&
                                               Catch::Contains("l1: 32"));
}
