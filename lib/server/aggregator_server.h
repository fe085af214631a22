// AggregatorServer: the aggregator as one running thing. Wires the learner
// pool, the Learner service, grpc.health.v1 and reflection onto a gRPC server
// listening on `config.listen`, the admin service onto one of its own on
// `config.admin.listen` (both with `config.tls` when set), and runs the local
// worker processes of `config.workers`, and the `config.learner_sources`
// (lib/discovery/discovery_loop.h). The learner pool's set is
// `config.learners`, then the learner workers' endpoints, then the learners
// the sources found, in the order first seen (one whose id or address is
// already a learner's is left out).
//
// Health: NOT_SERVING (overall and for aggregator.v1.Learner) until
// min_learners are ready, SERVING while they are, NOT_SERVING again from
// Drain/Shutdown on.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LIB_SERVER_AGGREGATOR_SERVER_H_
#define LIB_SERVER_AGGREGATOR_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/discovery/discovery_loop.h"
#include "lib/learners/call_path.h"
#include "lib/learners/learner_pool.h"
#include "lib/ops/aggregator_metrics.h"
#include "lib/server/admin_service.h"
#include "lib/server/status_page.h"
#include "lib/server/unix_listener.h"
#include "lib/service/learner_service.h"
#include "lib/tls/credentials.h"
#include "lib/workers/worker_manager.h"

namespace aggregator {

// What the daemon around the server offers and wants to hear of.
struct ServerOptions {
  // Where workers' relative programs are looked up after the working
  // directory (the daemon's runfiles; lib/workers/worker_program.h).
  std::vector<std::string> program_dirs;
  // The program that guards each worker's process tree (aggregatord itself;
  // lib/process/process_guard.h); empty: none.
  std::string guard_program;
  // Whenever readiness is (re)computed (from the pool's thread or a reload):
  // whether min_learners are ready, which with min_learners 0 is at once
  // (systemd's READY). Health and ready() also need one learner, as calls do.
  std::function<void(bool ready)> on_ready_change;
  // Whenever what Summary() says may have changed: learners, workers, the
  // configuration generation. From any of the server's threads.
  std::function<void()> on_change;
  // A connection that has not sent its HTTP/2 preface and settings by then is
  // closed: a client that connects and says nothing holds no file for long.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // A connection with no call for this long is sent GOAWAY (a client simply
  // reconnects on its next call).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // Serves AggregatorAdmin.Reload: re-reads the configuration and calls
  // Reload(). Without it the RPC answers UNIMPLEMENTED.
  std::function<absl::StatusOr<ReloadResult>()> reload;
  // LearnerServiceOptions::stream_window_bytes (tests make it small).
  size_t learn_stream_window_bytes =
      LearnerServiceOptions().stream_window_bytes;
};

class AggregatorServer {
 public:
  // Starts listening, starts the workers and connects to the learners. Fails
  // (naming the address) when the listen address cannot be bound; no worker
  // is started then.
  static absl::StatusOr<std::unique_ptr<AggregatorServer>> Start(
      const AggregatorConfig& config, ServerOptions options = {});
  ~AggregatorServer();

  // The bound port (useful with listen port 0).
  int port() const { return port_; }
  // "127.0.0.1:<port>"-style address a client can dial.
  std::string address() const;
  // This aggregator's id on the calls it relays (lib/learners/call_path.h).
  const std::string& aggregator_id() const { return aggregator_id_; }
  // The same for the admin listener; empty when it is off.
  std::string admin_address() const;
  LearnerPool& pool() { return *pool_; }
  WorkerManager& workers() { return *workers_; }
  LearnerService& learner_service() { return *learner_service_; }
  DiscoveryLoop& discovery() { return *discovery_; }
  AggregatorMetrics& metrics() { return metrics_; }
  // Calls are served: min_learners, and at least one, are ready (what health
  // says).
  bool ready() const { return ready_.load(); }
  bool WaitUntilReady(std::chrono::steady_clock::time_point deadline) const;
  // drain_timeout of the configuration in force.
  std::chrono::milliseconds config_drain_timeout() const;
  // "learners 2 of 2 ready; workers 2 of 2 running; config generation 1",
  // for systemd's STATUS=: ready / known learners, running / configured
  // worker replicas, the configuration generation.
  std::string Summary() const;
  // The status page (lib/server/status_page.h) as of now.
  std::string StatusPage() const;

