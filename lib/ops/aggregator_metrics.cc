#include "lib/ops/aggregator_metrics.h"

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "lib/base/grpc_status.h"
#include "lib/base/mutex.h"
#include "lib/base/version.h"

namespace aggregator {
namespace {

// Counters only go up: adds what happened since the last scrape.
void CountTo(prometheus::Counter& counter, double total) {
  if (total > counter.Value()) counter.Increment(total - counter.Value());
}

// Latency buckets in seconds, 100 us .. 60 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return *buckets;
}

}  // namespace

// The registry behind the collectors that set its figures first.
class AggregatorMetrics::Collecting : public prometheus::Collectable {
 public:
  explicit Collecting(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}

  void Add(std::function<void()> collect) {
    MutexLock lock(&mu_);
    collectors_.push_back(std::move(collect));
  }
  void Clear() {
    MutexLock lock(&mu_);
    collectors_.clear();
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    {
      MutexLock lock(&mu_);  // one scrape's collectors at a time
      for (const auto& collect : collectors_) collect();
    }
    return registry_->Collect();
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  mutable Mutex mu_;
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

AggregatorMetrics::AggregatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      collectable_(std::make_shared<Collecting>(registry_)),
      requests_(prometheus::BuildCounter()
                    .Name("aggregator_requests_total")
                    .Help("Learner API calls served to the coordinator, by "
                          "RPC and status code.")
                    .Register(*registry_)),
      request_duration_(
          prometheus::BuildHistogram()
              .Name("aggregator_request_duration_seconds")
              .Help("Time to serve a Learner API call, fan-out and merge "
                    "included.")
              .Register(*registry_)),
      learner_calls_(
          prometheus::BuildCounter()
              .Name("aggregator_learner_calls_total")
              .Help("Calls made to learners, by learner, RPC and status code.")
              .Register(*registry_)),
      learner_call_duration_(
          prometheus::BuildHistogram()
              .Name("aggregator_learner_call_duration_seconds")
              .Help("Latency of calls made to learners.")
              .Register(*registry_)),
      forwarded_bytes_(
          prometheus::BuildCounter()
              .Name("aggregator_forwarded_bytes_total")
              .Help("Sample payload bytes forwarded to learners in Learn "
                    "calls.")
              .Register(*registry_)),
      learners_(prometheus::BuildGauge()
                    .Name("aggregator_learners")
                    .Help("Learners in the pool, by state.")
                    .Register(*registry_)),
      worker_restarts_(prometheus::BuildCounter()
                           .Name("aggregator_worker_restarts_total")
                           .Help("Restarts of local worker processes, by "
                                 "worker and replica index.")
                           .Register(*registry_)),
      reloads_(prometheus::BuildCounter()
                   .Name("aggregator_reloads_total")
                   .Help("Configuration reloads, by result.")
                   .Register(*registry_)),
      stragglers_(prometheus::BuildGauge()
                      .Name("aggregator_learner_straggler")
                      .Help("1 while a learner holds the steps back "
                            "(straggler.factor x the others' median for "
                            "straggler.window steps).")
                      .Register(*registry_)),
      late_(prometheus::BuildGauge()
                .Name("aggregator_learner_late")
                .Help("1 while a learner is late: silent straggler.late_after "
                      "after the other learners of a call answered.")
                .Register(*registry_)),
      late_total_(prometheus::BuildCounter()
                      .Name("aggregator_learner_late_total")
                      .Help("Times a learner was found late.")
                      .Register(*registry_)),
      membership_generation_(
          prometheus::BuildGauge()
              .Name("aggregator_membership_generation")
              .Help("Changes of the set of learners plans are split over.")
              .Register(*registry_)),
      source_refreshes_(prometheus::BuildCounter()
                            .Name("aggregator_source_refreshes_total")
                            .Help("Refreshes of each learner source (DNS "
                                  "lookups, orchestrator requests), failed "
                                  "ones included.")
                            .Register(*registry_)),
      source_errors_(prometheus::BuildCounter()
                         .Name("aggregator_source_errors_total")
                         .Help("Refreshes of each learner source that failed "
                               "(it kept its last learners).")
                         .Register(*registry_)),
      source_learners_(prometheus::BuildGauge()
                           .Name("aggregator_source_learners")
                           .Help("Learners each learner source lists.")
                           .Register(*registry_)),
      source_reports_(prometheus::BuildCounter()
                          .Name("aggregator_source_failed_reports_total")
                          .Help("Learners reported failed to each learner "
                                "source (DI-orchestrator replaces them).")
                          .Register(*registry_)),
      stream_buffered_(
          prometheus::BuildGauge()
              .Name("aggregator_learn_stream_buffered_bytes")
              .Help("LearnStream bytes received and not yet passed to a "
                    "learner's connection, now and at most (peak).")
              .Register(*registry_)),
      learner_ready_(prometheus::BuildGauge()
                         .Name("aggregator_learner_ready")
                         .Help("1 while the learner is ready, else 0 "
                               "(connecting or failed).")
                         .Register(*registry_)),
      standings_(prometheus::BuildGauge()
                     .Name("aggregator_learners_standing")
                     .Help("Ready learners by standing in the plans: in, "
                           "rejoining (task replay pending), out.")
                     .Register(*registry_)),
      min_learners_(prometheus::BuildGauge()
                        .Name("aggregator_min_learners")
                        .Help("min_learners in force: ready learners needed "
                              "to serve.")
                        .Register(*registry_)
                        .Add({})),
      reload_successful_(
          prometheus::BuildGauge()
              .Name("aggregator_config_last_reload_successful")
              .Help("0 after a reload failed (the running configuration is "
                    "older than the file), 1 after a success or at start.")
              .Register(*registry_)
              .Add({})),
      reload_success_time_(
          prometheus::BuildGauge()
              .Name("aggregator_config_last_reload_success_timestamp_seconds")
              .Help("When the running configuration was loaded (start or "
                    "last successful reload), in Unix seconds.")
              .Register(*registry_)
              .Add({})),
      inflight_bytes_(prometheus::BuildGauge()
                          .Name("aggregator_learn_inflight_bytes")
                          .Help("Bytes of Learn batches in flight (counted "
                                "against max_inflight_bytes).")
                          .Register(*registry_)
                          .Add({})),
      max_inflight_bytes_(prometheus::BuildGauge()
                              .Name("aggregator_max_inflight_bytes")
                              .Help("max_inflight_bytes in force: a Learn "
                                    "past it is refused RESOURCE_EXHAUSTED.")
                              .Register(*registry_)
                              .Add({})),
      tls_handshake_failures_(
          prometheus::BuildCounter()
              .Name("aggregator_tls_handshake_failures_total")
              .Help("TLS handshakes that failed, both ways: on the "
                    "listeners (a peer that is not a TLS client, a refused "
                    "client certificate) and to learners (a certificate "
                    "learner_tls does not trust); gRPC logs the first 5 a "
                    "10 s.")
              .Register(*registry_)
              .Add({})) {
  reload_successful_.Set(1);
  reload_success_time_.SetToCurrentTime();
  prometheus::BuildGauge()
      .Name("aggregator_build_info")
      .Help("Always 1; the version of aggregatord that serves.")
      .Register(*registry_)
      .Add({{"version", kVersion}})
      .Set(1);
  for (const char* result : {"ok", "failed"})
    reloads_.Add({{"result", result}});
}

std::shared_ptr<prometheus::Collectable> AggregatorMetrics::collectable()
    const {
  return collectable_;
}

void AggregatorMetrics::AddCollector(std::function<void()> collect) {
  collectable_->Add(std::move(collect));
}

void AggregatorMetrics::ClearCollectors() { collectable_->Clear(); }

void AggregatorMetrics::Served(const char* rpc, grpc::StatusCode code,
                               double seconds) {
  MutexLock lock(&mu_);
  Handles& handles = handles_[absl::StrCat("served/", rpc, "/", code)];
  if (handles.counter == nullptr) {
    handles.counter = &requests_.Add({{"rpc", rpc}, {"code", CodeName(code)}});
    handles.histogram =
        &request_duration_.Add({{"rpc", rpc}}, LatencyBuckets());
  }
  handles.counter->Increment();
  handles.histogram->Observe(seconds);
}

void AggregatorMetrics::LearnerCall(const std::string& learner, const char* rpc,
                                    grpc::StatusCode code, double seconds) {
  MutexLock lock(&mu_);
  Handles& handles =
      handles_[absl::StrCat("learner/", learner, "/", rpc, "/", code)];
  if (handles.counter == nullptr) {
    handles.counter = &learner_calls_.Add(
        {{"learner", learner}, {"rpc", rpc}, {"code", CodeName(code)}});
    handles.histogram = &learner_call_duration_.Add(
        {{"learner", learner}, {"rpc", rpc}}, LatencyBuckets());
  }
  handles.counter->Increment();
  handles.histogram->Observe(seconds);
}

void AggregatorMetrics::Forwarded(const std::string& learner, double bytes) {
  MutexLock lock(&mu_);
  Handles& handles = handles_[absl::StrCat("forwarded/", learner)];
  if (handles.counter == nullptr) {
    handles.counter = &forwarded_bytes_.Add({{"learner", learner}});
  }
  handles.counter->Increment(bytes);
}

void AggregatorMetrics::Reloaded(bool ok) {
  reloads_.Add({{"result", ok ? "ok" : "failed"}}).Increment();
  reload_successful_.Set(ok ? 1 : 0);
  if (ok) reload_success_time_.SetToCurrentTime();
}

void AggregatorMetrics::SetLearnerReady(
    const std::map<std::string, bool>& ready) {
  MutexLock lock(&ready_mu_);
  for (const auto& [learner, unused] : ready_) {
    if (ready.count(learner) == 0) {
      learner_ready_.Remove(&learner_ready_.Add({{"learner", learner}}));
    }
  }
  for (const auto& [learner, is_ready] : ready) {
    learner_ready_.Add({{"learner", learner}}).Set(is_ready ? 1 : 0);
  }
  ready_ = ready;
}

void AggregatorMetrics::SetStandings(
    const std::map<std::string, int>& by_standing) {
  for (const auto& [standing, count] : by_standing) {
    standings_.Add({{"standing", standing}}).Set(count);
  }
}

void AggregatorMetrics::SetMinLearners(double min_learners) {
  min_learners_.Set(min_learners);
}

void AggregatorMetrics::SetInflight(double bytes, double max_bytes) {
  inflight_bytes_.Set(bytes);
  max_inflight_bytes_.Set(max_bytes);
}

void AggregatorMetrics::SetStraggler(const std::string& learner, bool flagged) {
  stragglers_.Add({{"learner", learner}}).Set(flagged ? 1 : 0);
}

void AggregatorMetrics::SetLate(const std::string& learner, bool late,
                                bool found) {
  late_.Add({{"learner", learner}}).Set(late ? 1 : 0);
  prometheus::Counter& total = late_total_.Add({{"learner", learner}});
  if (found) total.Increment();
}

void AggregatorMetrics::SetStreamBuffered(double now, double peak) {
  stream_buffered_.Add({{"at", "now"}}).Set(now);
  stream_buffered_.Add({{"at", "peak"}}).Set(peak);
}

void AggregatorMetrics::SetTlsHandshakeFailures(double total) {
  CountTo(tls_handshake_failures_, total);
}

void AggregatorMetrics::SetMembershipGeneration(double generation) {
  membership_generation_.Add({}).Set(generation);
}

void AggregatorMetrics::SetLearners(const std::string& state, double count) {
  learners_.Add({{"state", state}}).Set(count);
}

void AggregatorMetrics::SetWorkerRestarts(const std::string& worker, int index,
                                          double restarts) {
  CountTo(worker_restarts_.Add(
              {{"worker", worker}, {"index", std::to_string(index)}}),
          restarts);
}

void AggregatorMetrics::SetSources(const std::vector<SourceFigures>& sources) {
  auto labels = [](const SourceFigures& source) {
    return std::map<std::string, std::string>{{"kind", source.kind},
                                              {"source", source.key}};
  };
  auto remove = [&](const SourceFigures& source) {
    const auto series = labels(source);
    for (auto* family :
         {&source_refreshes_, &source_errors_, &source_reports_}) {
      if (family->Has(series)) family->Remove(&family->Add(series));
    }
    if (source_learners_.Has(series)) {
      source_learners_.Remove(&source_learners_.Add(series));
    }
  };
  MutexLock lock(&sources_mu_);
  std::map<std::string, SourceFigures> next;
  for (const SourceFigures& source : sources) {
    auto known = sources_.find(source.key);
    if (known != sources_.end() && known->second.instance != source.instance) {
      remove(known->second);  // removed and added again: counts from 0
    }
    next[source.key] = source;
    const auto series = labels(source);
    CountTo(source_refreshes_.Add(series), source.refreshes);
    CountTo(source_errors_.Add(series), source.errors);
    CountTo(source_reports_.Add(series), source.reported_failed);
    source_learners_.Add(series).Set(source.learners);
  }
  for (const auto& [key, source] : sources_) {
    if (next.count(key) == 0) remove(source);
  }
  sources_ = std::move(next);
}

}  // namespace aggregator
