#include "lib/ops/aggregator_metrics.h"

#include "absl/status/status.h"
#include "lib/base/version.h"

namespace aggregator {
namespace {

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace

AggregatorMetrics::AggregatorMetrics() {
  const auto* latency = &MetricsRegistry::LatencyBuckets();
  registry_
      .AddGauge("aggregator_build_info",
                "Always 1; the version of aggregatord that serves.",
                {"version"})
      ->WithLabels({kVersion})
      ->Set(1);
  requests_ = registry_.AddCounter(
      "aggregator_requests_total",
      "Learner API calls served to the coordinator, by RPC and status code.",
      {"rpc", "code"});
  request_duration_ = registry_.AddHistogram(
      "aggregator_request_duration_seconds",
      "Time to serve a Learner API call, fan-out and merge included.", {"rpc"},
      latency);
  learner_calls_ = registry_.AddCounter(
      "aggregator_learner_calls_total",
      "Calls made to learners, by learner, RPC and status code.",
      {"learner", "rpc", "code"});
  learner_call_duration_ = registry_.AddHistogram(
      "aggregator_learner_call_duration_seconds",
      "Latency of calls made to learners.", {"learner", "rpc"}, latency);
  forwarded_bytes_ = registry_.AddCounter(
      "aggregator_forwarded_bytes_total",
      "Sample payload bytes forwarded to learners in Learn calls.",
      {"learner"});
  learners_ = registry_.AddGauge("aggregator_learners",
                                 "Learners in the pool, by state.", {"state"});
  worker_restarts_ = registry_.AddCounter(
      "aggregator_worker_restarts_total",
      "Restarts of local worker processes, by worker and replica index.",
      {"worker", "index"});
  reloads_ =
      registry_.AddCounter("aggregator_reloads_total",
                           "Configuration reloads, by result.", {"result"});
  for (const char* result : {"ok", "failed"}) reloads_->WithLabels({result});
}

void AggregatorMetrics::Served(const char* rpc, grpc::StatusCode code,
                               double seconds) {
  requests_->WithLabels({rpc, CodeName(code)})->Increment();
  request_duration_->WithLabels({rpc})->Observe(seconds);
}

void AggregatorMetrics::LearnerCall(const std::string& learner, const char* rpc,
                                    grpc::StatusCode code, double seconds) {
  learner_calls_->WithLabels({learner, rpc, CodeName(code)})->Increment();
  learner_call_duration_->WithLabels({learner, rpc})->Observe(seconds);
}

void AggregatorMetrics::Forwarded(const std::string& learner, double bytes) {
  forwarded_bytes_->WithLabels({learner})->Increment(bytes);
}

void AggregatorMetrics::Reloaded(bool ok) {
  reloads_->WithLabels({ok ? "ok" : "failed"})->Increment();
}

void AggregatorMetrics::SetLearners(const std::string& state, double count) {
  learners_->WithLabels({state})->Set(count);
}

void AggregatorMetrics::SetWorkerRestarts(const std::string& worker, int index,
                                          double restarts) {
  Counter* counter =
      worker_restarts_->WithLabels({worker, std::to_string(index)});
  // Counters only go up: add what happened since the last scrape.
  if (restarts > counter->value())
    counter->Increment(restarts - counter->value());
}

}  // namespace aggregator
