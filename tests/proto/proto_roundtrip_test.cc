#include <catch2/catch.hpp>

#include "proto/admin.pb.h"
#include "proto/learner.pb.h"
#include "proto/worker.pb.h"

namespace {

template <typename Message>
Message RoundTrip(const Message& in) {
  std::string wire;
  REQUIRE(in.SerializeToString(&wire));
  Message out;
  REQUIRE(out.ParseFromString(wire));
  return out;
}

}  // namespace

TEST_CASE("LearnRequest keeps sample bytes, meta and order") {
  aggregator::v1::LearnRequest request;
  request.set_plan_id("plan-7");
  for (int i = 0; i < 3; ++i) {
    auto* sample = request.add_samples();
    sample->set_data(std::string("\0\xff payload ", 11) + std::to_string(i));
    (*sample->mutable_meta()->mutable_fields())["replay_unique_id"]
        .set_string_value("id" + std::to_string(i));
  }
  const auto out = RoundTrip(request);
  REQUIRE(out.plan_id() == "plan-7");
  REQUIRE(out.samples_size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(out.samples(i).data() == request.samples(i).data());
    CHECK(
        out.samples(i).meta().fields().at("replay_unique_id").string_value() ==
        "id" + std::to_string(i));
  }
}

TEST_CASE("DataDemand and LearnReply round trip every field") {
  aggregator::v1::DataDemand demand;
  demand.set_batch_size(128);
  demand.set_cur_learner_iter(42);
  demand.set_task_id("task");
  demand.set_buffer_id("buffer");
  demand.set_plan_id("p1");
  (*demand.mutable_extra()->mutable_fields())["lr"].set_number_value(0.5);
  const auto out = RoundTrip(demand);
  CHECK(out.batch_size() == 128);
  CHECK(out.cur_learner_iter() == 42);
  CHECK(out.task_id() == "task");
  CHECK(out.buffer_id() == "buffer");
  CHECK(out.plan_id() == "p1");
  CHECK(out.extra().fields().at("lr").number_value() == 0.5);

  aggregator::v1::LearnReply reply;
  reply.set_task_id("task");
  reply.set_buffer_id("buffer");
  auto& list = *(*reply.mutable_info()->mutable_fields())["priority"]
                    .mutable_list_value();
  list.add_values()->set_number_value(1.5);
  list.add_values()->set_number_value(2.5);
  const auto reply_out = RoundTrip(reply);
  CHECK(reply_out.task_id() == "task");
  REQUIRE(reply_out.info().fields().at("priority").list_value().values_size() ==
          2);
  CHECK(reply_out.info()
            .fields()
            .at("priority")
            .list_value()
            .values(1)
            .number_value() == 2.5);
}

TEST_CASE("Worker channel frames carry args, data and typed errors") {
  aggregator::v1::WorkerRequest request;
  request.set_req_id("r1");
  request.set_method("step");
  request.mutable_args()->add_values()->set_number_value(3);
  const auto request_out = RoundTrip(request);
  CHECK(request_out.method() == "step");
  CHECK(request_out.args().values(0).number_value() == 3);

  aggregator::v1::WorkerReply reply;
  reply.set_req_id("r1");
  reply.mutable_error()->set_kind(aggregator::v1::WorkerError::KIND_FAILED);
  reply.mutable_error()->set_message("boom");
  const auto reply_out = RoundTrip(reply);
  CHECK(reply_out.has_error());
  CHECK(reply_out.error().kind() == aggregator::v1::WorkerError::KIND_FAILED);
  CHECK(reply_out.error().message() == "boom");
  CHECK_FALSE(RoundTrip(aggregator::v1::WorkerReply()).has_error());
}

TEST_CASE("AggregatorStatus keeps learner and worker states") {
  aggregator::v1::AggregatorStatus status;
  auto* learner = status.add_learners();
  learner->set_id("learner0");
  learner->set_state(aggregator::v1::LEARNER_STATE_FAILED);
  learner->set_failures(3);
  auto* worker = status.add_workers();
  worker->set_name("gpu");
  worker->set_state(aggregator::v1::WORKER_STATE_BACKOFF);
  status.set_config_generation(2);
  const auto out = RoundTrip(status);
  CHECK(out.learners(0).state() == aggregator::v1::LEARNER_STATE_FAILED);
  CHECK(out.learners(0).failures() == 3);
  CHECK(out.workers(0).state() == aggregator::v1::WORKER_STATE_BACKOFF);
  CHECK(out.config_generation() == 2);
}
