// LearnerService's admission: a call is let in (or refused), counted while
// in flight, recorded when served; draining and waiting for the calls left.
#include <chrono>
#include <string>
#include <vector>

#include "lib/learners/call_path.h"
#include "lib/service/learner_service_impl.h"

namespace aggregator {

LearnerService::Call LearnerService::Arrive(
    const char* method, grpc::CallbackServerContext* context) const {
  return Call{method,     context, context->DefaultReactor(), clock_.Now(),
              settings(), "",      TimingWanted(*context)};
}

void LearnerService::Served(const char* method,
                            std::chrono::steady_clock::time_point started,
                            const grpc::Status& status) {
  if (metrics_ == nullptr) return;
  metrics_->Served(
      method, status.error_code(),
      std::chrono::duration<double>(clock_.Now() - started).count());
}

void LearnerService::Leave() {
  MutexLock lock(&mu_);
  --in_flight_;
}

void LearnerService::Finish(grpc::ServerUnaryReactor* reactor,
                            const char* method,
                            std::chrono::steady_clock::time_point started,
                            const grpc::Status& status) {
  Served(method, started, status);
  reactor->Finish(status);
  Leave();
}

bool LearnerService::Enter(grpc::CallbackServerContext* context,
                           grpc::ServerUnaryReactor* reactor,
                           const char* method, std::string* call_path) {
  const grpc::Status admitted = Admit(context, method, call_path);
  if (!admitted.ok()) reactor->Finish(admitted);
  return admitted.ok();
}

grpc::Status LearnerService::Admit(grpc::CallbackServerContext* context,
                                   const char* method, std::string* call_path) {
  grpc::Status refused;
  if (!aggregator_id_.empty()) {
    // Whoever called can tell which aggregator answered (a probe that reaches
    // its own sender).
    context->AddInitialMetadata(kAggregatorIdKey, aggregator_id_);
    const std::vector<std::string> path = IncomingPath(*context);
    refused = CheckPath(path, aggregator_id_, method);
    *call_path = OutgoingPath(path, aggregator_id_);
  }
  if (refused.ok()) {
    MutexLock lock(&mu_);
    if (!draining_) {
      ++in_flight_;
      return grpc::Status::OK;
    }
    refused =
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     absl::StrCat(method, ": aggregatord is shutting down"));
  } else {
    spdlog::warn("{}", refused.error_message());
  }
  if (metrics_ != nullptr) metrics_->Served(method, refused.error_code(), 0);
  return refused;
}

void LearnerService::StartDraining() {
  MutexLock lock(&mu_);
  draining_ = true;
}

bool LearnerService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  };
  // The caller waits in real time, whatever the service's clock.
  return mu_.AwaitWithTimeout(absl::Condition(&idle), TimeUntil(deadline));
}

}  // namespace aggregator
