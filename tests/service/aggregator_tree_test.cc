// Trees of aggregators stay true (issue 13): a parent's GetResource follows a
// child aggregator's learners within resource_refresh, and a plan the parent
// made before the child changed is refused, naming the child; and a parent
// over a child aggregator and a plain learner merges their Learn infos
// (issue 26 item 15).
#include <catch2/catch.hpp>

#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
using aggregator::AggregatorConfig;
using aggregator::ExampleLearnerOptions;
namespace pb = aggregator::v1;

namespace {

constexpr milliseconds kRefresh(200);

int LearnersOf(pb::Learner::Stub& stub) {
  pb::Resource resource;
  const grpc::Status status = stub.GetResource(Deadline().get(), {}, &resource);
  return status.ok() ? resource.learners() : -1;
}

}  // namespace

TEST_CASE(
    "A parent over two child aggregators follows a child's lost learner within "
    "resource_refresh, and refuses the plan made before it") {
  auto l1a = StartLearner();
  auto l1b = StartLearner();
  auto l2a = StartLearner();
  auto l2b = StartLearner();
  auto child1 = StartReadyAggregator(FastConfig(
      {Endpoint("l1a", l1a->address), Endpoint("l1b", l1b->address)}, 1));
  auto child2 = StartReadyAggregator(FastConfig(
      {Endpoint("l2a", l2a->address), Endpoint("l2b", l2b->address)}, 1));
  REQUIRE(Eventually([&] {
    return child1->pool().ReadyCount() == 2 && child2->pool().ReadyCount() == 2;
  }));
  AggregatorConfig parent_config =
      FastConfig({Endpoint("child1", child1->address()),
                  Endpoint("child2", child2->address())},
                 2);
  parent_config.connect.resource_refresh = kRefresh;
  auto parent = StartReadyAggregator(parent_config);
  auto stub = LearnerStub(parent->address());
  REQUIRE(Eventually([&] { return LearnersOf(*stub) == 4; }));

  pb::DataDemand before;
  REQUIRE(stub->GetData(Deadline().get(), {}, &before).ok());
  CHECK(before.batch_size() == 4 * 32);

  // A learner of child2 goes away.
  const auto stopped = Clock::now();
  l2b->Shutdown();
  REQUIRE(
      Eventually([&] { return LearnersOf(*stub) == 3; }, milliseconds(5000)));
  const double seconds = Seconds(Clock::now() - stopped);
  std::printf(
      "the parent's GetResource went from 4 to 3 learners %.0f ms after "
      "the child's learner stopped (resource_refresh %lld ms)\n",
      seconds * 1000, static_cast<long long>(kRefresh.count()));
  // The child's own pool notices, then one refresh: well within a second.
  CHECK(seconds < 1.0);

  // The plan made over 4 is stale: child2 refuses its part, and the parent
  // says which child.
  pb::LearnRequest batch = Batch(static_cast<int>(before.batch_size()), "old-");
  batch.set_plan_id(before.plan_id());
  pb::LearnReply reply;
  const grpc::Status stale = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(stale.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(stale.error_message(),
             Catch::Contains("child2 (" + child2->address() + ")") &&
                 Catch::Contains("changed since GetData"));

  // The next step is over the 3 learners left.
  pb::DataDemand after;
  REQUIRE(stub->GetData(Deadline().get(), {}, &after).ok());
  CHECK(after.batch_size() == 3 * 32);
  batch = Batch(static_cast<int>(after.batch_size()), "new-");
  batch.set_plan_id(after.plan_id());
  REQUIRE(stub->Learn(Deadline().get(), batch, &reply).ok());
}

TEST_CASE(
    "A parent over a child aggregator and a plain learner merges their "
    "per-learner values into one list, one entry per learner in plan order") {
  // Issue 26 item 15: the child sends `received` as a list of its 2
  // learners' values, the plain learner as a scalar; the parent used to fail
  // every Learn ("child sent a list but plain sent a scalar").
  auto l1 = StartLearner();
  auto l2 = StartLearner();
  ExampleLearnerOptions small;
  small.batch_size = 16;
  auto plain = StartLearner(small);
  auto child = StartReadyAggregator(FastConfig(
      {Endpoint("l1", l1->address), Endpoint("l2", l2->address)}, 2));
  auto parent = StartReadyAggregator(FastConfig(
      {Endpoint("child", child->address()), Endpoint("plain", plain->address)},
      2));
  auto stub = LearnerStub(parent->address());

  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  CHECK(demand.batch_size() == 2 * 32 + 16);
  CHECK(demand.learners() == 3);  // a grandparent's merge needs it

  pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()), "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = stub->Learn(Deadline().get(), batch, &reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  const auto& fields = reply.info().fields();
  REQUIRE(fields.count("received") == 1);
  const auto& received = fields.at("received").list_value();
  REQUIRE(received.values_size() == 3);
  CHECK(received.values(0).number_value() == 32);  // l1, through the child
  CHECK(received.values(1).number_value() == 32);  // l2, through the child
  CHECK(received.values(2).number_value() == 16);  // plain
  // The per-sample lists still line up with the batch.
  CHECK(fields.at("priority_info")
            .struct_value()
            .fields()
            .at("replay_unique_id")
            .list_value()
            .values_size() == demand.batch_size());
}
