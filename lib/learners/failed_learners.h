// The learners a failed call names, for programs: attached to the call's
// status as gRPC's standard error details (the trailer
// `grpc-status-details-bin`: a google.rpc.Status whose details pack
// aggregator.v1.FailedLearners, proto/learner.proto). The status's code and
// message stay as they are: the message names the same learners, for people.
#ifndef LIB_LEARNERS_FAILED_LEARNERS_H_
#define LIB_LEARNERS_FAILED_LEARNERS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "proto/learner.pb.h"

namespace aggregator {

// Adds the learner `id` at `address`, which ended with `code` and `message`, to
// `failed`.
void AddFailedLearner(const std::string& id, const std::string& address,
                      grpc::StatusCode code, const std::string& message,
                      aggregator::v1::FailedLearners* failed);

// `status` with `failed` attached as its error details; `status` itself when
// it is OK or `failed` names nobody.
grpc::Status WithFailedLearners(const grpc::Status& status,
                                const aggregator::v1::FailedLearners& failed);

// For an absl::Status on its way to the gRPC edge: `failed` kept as a payload
// of `status` (not OK), which ToGrpcWithFailedLearners turns into the details.
void AttachFailedLearners(const aggregator::v1::FailedLearners& failed,
                          absl::Status* status);
// ToGrpc (lib/base/grpc_status.h), with the failed learners attached to
// `status`, if any, as the error details.
grpc::Status ToGrpcWithFailedLearners(const absl::Status& status);

// The failed learners a status carries (none when it carries no such details
// or they do not parse).
aggregator::v1::FailedLearners ReadFailedLearners(const grpc::Status& status);

}  // namespace aggregator

#endif  // LIB_LEARNERS_FAILED_LEARNERS_H_
