#include "lib/learners/failed_learners.h"

#include "google/rpc/status.pb.h"
#include "lib/base/grpc_status.h"

namespace aggregator {
namespace {

// The payload's key is the type URL an Any packing the message would carry.
constexpr char kPayloadUrl[] =
    "type.googleapis.com/aggregator.v1.FailedLearners";

}  // namespace

void AddFailedLearner(const std::string& id, const std::string& address,
                      grpc::StatusCode code, const std::string& message,
                      aggregator::v1::FailedLearners* failed) {
  aggregator::v1::FailedLearner* learner = failed->add_learners();
  learner->set_id(id);
  learner->set_address(address);
  learner->set_code(static_cast<int32_t>(code));
  learner->set_message(message);
}

grpc::Status WithFailedLearners(const grpc::Status& status,
                                const aggregator::v1::FailedLearners& failed) {
  if (status.ok() || failed.learners().empty()) return status;
  // gRPC sends these bytes as they are; by convention the google.rpc.Status
  // repeats the call's code and message.
  google::rpc::Status details;
  details.set_code(static_cast<int32_t>(status.error_code()));
  details.set_message(status.error_message());
  details.add_details()->PackFrom(failed);
  return grpc::Status(status.error_code(), status.error_message(),
                      details.SerializeAsString());
}

void AttachFailedLearners(const aggregator::v1::FailedLearners& failed,
                          absl::Status* status) {
  if (status->ok() || failed.learners().empty()) return;
  status->SetPayload(kPayloadUrl, absl::Cord(failed.SerializeAsString()));
}

grpc::Status ToGrpcWithFailedLearners(const absl::Status& status) {
  aggregator::v1::FailedLearners failed;
  if (auto payload = status.GetPayload(kPayloadUrl); payload.has_value()) {
    (void)failed.ParseFromString(std::string(*payload));
  }
  return WithFailedLearners(ToGrpc(status), failed);
}

aggregator::v1::FailedLearners ReadFailedLearners(const grpc::Status& status) {
  aggregator::v1::FailedLearners failed;
  google::rpc::Status details;
  if (status.error_details().empty() ||
      !details.ParseFromString(status.error_details())) {
    return failed;
  }
  for (const google::protobuf::Any& any : details.details()) {
    aggregator::v1::FailedLearners some;
    if (any.UnpackTo(&some)) failed.MergeFrom(some);
  }
  return failed;
}

}  // namespace aggregator
