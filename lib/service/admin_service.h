// AdminService: AggregatorAdmin for operators: the learners' and workers'
// states, the configuration in force, uptime.
//
// Thread-safety: RPCs may run concurrently; the status source is called from
// gRPC threads.
#ifndef LIB_SERVICE_ADMIN_SERVICE_H_
#define LIB_SERVICE_ADMIN_SERVICE_H_

#include <chrono>
#include <functional>

#include "absl/status/statusor.h"
#include "proto/admin.grpc.pb.h"

namespace aggregator {

class AdminService final : public aggregator::v1::AggregatorAdmin::Service {
 public:
  // `status` fills everything but uptime and version; `reload` (optional)
  // serves Reload.
  AdminService(
      std::function<void(aggregator::v1::AggregatorStatus*)> status,
      std::function<absl::StatusOr<aggregator::v1::ReloadReply>()> reload);

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const aggregator::v1::GetStatusRequest* request,
                         aggregator::v1::AggregatorStatus* reply) override;
  grpc::Status Reload(grpc::ServerContext* context,
                      const aggregator::v1::ReloadRequest* request,
                      aggregator::v1::ReloadReply* reply) override;

 private:
  const std::function<void(aggregator::v1::AggregatorStatus*)> status_;
  const std::function<absl::StatusOr<aggregator::v1::ReloadReply>()> reload_;
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
};

}  // namespace aggregator

#endif  // LIB_SERVICE_ADMIN_SERVICE_H_
