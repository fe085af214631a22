// gRPC and absl share their status codes (the same numbers, by design): these
// convert between them, so a status keeps its code and message across the
// boundary, and name a code in logs, errors and metric labels ("UNAVAILABLE").
#ifndef LIB_BASE_GRPC_STATUS_H_
#define LIB_BASE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace aggregator {

inline grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace aggregator

#endif  // LIB_BASE_GRPC_STATUS_H_
