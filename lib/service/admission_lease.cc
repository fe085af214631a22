#include "lib/service/admission_lease.h"

#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/learners/call_path.h"
#include "proto/learner_names.h"

namespace aggregator {

AdmissionLease::AdmissionLease(
    Admission* admission,
    std::shared_ptr<admission_internal::InFlight> in_flight, const char* method,
    std::string call_path)
    : admission_(admission),
      in_flight_(std::move(in_flight)),
      method_(method),
      started_(admission->clock_.Now()),
      call_path_(std::move(call_path)) {}

AdmissionLease::~AdmissionLease() {
  if (!served_) {
    // Every path of the service answers its call; one that does not is a
    // bug, and its caller would otherwise wait for its deadline.
    const grpc::Status lost(
        grpc::StatusCode::INTERNAL,
        absl::StrCat(method_, ": the call ended without an answer"));
    spdlog::error("{}", lost.error_message());
    Served(lost);
    if (reactor_ != nullptr) reactor_->Finish(lost);
  }
  FreeBytes();
  CountOut();
}

absl::Status AdmissionLease::Reserve(int64_t bytes, int64_t limit) {
  if (bytes_ != nullptr) return bytes_->Extend(method_, bytes, limit);
  auto acquired = admission_->budget_.Acquire(method_, bytes, limit);
  if (!acquired.ok()) return acquired.status();
  bytes_ = *std::move(acquired);
  return absl::OkStatus();
}

int64_t AdmissionLease::reserved_bytes() const {
  return bytes_ == nullptr ? 0 : bytes_->bytes();
}

void AdmissionLease::FreeBytes() { bytes_.reset(); }

void AdmissionLease::Served(const grpc::Status& status) {
  if (std::exchange(served_, true)) return;
  FreeBytes();
  admission_->Record(
      method_, status,
      std::chrono::duration<double>(admission_->clock_.Now() - started_)
          .count());
}

void AdmissionLease::Finish(grpc::ServerUnaryReactor* reactor,
                            const grpc::Status& status) {
  Served(status);
  reactor->Finish(status);
  // From here on the service may be gone (see the header).
  CountOut();
}

void AdmissionLease::CountOut() {
  if (!std::exchange(counted_in_, false)) return;
  MutexLock lock(&in_flight_->mu);
  --in_flight_->count;
}

Admission::Admission(std::string aggregator_id, AggregatorMetrics* metrics,
                     Clock* clock)
    : aggregator_id_(std::move(aggregator_id)),
      metrics_(metrics),
      clock_(ClockOrSteady(clock)) {}

std::unique_ptr<AdmissionLease> Admission::Admit(
    grpc::ServerContextBase* context, const char* method,
    grpc::Status* refused) {
  *refused = grpc::Status::OK;
  std::string call_path;
  if (!aggregator_id_.empty()) {
    // Whoever called can tell which aggregator answered (a probe that reaches
    // its own sender).
    context->AddInitialMetadata(kAggregatorIdKey, aggregator_id_);
    const std::vector<std::string> path = IncomingPath(*context);
    *refused = CheckPath(path, aggregator_id_, method);
    call_path = OutgoingPath(path, aggregator_id_);
  }
  if (refused->ok()) {
    if (std::unique_ptr<AdmissionLease> lease =
            CountIn(method, std::move(call_path))) {
      return lease;
    }
    *refused =
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     absl::StrCat(method, ": aggregatord is shutting down"));
  } else {
    spdlog::warn("{}", refused->error_message());
  }
  Record(method, *refused, 0);
  return nullptr;
}

std::unique_ptr<AdmissionLease> Admission::AdmitUnary(
    grpc::ServerContextBase* context, grpc::ServerUnaryReactor* reactor,
    const char* method) {
  grpc::Status refused;
  std::unique_ptr<AdmissionLease> lease = Admit(context, method, &refused);
  if (lease == nullptr) {
    reactor->Finish(refused);
  } else {
    lease->reactor_ = reactor;
  }
  return lease;
}

std::unique_ptr<AdmissionLease> Admission::CountIn(const char* method,
                                                   std::string call_path) {
  MutexLock lock(&in_flight_->mu);
  if (in_flight_->draining) return nullptr;
  ++in_flight_->count;
  // Not make_unique: the constructor is private.
  return std::unique_ptr<AdmissionLease>(
      new AdmissionLease(this, in_flight_, method, std::move(call_path)));
}

std::unique_ptr<AdmissionLease> Admission::Hold() {
  std::unique_ptr<AdmissionLease> lease = CountIn("", "");
  if (lease != nullptr) lease->served_ = true;  // nothing to record
  return lease;
}

void Admission::StartDraining() {
  MutexLock lock(&in_flight_->mu);
  in_flight_->draining = true;
}

bool Admission::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  admission_internal::InFlight& in_flight = *in_flight_;
  MutexLock lock(&in_flight.mu);
  auto idle = [&in_flight]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(in_flight.mu) {
    return in_flight.count == 0;
  };
  return in_flight.mu.AwaitWithTimeout(
      absl::Condition(&idle),
      absl::FromChrono(deadline - std::chrono::steady_clock::now()));
}

int64_t Admission::in_flight() const {
  MutexLock lock(&in_flight_->mu);
  return in_flight_->count;
}

void Admission::Record(const char* method, const grpc::Status& status,
                       double seconds) const {
  if (metrics_ != nullptr) {
    metrics_->Served(method, status.error_code(), seconds);
  }
}

}  // namespace aggregator
