#include "lib/aggregator_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr char kLearnerServiceName[] = "aggregator.v1.Learner";

size_t NeededLearners(const AggregatorConfig& config) {
  return static_cast<size_t>(std::max(0, config.min_learners));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AggregatorServer>> AggregatorServer::Start(
    const AggregatorConfig& config) {
  std::unique_ptr<AggregatorServer> self(new AggregatorServer());
  AggregatorServer* raw = self.get();
  self->config_ = config;

  LearnerPoolOptions pool_options;
  pool_options.connect = config.connect;
  pool_options.max_message_bytes = config.max_message_bytes;
  pool_options.on_ready_change = [raw](size_t ready, size_t total) {
    raw->OnReadyChange(ready, total);
  };
  self->pool_ = std::make_unique<LearnerPool>(std::move(pool_options));

  LearnerServiceOptions service_options;
  service_options.min_learners = config.min_learners;
  service_options.call_timeout = config.call_timeout;
  service_options.homogeneous_keys = config.homogeneous_keys;
  self->learner_service_ = std::make_unique<LearnerService>(
      self->pool_.get(), std::move(service_options));
  self->admin_service_ = std::make_unique<AdminService>(
      [raw](aggregator::v1::AggregatorStatus* status) {
        raw->FillStatus(status);
      });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const int limit =
      static_cast<int>(std::min<int64_t>(config.max_message_bytes, INT_MAX));
  builder.SetMaxReceiveMessageSize(limit);
  builder.SetMaxSendMessageSize(limit);
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(),
                           &self->port_);
  builder.RegisterService(self->learner_service_.get());
  builder.RegisterService(self->admin_service_.get());
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr || self->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", config.listen, "' (from ", config.source,
        "): the address is invalid or already in use"));
  }
  self->OnReadyChange(0, config.learners.size());
  spdlog::info(
      "aggregatord listening on {} with {} learner(s), min_learners {}",
      self->address(), config.learners.size(), config.min_learners);
  self->pool_->SetLearners(config.learners);
  return self;
}

AggregatorServer::~AggregatorServer() {
  Shutdown(std::chrono::system_clock::now());
}

std::string AggregatorServer::address() const {
  const std::string& listen = config_.listen;
  if (listen.rfind("unix:", 0) == 0) return listen;
  const size_t colon = listen.rfind(':');
  std::string host =
      colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  return absl::StrCat(host, ":", port_);
}

bool AggregatorServer::WaitUntilReady(
    std::chrono::steady_clock::time_point deadline) const {
  return pool_->WaitForReady(NeededLearners(config_), deadline);
}

void AggregatorServer::OnReadyChange(size_t ready, size_t total) {
  std::lock_guard<std::mutex> lock(health_mu_);
  if (shutting_down_ || server_ == nullptr) return;
  const bool now_ready = ready >= NeededLearners(config_);
  if (now_ready != ready_.exchange(now_ready)) {
    spdlog::info("{}: {} of {} learner(s) ready (min_learners {})",
                 now_ready ? "serving" : "not serving", ready, total,
                 config_.min_learners);
  }
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(now_ready);
  health->SetServingStatus(kLearnerServiceName, now_ready);
}

void AggregatorServer::FillStatus(aggregator::v1::AggregatorStatus* status) {
  for (auto& learner : pool_->Status()) {
    *status->add_learners() = std::move(learner);
  }
  status->set_config_path(config_.source);
  status->set_config_generation(1);
  status->set_ready(ready_.load());
}

void AggregatorServer::Shutdown(
    std::chrono::system_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    if (shutting_down_.exchange(true) || server_ == nullptr) return;
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  server_->Shutdown(deadline);
  server_->Wait();
  pool_.reset();
}

}  // namespace aggregator
