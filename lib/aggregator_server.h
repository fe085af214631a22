// AggregatorServer: the aggregator as one running thing. Wires the learner
// pool, the Learner service, the admin service, grpc.health.v1 and reflection
// onto one gRPC server listening on `config.listen`, and runs the local worker
// processes of `config.workers`. The learner pool's set is `config.learners`
// followed by the learner workers' endpoints.
//
// Health: NOT_SERVING (overall and for aggregator.v1.Learner) until
// min_learners are ready, SERVING while they are, NOT_SERVING again from
// Shutdown on.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LIB_AGGREGATOR_SERVER_H_
#define LIB_AGGREGATOR_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/admin_service.h"
#include "lib/config.h"
#include "lib/learner_pool.h"
#include "lib/learner_service.h"
#include "lib/worker_manager.h"

namespace aggregator {

class AggregatorServer {
 public:
  // Starts listening, starts the workers and connects to the learners. Fails
  // (naming the address) when the listen address cannot be bound; no worker
  // is started then.
  static absl::StatusOr<std::unique_ptr<AggregatorServer>> Start(
      const AggregatorConfig& config);
  ~AggregatorServer();

  // The bound port (useful with listen port 0).
  int port() const { return port_; }
  // "127.0.0.1:<port>"-style address a client can dial.
  std::string address() const;
  LearnerPool& pool() { return *pool_; }
  WorkerManager& workers() { return *workers_; }
  // min_learners are ready.
  bool ready() const { return ready_.load(); }
  bool WaitUntilReady(std::chrono::steady_clock::time_point deadline) const;

  // Health NOT_SERVING, then lets in-flight calls finish until `deadline`
  // (cancelling what remains), then stops the gRPC server, the learner pool,
  // and the workers (SIGTERM, then SIGKILL after each one's stop_timeout: not
  // bounded by `deadline`, which is for calls). Idempotent.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  AggregatorServer() = default;
  void OnReadyChange(size_t ready, size_t total);
  void FillStatus(aggregator::v1::AggregatorStatus* status);
  // Gives the pool config.learners + the learner workers' endpoints, if that
  // set changed. Called at start and by the worker manager on changes.
  void UpdateLearners();

  AggregatorConfig config_;
  std::unique_ptr<LearnerPool> pool_;
  std::unique_ptr<LearnerService> learner_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerManager> workers_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  std::mutex health_mu_;  // orders health updates against Shutdown
  std::mutex learners_mu_;
  // The set last given to the pool.
  std::optional<std::vector<LearnerEndpoint>> learner_set_
      ABSL_GUARDED_BY(learners_mu_);
};

}  // namespace aggregator

#endif  // LIB_AGGREGATOR_SERVER_H_
