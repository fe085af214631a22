// AdminService: AggregatorAdmin for operators: the learners' and workers'
// states, the configuration in force, uptime; and Reload. The only place the
// daemon's own state becomes admin protos (proto/admin.proto).
//
// Thread-safety: RPCs may run concurrently; the sources are called from gRPC
// threads.
#ifndef LIB_SERVER_ADMIN_SERVICE_H_
#define LIB_SERVER_ADMIN_SERVICE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/discovery/discovery_loop.h"
#include "lib/learners/learner_pool.h"
#include "lib/workers/worker_manager.h"
#include "proto/admin.grpc.pb.h"

namespace aggregator {

// What GetStatus reports, as the server knows it.
// What the Learner service knows of a learner beyond the pool's view.
struct LearnerPlanStatus {
  std::string standing = "in";  // "in", "rejoining", "out: <why>"
  bool straggler = false;
  double learn_ewma_ms = 0;
  double learn_p50_ms = 0;
  double learn_p99_ms = 0;
  int64_t late_ms = 0;  // 0: not late (straggler.late_after)
};

struct ServerStatus {
  std::vector<LearnerSnapshot> learners;
  // By learner id; absent: in, no Learn yet.
  std::map<std::string, LearnerPlanStatus> plans;
  std::vector<WorkerSnapshot> workers;
  std::vector<SourceSnapshot> sources;
  std::string config_path;
  int64_t config_generation = 0;
  bool ready = false;  // min_learners are ready
};

// What a successful reload applied.
struct ReloadResult {
  int64_t config_generation = 0;
  // What changed, for people: "learners +1 -0; workers unchanged".
  std::string summary;
};

class AdminService final : public aggregator::v1::AggregatorAdmin::Service {
 public:
  // `reload` (optional) serves Reload; without it Reload is UNIMPLEMENTED.
  AdminService(std::function<ServerStatus()> status,
               std::function<absl::StatusOr<ReloadResult>()> reload);

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const aggregator::v1::GetStatusRequest* request,
                         aggregator::v1::AggregatorStatus* reply) override;
  grpc::Status Reload(grpc::ServerContext* context,
                      const aggregator::v1::ReloadRequest* request,
                      aggregator::v1::ReloadReply* reply) override;

 private:
  const std::function<ServerStatus()> status_;
  const std::function<absl::StatusOr<ReloadResult>()> reload_;
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
};

}  // namespace aggregator

#endif  // LIB_SERVER_ADMIN_SERVICE_H_
