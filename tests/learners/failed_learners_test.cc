// The failed learners as gRPC's standard error details: added, attached to a
// failed status (code and message kept, the google.rpc.Status repeating
// them), carried through an absl::Status payload, read back; nothing attached
// to an OK status or an empty list; details that do not parse read as none.
// Over a real gRPC call the details reach the caller (the trailer
// grpc-status-details-bin).
#include "lib/learners/failed_learners.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "google/rpc/status.pb.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

pb::FailedLearners TwoFailed() {
  pb::FailedLearners failed;
  AddFailedLearner("l0", "127.0.0.1:22300", grpc::StatusCode::UNAVAILABLE,
                   "not ready", &failed);
  AddFailedLearner("l2", "10.0.0.2:22300", grpc::StatusCode::INTERNAL,
                   "reply does not parse", &failed);
  return failed;
}

void CheckTwoFailed(const pb::FailedLearners& failed) {
  REQUIRE(failed.learners_size() == 2);
  CHECK(failed.learners(0).id() == "l0");
  CHECK(failed.learners(0).address() == "127.0.0.1:22300");
  CHECK(failed.learners(0).code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(failed.learners(0).message() == "not ready");
  CHECK(failed.learners(1).id() == "l2");
  CHECK(failed.learners(1).code() == grpc::StatusCode::INTERNAL);
}

TEST_CASE(
    "A failed status gets the learners as details; its code and message stay, "
    "and the details repeat them") {
  const grpc::Status plain(grpc::StatusCode::UNAVAILABLE,
                           "Learn: learner l0 not ready; l2 failed");
  const grpc::Status with = WithFailedLearners(plain, TwoFailed());
  CHECK(with.error_code() == plain.error_code());
  CHECK(with.error_message() == plain.error_message());
  google::rpc::Status details;
  REQUIRE(details.ParseFromString(with.error_details()));
  CHECK(details.code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(details.message() == plain.error_message());
  REQUIRE(details.details_size() == 1);
  CHECK(details.details(0).type_url() ==
        "type.googleapis.com/aggregator.v1.FailedLearners");
  CheckTwoFailed(ReadFailedLearners(with));
}

TEST_CASE("Nothing is attached to an OK status or for nobody") {
  const grpc::Status ok = WithFailedLearners(grpc::Status::OK, TwoFailed());
  CHECK(ok.ok());
  CHECK(ok.error_details().empty());
  const grpc::Status failed(grpc::StatusCode::INTERNAL, "x");
  CHECK(WithFailedLearners(failed, {}).error_details().empty());
  absl::Status absl_ok;
  AttachFailedLearners(TwoFailed(), &absl_ok);
  CHECK(absl_ok.ok());
  absl::Status absl_failed = absl::InternalError("x");
  AttachFailedLearners({}, &absl_failed);
  CHECK(ToGrpcWithFailedLearners(absl_failed).error_details().empty());
}

TEST_CASE(
    "An absl::Status carries the learners to the gRPC edge, where they become "
    "the details") {
  absl::Status status = absl::UnavailableError("2 of 3 learners failed");
  AttachFailedLearners(TwoFailed(), &status);
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK(status.message() == "2 of 3 learners failed");
  const grpc::Status edge = ToGrpcWithFailedLearners(status);
  CHECK(edge.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(edge.error_message() == "2 of 3 learners failed");
  CheckTwoFailed(ReadFailedLearners(edge));
  // Without the payload: ToGrpc's status, no details.
  const grpc::Status bare =
      ToGrpcWithFailedLearners(absl::DeadlineExceededError("late"));
  CHECK(bare.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(bare.error_details().empty());
}

TEST_CASE(
    "Details that are not a google.rpc.Status, or hold no list, read as none") {
  CHECK(ReadFailedLearners(grpc::Status::OK).learners().empty());
  CHECK(ReadFailedLearners(
            grpc::Status(grpc::StatusCode::INTERNAL, "x", "\xff\xff garbage"))
            .learners()
            .empty());
  google::rpc::Status other;
  other.set_code(grpc::StatusCode::INTERNAL);
  pb::Resource not_a_list;
  not_a_list.set_gpus(2);
  other.add_details()->PackFrom(not_a_list);
  CHECK(ReadFailedLearners(grpc::Status(grpc::StatusCode::INTERNAL, "x",
                                        other.SerializeAsString()))
            .learners()
            .empty());
  // Two lists merge, in order.
  google::rpc::Status two;
  two.add_details()->PackFrom(TwoFailed());
  pb::FailedLearners third;
  AddFailedLearner("l3", "a:1", grpc::StatusCode::CANCELLED, "", &third);
  two.add_details()->PackFrom(third);
  const pb::FailedLearners merged = ReadFailedLearners(
      grpc::Status(grpc::StatusCode::INTERNAL, "x", two.SerializeAsString()));
  REQUIRE(merged.learners_size() == 3);
  CHECK(merged.learners(2).id() == "l3");
}

// Fails every Learn with the two learners attached.
class FailingLearner : public pb::Learner::CallbackService {
  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const pb::LearnRequest*,
                                  pb::LearnReply*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(WithFailedLearners(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "learners failed"),
        TwoFailed()));
    return reactor;
  }
};

TEST_CASE("Over a real call the caller reads the learners from the trailer") {
  FailingLearner service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  auto stub = pb::Learner::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(15));
  pb::LearnReply reply;
  const grpc::Status status = stub->Learn(&context, {}, &reply);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(status.error_message() == "learners failed");
  CheckTwoFailed(ReadFailedLearners(status));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

}  // namespace
}  // namespace aggregator
