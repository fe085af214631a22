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

  // Before the server starts, so status calls always find it; its workers
  // start only once the address is bound.
  WorkerManagerOptions worker_options;
  worker_options.on_change = [raw] { raw->UpdateLearners(); };
  self->workers_ = std::make_unique<WorkerManager>(std::move(worker_options));

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

  if (absl::Status status = self->workers_->Apply(config.workers);
      !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("cannot start the workers of ",
                                     config.source, ": ", status.message()));
  }
  const size_t worker_learners = self->workers_->LearnerEndpoints().size();
  spdlog::info(
      "aggregatord listening on {} with {} learner(s) ({} listed, {} learner "
      "worker replica(s)), {} worker(s), min_learners {}",
      self->address(), config.learners.size() + worker_learners,
      config.learners.size(), worker_learners, config.workers.size(),
      config.min_learners);
  self->UpdateLearners();
  return self;
}

void AggregatorServer::UpdateLearners() {
  std::lock_guard<std::mutex> lock(learners_mu_);
  // After Shutdown began the pool only drains; the manager is stopping.
  if (shutting_down_) return;
  std::vector<LearnerEndpoint> learners = config_.learners;
  for (LearnerEndpoint& endpoint : workers_->LearnerEndpoints()) {
    learners.push_back(std::move(endpoint));
  }
  if (learner_set_.has_value() && *learner_set_ == learners) return;
  learner_set_ = learners;
  pool_->SetLearners(learners);
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
  for (auto& worker : workers_->Status()) {
    *status->add_workers() = std::move(worker);
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
  // The pool goes first, so stopping learner workers is not reported as lost
  // learners (UpdateLearners no longer touches it once shutting_down_ is set).
  pool_.reset();
  // Each worker gets its own stop_timeout between SIGTERM and SIGKILL.
  std::chrono::milliseconds longest_stop(0);
  for (const WorkerSpec& worker : config_.workers) {
    longest_stop = std::max(longest_stop, worker.stop_timeout);
  }
  workers_->Shutdown(std::chrono::steady_clock::now() + longest_stop);
}

}  // namespace aggregator