  // Applies a new, validated configuration: learners added and removed (calls
  // in flight through removed ones finish), workers started, stopped or
  // restarted where their spec changed, service options, connect options and
  // the log level, the listeners' certificates (for new connections). A
  // change of a field that needs a restart (listen, admin.listen, whether
  // there is TLS or mTLS, max_message_bytes, metrics.listen) is
  // FAILED_PRECONDITION naming the field, and nothing is applied. Returns the
  // new generation and a summary.
  absl::StatusOr<ReloadResult> Reload(const AggregatorConfig& next);

  // Health NOT_SERVING, new calls refused (UNAVAILABLE), then waits until the
  // calls in flight finish or `deadline` passes. True when none is left.
  bool Drain(std::chrono::steady_clock::time_point deadline);
  // Health NOT_SERVING, then lets in-flight calls finish until `deadline`
  // (cancelling what remains), then stops the gRPC server, the learner pool,
  // and the workers (SIGTERM, then SIGKILL after each one's stop_timeout: not
  // bounded by `deadline`, which is for calls). Idempotent.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  AggregatorServer() = default;
  void OnReadyChange(size_t ready, size_t total);
  // Calls options_.on_change (not once shutting down).
  void Changed();
  ServerStatus Status() const;
  void CollectMetrics();
  // Gives the pool config.learners + the learner workers' endpoints + the
  // discovered learners, if that set changed. Called at start, on reload, by
  // the worker manager and by the discovery loop.
  void UpdateLearners();
  // Appends the learner workers' endpoints to `learners`, but one at an
  // address already there (logged when new).
  void AddWorkers(std::vector<LearnerEndpoint>* learners)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(learners_mu_);
  // Appends the discovered learners to `learners` (see the class comment).
  void AddDiscovered(const std::optional<ClientTlsConfig>& tls,
                     std::vector<LearnerEndpoint>* learners)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(learners_mu_);
  // The ids of the pool's learners that are failed.
  std::set<std::string> FailedLearners() const;
  AggregatorConfig config() const;

  ServerOptions options_;
  AggregatorMetrics metrics_;
  mutable Mutex config_mu_;
  AggregatorConfig config_ ABSL_GUARDED_BY(config_mu_);
  std::atomic<int64_t> generation_{1};
  std::atomic<int> min_learners_{1};
  Mutex reload_mu_;  // one reload at a time
  std::unique_ptr<LearnerPool> pool_;
  std::unique_ptr<LearnerService> learner_service_;
  std::unique_ptr<AdminService> admin_service_;
  // Before the servers: their handshakes read it until they are gone.
  std::unique_ptr<ServerTls> tls_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> admin_server_;  // null: admin.listen is off
  std::unique_ptr<WorkerManager> workers_;
  std::unique_ptr<DiscoveryLoop> discovery_;
  int port_ = 0;
  int admin_port_ = 0;
  // The unix socket paths of listen and admin.listen, removed at the end.
  std::vector<std::unique_ptr<UnixListenerPath>> unix_paths_;
  const std::string aggregator_id_ = NewAggregatorId();
  const std::chrono::steady_clock::time_point started_ =
      std::chrono::steady_clock::now();
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  Mutex health_mu_;  // orders health updates against Drain/Shutdown
  bool draining_ ABSL_GUARDED_BY(health_mu_) = false;
  Mutex learners_mu_;
  // The set last given to the pool.
  std::optional<std::vector<LearnerEndpoint>> learner_set_
      ABSL_GUARDED_BY(learners_mu_);
  // Every discovered address, in the order first seen (StableMerge).
  std::vector<HostPort> discovered_ ABSL_GUARDED_BY(learners_mu_);
  // Discovered ids left out as already learners (logged when they are new).
  std::set<std::string> left_out_ ABSL_GUARDED_BY(learners_mu_);
  // Worker learners left out so ("<id> <address>").
  std::set<std::string> refused_workers_ ABSL_GUARDED_BY(learners_mu_);
};

}  // namespace aggregator

#endif  // LIB_SERVER_AGGREGATOR_SERVER_H_
