#include "lib/server/admin_service.h"

#include <utility>

#include "lib/base/version.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

pb::LearnerState ToProto(LearnerState state) {
  switch (state) {
    case LearnerState::kConnecting:
      return pb::LEARNER_STATE_CONNECTING;
    case LearnerState::kReady:
      return pb::LEARNER_STATE_READY;
    case LearnerState::kFailed:
      return pb::LEARNER_STATE_FAILED;
    case LearnerState::kRemoved:
      return pb::LEARNER_STATE_REMOVED;
  }
  return pb::LEARNER_STATE_UNSPECIFIED;
}

pb::WorkerState ToProto(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return pb::WORKER_STATE_STARTING;
    case WorkerState::kRunning:
      return pb::WORKER_STATE_RUNNING;
    case WorkerState::kBackoff:
      return pb::WORKER_STATE_BACKOFF;
    case WorkerState::kStopped:
      return pb::WORKER_STATE_STOPPED;
    case WorkerState::kFailed:
      return pb::WORKER_STATE_FAILED;
  }
  return pb::WORKER_STATE_UNSPECIFIED;
}

void ToProto(std::chrono::nanoseconds duration,
             google::protobuf::Duration* out) {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(duration);
  out->set_seconds(seconds.count());
  out->set_nanos(static_cast<int32_t>((duration - seconds).count()));
}

void ToProto(const SourceSnapshot& source, pb::LearnerSourceStatus* out) {
  out->set_kind(source.kind);
  out->set_target(source.target);
  if (source.since_last_refresh) {
    ToProto(*source.since_last_refresh, out->mutable_since_last_refresh());
  }
  for (const HostPort& learner : source.learners) {
    out->add_members(learner.ToString());
  }
  out->set_last_error(source.last_error);
  out->set_refreshes(source.refreshes);
  out->set_errors(source.errors);
  out->set_reported_failed(source.reported);
  out->set_report_errors(source.report_errors);
}

void ToProto(const ServerStatus& status, pb::AggregatorStatus* out) {
  for (const LearnerSnapshot& learner : status.learners) {
    pb::LearnerStatus* entry = out->add_learners();
    entry->set_id(learner.id);
    entry->set_address(learner.address.ToString());
    entry->set_state(ToProto(learner.state));
    entry->set_last_error(learner.last_error);
    entry->set_calls(learner.calls);
    entry->set_failures(learner.failures);
    const auto plan = status.plans.find(learner.id);
    const LearnerPlanStatus standing =
        plan == status.plans.end() ? LearnerPlanStatus{} : plan->second;
    entry->set_standing(standing.standing);
    entry->set_straggler(standing.straggler);
    entry->set_learn_ewma_ms(standing.learn_ewma_ms);
    entry->set_learn_p50_ms(standing.learn_p50_ms);
    entry->set_learn_p99_ms(standing.learn_p99_ms);
    entry->set_late_ms(standing.late_ms);
  }
  for (const WorkerSnapshot& worker : status.workers) {
    pb::WorkerStatus* entry = out->add_workers();
    entry->set_name(worker.name);
    entry->set_index(worker.index);
    entry->set_pid(worker.pid);
    entry->set_state(ToProto(worker.state));
    entry->set_restarts(worker.restarts);
    entry->set_last_error(worker.last_error);
  }
  for (const SourceSnapshot& source : status.sources) {
    ToProto(source, out->add_sources());
  }
  out->set_config_path(status.config_path);
  out->set_config_generation(status.config_generation);
  out->set_ready(status.ready);
}

}  // namespace

AdminService::AdminService(std::function<ServerStatus()> status,
                           std::function<absl::StatusOr<ReloadResult>()> reload)
    : status_(std::move(status)), reload_(std::move(reload)) {}

grpc::Status AdminService::GetStatus(grpc::ServerContext* /*context*/,
                                     const pb::GetStatusRequest* /*request*/,
                                     pb::AggregatorStatus* reply) {
  ToProto(status_(), reply);
  ToProto(std::chrono::steady_clock::now() - started_, reply->mutable_uptime());
  reply->set_version(kVersion);
  return grpc::Status::OK;
}

grpc::Status AdminService::Reload(grpc::ServerContext* /*context*/,
                                  const pb::ReloadRequest* /*request*/,
                                  pb::ReloadReply* reply) {
  if (!reload_) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this server was started without a configuration "
                        "file to reload");
  }
  absl::StatusOr<ReloadResult> reloaded = reload_();
  if (!reloaded.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(reloaded.status().code()),
                        std::string(reloaded.status().message()));
  }
  reply->set_config_generation(reloaded->config_generation);
  reply->set_summary(reloaded->summary);
  return grpc::Status::OK;
}

}  // namespace aggregator
