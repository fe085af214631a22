// LearnerPool: the connections to the learners and their states.
//
// Each learner is connecting -> ready -> (disconnected) connecting ..., or
// failed when it was not ready within connect.timeout (failed learners keep
// being retried in the background). Ready means connected and answering: as a
// learner connects the pool asks its resources (GetResource) and keeps them.
// All learners connect concurrently, driven by one connector thread: no
// thread per learner, no busy loop. The connector waits in its own inbox
// (lib/learners/pool_inbox.h), never in a gRPC completion queue, so it is not
// one of gRPC's pollers (in gRPC 1.51 every thread blocked in a completion
// queue takes turns at polling all of the process's sockets, the daemon's
// calls included). gRPC's completions reach the inbox from gRPC's own
// threads: connection watches through a callback completion queue, probes
// (GetResource) through the callback API. An attempt's probe is sent as soon
// as its connection is up; while it is in flight, gRPC's callback threads poll
// for the connection even in a process where nothing else uses gRPC.
// Each attempt uses a fresh channel (with its own subchannel pool), so the
// retry schedule is exactly the configured jittered backoff, not gRPC's
// hidden one.
//
// Its timing (backoff delays, connect.timeout, connect.attempt_timeout,
// resource_refresh) runs on an injected Clock: under a FakeClock a retry is
// due when the test advances the clock past it. Deadlines that gRPC keeps
// (a watch, a probe) are real time; see learner_pool.cc.
//
// The Learner service sees it as a LearnerRoster
// (lib/learners/learner_roster.h). Calls take a LearnerHandle snapshot; a
// handle keeps its channel alive, so removing a learner (SetLearners) never
// breaks a call in flight.
//
// Thread-safety: all public methods may be called from any thread. Internal
// state is guarded by mu_.
#ifndef LIB_LEARNERS_LEARNER_POOL_H_
#define LIB_LEARNERS_LEARNER_POOL_H_

#include <grpc/grpc.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/backoff.h"
#include "lib/base/clock.h"
#include "lib/base/host_port.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/learners/learner_channel.h"
#include "lib/learners/learner_roster.h"
#include "lib/learners/pool_inbox.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {

// What the pool's owner may add besides the configuration.
struct LearnerPoolHooks {
  UniformRandom random;  // default: MakeUniformRandom()
  // Called (outside the pool's lock, on the connector thread) whenever the
  // number of ready learners changes.
  std::function<void(size_t ready, size_t total)> on_ready_change;
  // The owning aggregator's id (lib/learners/call_path.h): probes carry it,
  // and a learner whose probe is answered by it is this aggregator itself.
  std::string aggregator_id;
  // What connection timing runs on; null: SteadyClock(). Must outlive the
  // pool.
  Clock* clock = nullptr;
};

// The name of the pool's connector thread (as /proc/<pid>/task/*/comm).
inline constexpr char kConnectorThreadName[] = "learner-pool";

// Channel arguments used for every learner channel (message sizes, no idle
// timeout, connect.keepalive's pings).
grpc::ChannelArguments LearnerChannelArguments(int64_t max_message_bytes,
                                               const ConnectConfig& connect);

class LearnerPool final : public LearnerRoster {
 public:
  // `max_message_bytes` bounds every message on the learners' channels.
  LearnerPool(const ConnectConfig& connect, int64_t max_message_bytes,
              LearnerPoolHooks hooks = {});
  ~LearnerPool() override;  // Stop()s
  LearnerPool(const LearnerPool&) = delete;
  LearnerPool& operator=(const LearnerPool&) = delete;

  // Drops every learner and joins the connector thread: once it returns, no
  // hook runs again. The pool stays usable as an empty one. Call it from one
  // thread; the destructor calls it too.
  void Stop();

  // Makes `learners` the learner set, in this order: new ids start connecting,
  // ids no longer listed are dropped (calls holding their handles finish
  // normally), an id whose address changed reconnects.
  void SetLearners(const std::vector<LearnerEndpoint>& learners);

  // Applies to connection attempts from now on (a reload).
  void SetConnectConfig(const ConnectConfig& connect);

  // LearnerRoster:
  std::vector<LearnerHandle> Ready() const override;
  absl::StatusOr<LearnerHandle> Current(const std::string& id,
                                        uint64_t epoch) const override;
  void RecordCall(const LearnerHandle& learner,
                  const grpc::Status& status) override;
  std::vector<LearnerSnapshot> Status() const override;
  std::string DescribeNotReady() const override;
  size_t size() const override;

  // How many of size() are ready now.
  size_t ReadyCount() const;

  // Waits until at least `count` learners are ready or the deadline passes
  // (a real one, whatever the pool's clock: the caller waits in real time).
  bool WaitForReady(size_t count,
                    std::chrono::steady_clock::time_point deadline) const;

 private:
  struct Learner;
  struct Event;
  struct QueueShutdown;

  void Run();
  void Handle(Event* event, bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAttempt(Learner* learner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnStateChange(Learner* learner, bool ok)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `diagnose`: on a failed connection, to learn why; `refresh`: a ready
  // learner's resources asked again (see Event::Probe).
  void StartProbe(Learner* learner, bool diagnose = false, bool refresh = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnProbe(Learner* learner, const Event& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRefresh(Learner* learner, const Event& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AttemptFailed(Learner* learner, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AttemptTimedOut(Learner* learner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the scheduled attempts that are due at `now`.
  void StartDueAttempts(Clock::TimePoint now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkTimedOut(Clock::TimePoint now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch(Learner* learner, grpc_connectivity_state state,
             Clock::TimePoint deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule(Learner* learner, Clock::TimePoint when)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long, in real time, until looking again at something due at `when`
  // on clock_; WakeAt: that time on system_clock, for gRPC.
  Clock::Duration RealWait(Clock::TimePoint when) const;
  std::chrono::system_clock::time_point WakeAt(Clock::TimePoint when) const;
  // A gRPC call's deadline for `when` on clock_.
  std::chrono::system_clock::time_point CallDeadline(
      Clock::TimePoint when) const;
  // The clock moved (a FakeClock): wakes the connector to see what is due.
  void Kick();
  Learner* Find(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t ReadyCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_message_bytes_;
  const LearnerPoolHooks hooks_;
  Clock& clock_;
  // Where the connector waits; watches and probes put their completions here.
  PoolInbox inbox_;
  // The connection watches' queue: a callback queue, which nobody polls; its
  // tags are Events, whose functors put them in inbox_.
  grpc_completion_queue* watch_queue_ = nullptr;
  std::unique_ptr<QueueShutdown> watch_queue_shutdown_;
  int clock_waker_ = 0;  // clock_'s token for Kick

  mutable Mutex mu_;
  ConnectConfig connect_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Learner>> learners_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  size_t last_reported_ready_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread connector_;
};

}  // namespace aggregator

#endif  // LIB_LEARNERS_LEARNER_POOL_H_
