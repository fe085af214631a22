#include "lib/admin_service.h"

#include <utility>

#include "lib/version.h"

namespace aggregator {

AdminService::AdminService(
    std::function<void(aggregator::v1::AggregatorStatus*)> status)
    : status_(std::move(status)) {}

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
    aggregator::v1::ReloadReply* /*reply*/) {
  return grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      "Reload is not supported by this aggregatord yet; restart "
      "it to apply a new configuration");
}

}  // namespace aggregator
