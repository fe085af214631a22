// AggregatorMetrics: the daemon's metrics, by Prometheus conventions:
//   aggregator_requests_total{rpc,code}            calls served to the
//   coordinator aggregator_request_duration_seconds{rpc}       their latency
//   aggregator_learner_calls_total{learner,rpc,code}
//   aggregator_learner_call_duration_seconds{learner,rpc}
//   aggregator_forwarded_bytes_total{learner}      sample bytes sent in Learn
//   aggregator_learners{state}                     learners by state
//   aggregator_worker_restarts_total{worker,index}
//   aggregator_reloads_total{result}               ok | failed
//   aggregator_build_info{version}                 always 1
//
// Thread-safety: every method may be called from any thread.
#ifndef LIB_OPS_AGGREGATOR_METRICS_H_
#define LIB_OPS_AGGREGATOR_METRICS_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "lib/ops/metrics.h"

namespace aggregator {

class AggregatorMetrics {
 public:
  AggregatorMetrics();

  MetricsRegistry& registry() { return registry_; }

  void Served(const char* rpc, grpc::StatusCode code, double seconds);
  void LearnerCall(const std::string& learner, const char* rpc,
                   grpc::StatusCode code, double seconds);
  void Forwarded(const std::string& learner, double bytes);
  void Reloaded(bool ok);
  // Current figures, set by a collector before each scrape.
  void SetLearners(const std::string& state, double count);
  void SetWorkerRestarts(const std::string& worker, int index, double restarts);

 private:
  MetricsRegistry registry_;
  Family<Counter>* requests_;
  Family<Histogram>* request_duration_;
  Family<Counter>* learner_calls_;
  Family<Histogram>* learner_call_duration_;
  Family<Counter>* forwarded_bytes_;
  Family<Gauge>* learners_;
  Family<Counter>* worker_restarts_;
  Family<Counter>* reloads_;
};

}  // namespace aggregator

#endif  // LIB_OPS_AGGREGATOR_METRICS_H_
