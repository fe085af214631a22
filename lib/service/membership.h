// Membership: which of the ready learners take part in the plans, under
// on_learner_failure (lib/config/config.h).
//
// With `fail` (the default) every ready learner is a member, as before. With
// `shrink`:
// - a learner whose call fails leaves the plans at once (out: why), and comes
//   back when it has reconnected or, if it stayed connected, when a probe
//   (GetResource, sent off the call path by lib/service/rejoin_step.h once
//   its retry delay has passed; the delay doubles while it keeps failing)
//   answers: a hung learner costs no call a wait, and a continued one is
//   back within a probe (issue 28). A failed probe is repeated first_retry
//   later;
// - while a task is open (StartTask succeeded, no CloseTask since), a learner
//   that joins (new, reconnected, or back from out) first gets the task's
//   StartTask replayed (by lib/service/rejoin_step.h): it is "rejoining"
//   until then, and stays out if the replay fails;
// - every change of the member set bumps `generation`, which GetData and
//   Learn carry to the learners (proto Membership), so learners training
//   data-parallel can re-form their group.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_SERVICE_MEMBERSHIP_H_
#define LIB_SERVICE_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/learners/learner_pool.h"
#include "proto/learner.pb.h"

namespace aggregator {

// A learner's standing, for status.
struct LearnerStanding {
  enum State { kIn, kOut, kRejoining };
  State state = kIn;
  std::string why;  // kOut: the failure that put it out
};

// "in", "out", "rejoining".
const char* StandingName(LearnerStanding::State state);

class Membership {
 public:
  // The members among the ready learners, and those to replay the task to
  // before they join.
  struct View {
    std::vector<LearnerHandle> members;
    // To replay the task to before they join (claimed: see Select).
    std::vector<LearnerHandle> to_replay;
    // Rejoining, their replay claimed by another call still in flight: in no
    // plan of this call, but ready.
    std::vector<LearnerHandle> replaying;
    std::optional<aggregator::v1::StartTaskRequest> task;  // set with to_replay
    uint64_t task_seq = 0;  // which task `task` is: give it back to Rejoined
    uint64_t generation = 0;
  };

  static constexpr std::chrono::milliseconds kFirstRetry{1000};
  static constexpr std::chrono::milliseconds kMaxRetry{30000};

  // The delay before a learner that failed while staying connected is tried
  // again (doubling to `max_retry` while it keeps failing), on `clock` (null:
  // SteadyClock(); must outlive this).
  explicit Membership(std::chrono::milliseconds first_retry = kFirstRetry,
                      std::chrono::milliseconds max_retry = kMaxRetry,
                      Clock* clock = nullptr);

  void SetPolicy(OnLearnerFailure policy);
  OnLearnerFailure policy() const;

  // `ready` in pool order. Bumps the generation when the members changed.
  // With `claim_replays` (the caller, the rejoin step, will replay the task
  // to view.to_replay) the learners in to_replay are claimed until
  // ReplayEnded: other Selects list them in `replaying` meanwhile. Without,
  // to_replay only tells.
  View Select(const std::vector<LearnerHandle>& ready,
              bool claim_replays = false);

  // shrink: `learner` leaves the plans; `why` says what failed.
  void Failed(const LearnerHandle& learner, const std::string& why);
  // shrink: the out learners among `ready` whose retry is due, claimed: each
  // is probed (GetResource) by one caller at a time, which ends the probe
  // with ProbeAnswered or ProbeFailed.
  std::vector<LearnerHandle> DueProbes(const std::vector<LearnerHandle>& ready);
  // Its probe answered: back (through the task's replay if it lacks the
  // task). Its retry delay stays, so failing again soon backs off longer.
  // True when it was out and is back now.
  bool ProbeAnswered(const LearnerHandle& learner);
  // Its probe failed (or timed out, or was cancelled): out still, probed
  // again first_retry from now (probes cost no call a wait).
  void ProbeFailed(const LearnerHandle& learner);
  // Task `task_seq` (View::task_seq) was replayed to it: a member from now on,
  // unless another task was started or the task closed since that Select
  // (then it stays rejoining, and the current task is replayed to it).
  void Rejoined(const LearnerHandle& learner, uint64_t task_seq);
  // The replay a Select handed out (to_replay) has ended, however it went:
  // another Select may hand it out again. Each joining learner is replayed
  // to by one call at a time, however many GetData run at once.
  void ReplayEnded(const LearnerHandle& learner);

  // StartTask succeeded on `started` (the task is replayed to learners that
  // join later) / CloseTask.
  void TaskStarted(const aggregator::v1::StartTaskRequest& request,
                   const std::vector<LearnerHandle>& started);
  void TaskClosed();

  uint64_t generation() const;
  // The standing of each learner id that is not simply in (absent: in).
  std::map<std::string, LearnerStanding> Standings() const;

  // The members as Learn and GetData replies carry them.
  static aggregator::v1::Membership ToProto(const View& view);

 private:
  struct Entry {
    uint64_t epoch = 0;  // the connection it is known at
    LearnerStanding standing;
    Clock::TimePoint retry_at{};
    std::chrono::milliseconds retry_delay{0};
    bool has_task = false;   // replayed (or started) at this epoch
    bool replaying = false;  // a call replays the task to it now
    bool probing = false;    // a probe (GetResource) to it is in flight
  };

  const std::chrono::milliseconds first_retry_;
  const std::chrono::milliseconds max_retry_;
  Clock& clock_;
  mutable Mutex mu_;
  OnLearnerFailure policy_ ABSL_GUARDED_BY(mu_) = OnLearnerFailure::kFail;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::optional<aggregator::v1::StartTaskRequest> task_ ABSL_GUARDED_BY(mu_);
  uint64_t task_seq_ ABSL_GUARDED_BY(mu_) = 0;  // moves at each start and close
  std::vector<std::string> last_members_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aggregator

#endif  // LIB_SERVICE_MEMBERSHIP_H_
