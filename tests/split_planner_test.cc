#include "lib/split_planner.h"

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

TEST_CASE("SplitBatch moves samples to slices in order without copying") {
  SplitPlanner planner;
  auto plan =
      planner.Record({PlanSlice{"l0", 1, 2, "child-plan"},
                      PlanSlice{"l1", 1, 0, ""}, PlanSlice{"l2", 1, 3, ""}});
  aggregator::v1::LearnRequest batch;
  std::vector<const char*> payloads;
  for (int i = 0; i < 5; ++i) {
    batch.add_samples()->set_data(
        std::string(1000, static_cast<char>('a' + i)));
    payloads.push_back(batch.samples(i).data().data());
  }
  auto slices = aggregator::SplitBatch(*plan, &batch);
  REQUIRE(slices.size() == 3);
  CHECK(batch.samples_size() == 0);
  CHECK(slices[0].plan_id() == "child-plan");
  REQUIRE(slices[0].samples_size() == 2);
  REQUIRE(slices[1].samples_size() == 0);
  REQUIRE(slices[2].samples_size() == 3);
  int index = 0;
  for (const auto& slice : slices) {
    for (const auto& sample : slice.samples()) {
      CHECK(sample.data()[0] == 'a' + index);
      // The very same buffer: moved, not copied.
      CHECK(sample.data().data() == payloads[index]);
      ++index;
    }
  }
}
