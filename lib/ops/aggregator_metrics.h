// AggregatorMetrics: the daemon's metrics (prometheus-cpp), by Prometheus
// conventions:
//   aggregator_requests_total{rpc,code}        calls served to the coordinator
//   aggregator_request_duration_seconds{rpc}   their latency
//   aggregator_learner_calls_total{learner,rpc,code}
//   aggregator_learner_call_duration_seconds{learner,rpc}
//   aggregator_forwarded_bytes_total{learner}  sample bytes sent in Learn
//   aggregator_learners{state}                 learners by state
//   aggregator_learner_ready{learner}          1 while ready, else 0 (a
//                                              learner's series goes with it)
//   aggregator_learners_standing{standing}     ready learners: in | rejoining
//                                              | out of the plans
//   aggregator_min_learners                    min_learners in force
//   aggregator_worker_restarts_total{worker,index}
//   aggregator_reloads_total{result}           ok | failed
//   aggregator_config_last_reload_successful   0 after a failed reload (the
//                                              running configuration is stale)
//   aggregator_config_last_reload_success_timestamp_seconds
//                                              the start or the last good
//                                              reload
//   aggregator_learner_straggler{learner}      1 while it holds steps back
//   aggregator_learner_late{learner}           1 while it is late (silent
//                                              straggler.late_after after the
//                                              others of a call answered)
//   aggregator_learner_late_total{learner}     times it was found late
//   aggregator_membership_generation           changes of the plans' learners
//   aggregator_learn_stream_buffered_bytes{at} LearnStream bytes held: now |
//                                              peak
//   aggregator_learn_inflight_bytes            Learn batches in flight
//   aggregator_max_inflight_bytes              their limit (max_inflight_bytes)
//   aggregator_source_refreshes_total{kind,source}   learner_sources refreshes
//   aggregator_source_errors_total{kind,source}      ... that failed
//   aggregator_source_learners{kind,source}          learners it lists
//   aggregator_source_failed_reports_total{kind,source}  learners reported
//                                                        failed to it
//     (`source`: LearnerSourceKey, which its settings' changes keep; a
//     source's series go with it)
//   aggregator_tls_handshake_failures_total    TLS handshakes that failed,
//                                              both ways: on the listeners
//                                              (peers that are not TLS
//                                              clients, refused client
//                                              certificates) and to learners
//                                              (a certificate learner_tls
//                                              does not trust)
//   aggregator_build_info{version}             always 1
//
// Thread-safety: every method may be called from any thread; collectors run on
// the scraping thread.
#ifndef LIB_OPS_AGGREGATOR_METRICS_H_
#define LIB_OPS_AGGREGATOR_METRICS_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/mutex.h"

namespace aggregator {

// A learner source's figures so far (lib/discovery/discovery_loop.h).
struct SourceFigures {
  std::string kind;  // "dns", "orchestrator"
  std::string key;   // LearnerSourceKey
  // Which run of the source: one removed and added again counts from 0.
  uint64_t instance = 0;
  double refreshes = 0;
  double errors = 0;
  double learners = 0;
  double reported_failed = 0;
};

class AggregatorMetrics {
 public:
  AggregatorMetrics();

  // What a scrape collects: runs the collectors, then reads the registry.
  std::shared_ptr<prometheus::Collectable> collectable() const;
  // `collect` runs before each scrape and sets figures from other state (the
  // Set* methods). Add collectors before the first scrape.
  void AddCollector(std::function<void()> collect);
  // Removes every collector, waiting for a scrape running them to finish:
  // after it, no scrape touches what they captured.
  void ClearCollectors();

  void Served(const char* rpc, grpc::StatusCode code, double seconds);
  void LearnerCall(const std::string& learner, const char* rpc,
                   grpc::StatusCode code, double seconds);
  void Forwarded(const std::string& learner, double bytes);
  // Counts the reload; a failed one also marks the running configuration
  // stale until a reload succeeds (start-up counts as a success).
  void Reloaded(bool ok);
  // Current figures, set by a collector before each scrape.
  void SetLearners(const std::string& state, double count);
  void SetWorkerRestarts(const std::string& worker, int index, double restarts);
  // 1 while `learner` is flagged as a straggler, else 0.
  // Each learner of the pool and whether it is ready; the series of learners
  // not among them are removed.
  void SetLearnerReady(const std::map<std::string, bool>& ready);
  // Ready learners by standing ("in", "rejoining", "out").
  void SetStandings(const std::map<std::string, int>& by_standing);
  void SetMinLearners(double min_learners);
  // Learn bytes in flight and max_inflight_bytes.
  void SetInflight(double bytes, double max_bytes);
  void SetStraggler(const std::string& learner, bool flagged);
  // 1 while `learner` is late, else 0; `found` counts one more time it was
  // found late. Both series exist from the first call for a learner.
  void SetLate(const std::string& learner, bool late, bool found = false);
  // The membership generation (lib/service/membership.h).
  void SetMembershipGeneration(double generation);
  // The figures of the learner sources there are (counters move by what
  // happened since the last scrape). The series of a source not among them
  // are removed, and a source's new instance starts its counters again.
  void SetSources(const std::vector<SourceFigures>& sources);
  // LearnStream bytes held, now and at most since the start.
  void SetStreamBuffered(double now, double peak);
  // TLS handshakes that failed since the start (counts what is new).
  void SetTlsHandshakeFailures(double total);

 private:
  class Collecting;
  // A labelled counter and histogram, found once per label set: Family::Add
  // builds and hashes a label map on every call, which cost a tenth of a
  // relayed GetData's CPU.
  struct Handles {
    prometheus::Counter* counter = nullptr;
    prometheus::Histogram* histogram = nullptr;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Collecting> collectable_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Counter>& learner_calls_;
  prometheus::Family<prometheus::Histogram>& learner_call_duration_;
  prometheus::Family<prometheus::Counter>& forwarded_bytes_;
  prometheus::Family<prometheus::Gauge>& learners_;
  prometheus::Family<prometheus::Counter>& worker_restarts_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Gauge>& stragglers_;
  prometheus::Family<prometheus::Gauge>& late_;
  prometheus::Family<prometheus::Counter>& late_total_;
  prometheus::Family<prometheus::Gauge>& membership_generation_;
  prometheus::Family<prometheus::Counter>& source_refreshes_;
  prometheus::Family<prometheus::Counter>& source_errors_;
  prometheus::Family<prometheus::Gauge>& source_learners_;
  prometheus::Family<prometheus::Counter>& source_reports_;
  prometheus::Family<prometheus::Gauge>& stream_buffered_;
  prometheus::Family<prometheus::Gauge>& learner_ready_;
  prometheus::Family<prometheus::Gauge>& standings_;
  prometheus::Gauge& min_learners_;
  prometheus::Gauge& reload_successful_;
  prometheus::Gauge& reload_success_time_;
  prometheus::Gauge& inflight_bytes_;
  prometheus::Gauge& max_inflight_bytes_;
  prometheus::Counter& tls_handshake_failures_;

  Mutex mu_;
  // By "served/rpc/code", "learner/id/rpc/code" or "forwarded/id".
  std::unordered_map<std::string, Handles> handles_ ABSL_GUARDED_BY(mu_);
  Mutex sources_mu_;
  // The sources with series, by key.
  std::map<std::string, SourceFigures> sources_ ABSL_GUARDED_BY(sources_mu_);
  Mutex ready_mu_;
  // The learners with a ready series.
  std::map<std::string, bool> ready_ ABSL_GUARDED_BY(ready_mu_);
};

}  // namespace aggregator

#endif  // LIB_OPS_AGGREGATOR_METRICS_H_
