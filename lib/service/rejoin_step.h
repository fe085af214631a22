// RejoinStep: a learner that is ready again (new, reconnected, back from out)
// while a task is open has the task's StartTask replayed by a step of its own
// (issue 28, rejoin off the call path), every kPeriod and whenever a call
// asks (Kick), and joins the next plan once the replay succeeded. No replay
// waits for another learner's call, nor another learner's replay: each is a
// call of its own, bounded by call_timeout, and counted as a call in flight
// (Hooks::enter), so shutdown waits for it and draining starts none.
//
// The same step probes the learners that are out (on_learner_failure:
// shrink) once their retry is due, with GetResource (no side effect, deadline
// min(call_timeout, kProbeTimeout)), counted in and out like a replay: one
// that answers is back in the plans, one that does not stays out and is
// probed again first_retry later. So a hung learner costs no GetData or
// Learn a late_after wait, and a continued one is back within a probe.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_SERVICE_REJOIN_STEP_H_
#define LIB_SERVICE_REJOIN_STEP_H_

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/base/timer_thread.h"
#include "lib/learners/fan_out.h"
#include "lib/learners/learner_pool.h"
#include "lib/service/admission_lease.h"
#include "lib/service/membership.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {

class RejoinStep {
 public:
  static constexpr std::chrono::milliseconds kPeriod{100};
  // A probe's deadline, at most (call_timeout if shorter).
  static constexpr std::chrono::milliseconds kProbeTimeout{1000};

  using Replay = LearnerCall<aggregator::v1::StartTaskRequest,
                             aggregator::v1::StartTaskReply>;
  struct Hooks {
    // The ready learners, in pool order.
    std::function<std::vector<LearnerHandle>()> ready;
    // A replay's place among the calls in flight (admission_lease.h), held
    // until it has ended and been recorded; null (draining): none starts.
    std::function<std::unique_ptr<AdmissionLease>()> enter;
    // How long a replay may take (call_timeout).
    std::function<std::chrono::milliseconds()> timeout;
    // What a replay carries as its call path (lib/learners/call_path.h).
    std::string call_path;
    // Records a replay that ended (metrics, the pool's counters).
    std::function<void(const Replay&)> record;
    // A replay failed: the learner stays out (on_learner_failure: shrink).
    std::function<void(const LearnerHandle&, const std::string& why)> failed;
  };

  // `membership` must outlive this. `clock` (null: the steady clock) times
  // the steps.
  RejoinStep(Membership* membership, Clock* clock, Hooks hooks);
  // Stop().
  ~RejoinStep();
  RejoinStep(const RejoinStep&) = delete;
  RejoinStep& operator=(const RejoinStep&) = delete;

  // A step now (a call saw a learner waiting for its replay).
  void Kick();
  // Stops the steps, cancels the replays and probes in flight and waits until
  // they have ended. Idempotent.
  void Stop();

 private:
  // One replay in flight.
  struct Pending {
    aggregator::v1::StartTaskRequest task;
    uint64_t task_seq = 0;  // Membership::View::task_seq of `task`
    Replay call;
    std::unique_ptr<AdmissionLease> counted;  // Hooks::enter's
  };
  // One probe in flight.
  struct Probe {
    LearnerHandle learner;
    std::unique_ptr<grpc::ClientContext> context;
    aggregator::v1::GetResourceRequest request;
    aggregator::v1::Resource reply;
    std::unique_ptr<AdmissionLease> counted;  // its place among the calls
  };
  // What a replay's or probe's callback may still touch once the replay is
  // counted out: shared, so the lock outlives the step's destructor's wait.
  struct State {
    Mutex mu;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    TimerThread::Id next ABSL_GUARDED_BY(mu) = 0;  // the next step's timer
    // Every call in flight, each until its callback's last use of the step.
    // Not by learner: Membership may hand a learner out again while the last
    // call's callback is still on its way out (it has told Membership), and
    // keyed by learner the new call's entry was then erased by the old
    // callback, so Stop did not wait for the new one (ASan: its callback
    // used a destroyed step).
    std::set<std::shared_ptr<Pending>> replays ABSL_GUARDED_BY(mu);
    std::set<std::shared_ptr<Probe>> probes ABSL_GUARDED_BY(mu);
  };

  // Replays the task to each learner Membership hands out, probes the out
  // learners whose retry is due, then schedules the next step. On the timer
  // thread.
  void Step();
  // Starts the replay to `learner`, counted in; false when none may start.
  bool Start(const LearnerHandle& learner,
             const aggregator::v1::StartTaskRequest& task, uint64_t task_seq);
  // The replay ended (on a gRPC thread): recorded, the learner in or out.
  void Ended(Pending& pending);
  // Starts the probe of `learner`, counted in; false when none may start.
  bool StartProbe(const LearnerHandle& learner);
  // The probe ended (on a gRPC thread): the learner back or still out.
  void ProbeEnded(const Probe& probe, const grpc::Status& status);

  Membership* const membership_;
  const Hooks hooks_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
  TimerThread timers_;  // last: stopped before the rest goes
};

}  // namespace aggregator

#endif  // LIB_SERVICE_REJOIN_STEP_H_
