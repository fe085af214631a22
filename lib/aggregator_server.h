// AggregatorServer: the aggregator as one running thing. Wires the learner
// pool, the Learner service, the admin service, grpc.health.v1 and reflection
// onto one gRPC server listening on `config.listen`.
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
#include <string>

#include "absl/status/statusor.h"
#include "lib/admin_service.h"
#include "lib/config.h"
#include "lib/learner_pool.h"
#include "lib/learner_service.h"

namespace aggregator {

class AggregatorServer {
 public:
  // Starts listening and connecting to the learners. Fails (naming the address)
  // when the listen address cannot be bound.
  static absl::StatusOr<std::unique_ptr<AggregatorServer>> Start(
      const AggregatorConfig& config);
  ~AggregatorServer();

  // The bound port (useful with listen port 0).
  int port() const { return port_; }
  // "127.0.0.1:<port>"-style address a client can dial.
  std::string address() const;
  LearnerPool& pool() { return *pool_; }
  // min_learners are ready.
  bool ready() const { return ready_.load(); }
  bool WaitUntilReady(std::chrono::steady_clock::time_point deadline) const;

  // Health NOT_SERVING, then lets in-flight calls finish until `deadline`
  // (cancelling what remains), then stops. Idempotent.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  AggregatorServer() = default;
  void OnReadyChange(size_t ready, size_t total);
  void FillStatus(aggregator::v1::AggregatorStatus* status);

  AggregatorConfig config_;
  std::unique_ptr<LearnerPool> pool_;
  std::unique_ptr<LearnerService> learner_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  std::mutex health_mu_;  // orders health updates against Shutdown
};

}  // namespace aggregator

#endif  // LIB_AGGREGATOR_SERVER_H_
