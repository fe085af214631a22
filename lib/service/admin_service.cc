#include "lib/service/admin_service.h"

#include <utility>

#include "lib/base/version.h"

namespace aggregator {

AdminService::AdminService(
    std::function<void(aggregator::v1::AggregatorStatus*)> status,
    std::function<absl::StatusOr<aggregator::v1::ReloadReply>()> reload)
    : status_(std::move(status)), reload_(std::move(reload)) {}

grpc::Status AdminService::GetStatus(
    grpc::ServerContext* /*context*/,
    const aggregator::v1::GetStatusRequest* /*request*/,
    aggregator::v1::AggregatorStatus* reply) {
  status_(reply);
  const auto uptime = std::chrono::steady_clock::now() - started_;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(uptime);
  reply->mutable_uptime()->set_seconds(seconds.count());
  reply->mutable_uptime()->set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(uptime - seconds)
          .count()));
  reply->set_version(kVersion);
  return grpc::Status::OK;
}

grpc::Status AdminService::Reload(
    grpc::ServerContext* /*context*/,
    const aggregator::v1::ReloadRequest* /*request*/,
    aggregator::v1::ReloadReply* reply) {
  if (!reload_) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this server was started without a configuration "
                        "file to reload");
  }
  absl::StatusOr<aggregator::v1::ReloadReply> reloaded = reload_();
  if (!reloaded.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(reloaded.status().code()),
                        std::string(reloaded.status().message()));
  }
  *reply = std::move(*reloaded);
  return grpc::Status::OK;
}

}  // namespace aggregator
