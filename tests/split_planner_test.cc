#include "lib/aggregation/split_planner.h"

#include <catch2/catch.hpp>

using aggregator::PlanSlice;
using aggregator::SplitPlanner;

TEST_CASE("Learn before any GetData is a precondition failure") {
  SplitPlanner planner;
  auto plan = planner.Find("");
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(plan.status().message()),
             Catch::Contains("GetData first"));
}

TEST_CASE("Only the latest plan is valid; empty means latest") {
  SplitPlanner planner;
  auto first = planner.Record({PlanSlice{"a", 1, 2, ""}});
  auto second = planner.Record({PlanSlice{"a", 1, 3, ""}});
  CHECK(first->id != second->id);
  CHECK(second->total == 3);
  auto latest = planner.Find("");
  REQUIRE(latest.ok());
  CHECK((*latest)->id == second->id);
  REQUIRE(planner.Find(second->id).ok());
  auto stale = planner.Find(first->id);
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(stale.status().message()),
             Catch::Contains(first->id) && Catch::Contains(second->id));
}

TEST_CASE("Plan ids differ between planners (process restarts)") {
  SplitPlanner a;
  SplitPlanner b;
  CHECK(a.Record({})->id != b.Record({})->id);
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
