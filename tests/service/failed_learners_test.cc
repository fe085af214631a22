// Issue 27: a call that fails because learners failed carries them in gRPC's
// standard error details (grpc-status-details-bin: a google.rpc.Status packing
// aggregator.v1.FailedLearners), read here as any gRPC client reads them. The
// status message stays as it was.
#include <catch2/catch.hpp>

#include "google/rpc/status.pb.h"
#include "tests/testing/test_cluster.h"
#include "tools/cli/learn_client.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;

namespace {

// The details as a client decodes them, checked against the status they
// came with.
pb::FailedLearners Details(const grpc::Status& status) {
  INFO(status.error_message());
  REQUIRE_FALSE(status.ok());
  REQUIRE_FALSE(status.error_details().empty());
  google::rpc::Status details;
  REQUIRE(details.ParseFromString(status.error_details()));
  CHECK(details.code() == static_cast<int>(status.error_code()));
  CHECK(details.message() == status.error_message());
  REQUIRE(details.details_size() == 1);
  pb::FailedLearners failed;
  REQUIRE(details.details(0).UnpackTo(&failed));
  return failed;
}

void CheckOne(const pb::FailedLearners& failed, const std::string& id,
              const std::string& address, grpc::StatusCode code,
              const std::string& message) {
  REQUIRE(failed.learners_size() == 1);
  const pb::FailedLearner& learner = failed.learners(0);
  CHECK(learner.id() == id);
  CHECK(learner.address() == address);
  CHECK(learner.code() == static_cast<int>(code));
  CHECK(learner.message() == message);
}

// A learner that answers Learn with a reply nested deeper than protobuf
// parses (a Struct of Structs): the aggregator cannot use it.
class DeepReplyLearner final : public pb::Learner::Service {
 public:
  grpc::Status GetResource(grpc::ServerContext*, const pb::GetResourceRequest*,
                           pb::Resource* reply) override {
    reply->set_learners(1);
    return grpc::Status::OK;
  }
  grpc::Status GetData(grpc::ServerContext*, const pb::GetDataRequest*,
                       pb::DataDemand* reply) override {
    reply->set_batch_size(4);
    return grpc::Status::OK;
  }
  grpc::Status Learn(grpc::ServerContext*, const pb::LearnRequest*,
                     pb::LearnReply* reply) override {
    google::protobuf::Struct* level = reply->mutable_info();
    for (int i = 0; i < 60; ++i) {
      level = (*level->mutable_fields())["deeper"].mutable_struct_value();
    }
    return grpc::Status::OK;
  }
};

}  // namespace

TEST_CASE("A learner failing a call is in the call's error details") {
  // One section per fanned-out call: "bad" fails it, "good" does not.
  const std::string method = GENERATE(as<std::string>{}, "StartTask", "GetData",
                                      "Learn", "LearnStream", "CloseTask");
  aggregator::ExampleLearnerOptions failing;
  // A plain learner is sent its LearnStream slice as one Learn.
  failing.fail_on = method == "LearnStream" ? "Learn" : method;
  auto good = StartLearner();
  auto bad = StartLearner(failing);
  auto server = StartReadyAggregator(FastConfig(
      {Endpoint("good", good->address), Endpoint("bad", bad->address)}, 2));
  auto stub = LearnerStub(server->address());
  grpc::Status status;
  if (method == "StartTask") {
    pb::StartTaskReply reply;
    status = stub->StartTask(Deadline().get(), {}, &reply);
  } else if (method == "GetData") {
    pb::DataDemand demand;
    status = stub->GetData(Deadline().get(), {}, &demand);
  } else if (method == "CloseTask") {
    pb::CloseTaskReply reply;
    status = stub->CloseTask(Deadline().get(), {}, &reply);
  } else {
    pb::DataDemand demand;
    REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
    pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()), "s");
    batch.set_plan_id(demand.plan_id());
    aggregator::LearnOptions options;
    options.stream_threshold_bytes = method == "LearnStream" ? 0 : 1 << 30;
    options.stream_message_bytes = 256;
    pb::LearnReply reply;
    bool streamed = false;
    status = aggregator::LearnBatch(
        *stub, [] { return Deadline(); }, batch, options, &reply, &streamed);
    CHECK(streamed == (method == "LearnStream"));
  }
  INFO(method << ": " << status.error_message());
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  // The message is the one people read, as before.
  CHECK_THAT(status.error_message(),
             Catch::Contains("bad (" + bad->address + ")") &&
                 Catch::Contains("injected failure in"));
  CheckOne(Details(status), "bad", bad->address, grpc::StatusCode::INTERNAL,
           "injected failure in " + failing.fail_on);
}

TEST_CASE("A Learn reply the aggregator cannot parse names its learner") {
  DeepReplyLearner learner;
  std::string address;
  auto learner_server = ServeOnLoopback(&learner, &address);
  auto server =
      StartReadyAggregator(FastConfig({Endpoint("deep", address)}, 1));
  auto stub = LearnerStub(server->address());
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  pb::LearnRequest batch = Batch(4, "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CheckOne(Details(status), "deep", address, grpc::StatusCode::INTERNAL,
           "sent a LearnReply nested deeper than protobuf's limit of 100 "
           "levels (a Struct of Structs in its info)");
  learner_server->Shutdown(std::chrono::system_clock::now());
}

TEST_CASE("Too few learners ready: each one missing is in the details") {
  auto ready = StartLearner();
  const std::string dead = "127.0.0.1:" + std::to_string(ClosedPort());
  auto server = StartAggregator(FastConfig(
      {Endpoint("ready", ready->address), Endpoint("ghost", dead)}, 2));
  REQUIRE(Eventually([&] {
    return StateOf(*server, "ready") == aggregator::LearnerState::kReady;
  }));
  auto stub = LearnerStub(server->address());
  pb::Resource resource;
  const grpc::Status status =
      stub->GetResource(Deadline().get(), {}, &resource);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  const pb::FailedLearners failed = Details(status);
  REQUIRE(failed.learners_size() == 1);
  CHECK(failed.learners(0).id() == "ghost");
  CHECK(failed.learners(0).address() == dead);
  CHECK(failed.learners(0).code() ==
        static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  // Its state, and why when the pool knows yet.
  CHECK_THAT(failed.learners(0).message(),
             Catch::StartsWith("connecting") || Catch::StartsWith("failed"));
}
