#include "lib/service/rejoin_step.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/grpc_status.h"
#include "lib/ops/logging.h"

namespace aggregator {

constexpr std::chrono::milliseconds RejoinStep::kPeriod;
constexpr std::chrono::milliseconds RejoinStep::kProbeTimeout;

RejoinStep::RejoinStep(Membership* membership, Clock* clock, Hooks hooks)
    : membership_(membership), hooks_(std::move(hooks)), timers_(clock) {
  MutexLock lock(&state_->mu);
  state_->next =
      timers_.Schedule(timers_.clock().Now() + kPeriod, [this] { Step(); });
}

RejoinStep::~RejoinStep() { Stop(); }

void RejoinStep::Stop() {
  std::vector<std::shared_ptr<Pending>> pending;
  std::vector<std::shared_ptr<Probe>> probes;
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    if (state_->next != 0) timers_.Cancel(state_->next);
    pending.assign(state_->replays.begin(), state_->replays.end());
    probes.assign(state_->probes.begin(), state_->probes.end());
  }
  // Outside the lock: a cancelled call's callback takes it.
  for (const auto& replay : pending) replay->call.context->TryCancel();
  for (const auto& probe : probes) probe->context->TryCancel();
  MutexLock lock(&state_->mu);
  // Evaluated by the Mutex with state_->mu held.
  auto idle = [state = state_.get()]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return state->replays.empty() && state->probes.empty();
  };
  // A cancelled call ends promptly; its callback uses this until then.
  while (
      !state_->mu.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(1))) {
    spdlog::warn(
        "stopping: waiting for {} cancelled StartTask replay(s) and {} "
        "GetResource probe(s)",
        state_->replays.size(), state_->probes.size());
  }
}

void RejoinStep::Kick() {
  MutexLock lock(&state_->mu);
  if (state_->stopping) return;
  if (state_->next != 0) timers_.Cancel(state_->next);
  state_->next = timers_.Schedule(timers_.clock().Now(), [this] { Step(); });
}

void RejoinStep::Step() {
  {
    MutexLock lock(&state_->mu);
    if (state_->stopping) return;
    state_->next = 0;  // a Kick meanwhile schedules the next step
  }
  const std::vector<LearnerHandle> ready = hooks_.ready();
  Membership::View view = membership_->Select(ready, /*claim_replays=*/true);
  for (const LearnerHandle& learner : view.to_replay) {
    if (!Start(learner, *view.task, view.task_seq)) {
      membership_->ReplayEnded(learner);
    }
  }
  for (const LearnerHandle& learner : membership_->DueProbes(ready)) {
    if (!StartProbe(learner)) membership_->ProbeFailed(learner);
  }
  MutexLock lock(&state_->mu);
  if (state_->stopping || state_->next != 0) return;
  state_->next =
      timers_.Schedule(timers_.clock().Now() + kPeriod, [this] { Step(); });
}

bool RejoinStep::Start(const LearnerHandle& learner,
                       const aggregator::v1::StartTaskRequest& task,
                       uint64_t task_seq) {
  auto pending = std::make_shared<Pending>();
  pending->task = task;
  pending->task_seq = task_seq;
  pending->call.learner = learner;
  pending->call.context = NewLearnerContext(
      nullptr, std::chrono::system_clock::now() + hooks_.timeout(),
      hooks_.call_path);
  {
    MutexLock lock(&state_->mu);
    // Counted in under the lock the destructor sets stopping under: none
    // starts once it waits.
    if (state_->stopping) return false;
    pending->counted = hooks_.enter();
    if (pending->counted == nullptr) return false;
    state_->replays.insert(pending);
  }
  spdlog::debug("learner {}: replaying the task (StartTask) before it rejoins",
                learner.Name());
  pending->call.started = timers_.clock().Now();
  // The callback holds the state, not the step: it may end after the
  // destructor's wait only by what it does on the state.
  learner.stub->async()->StartTask(
      pending->call.context.get(), &pending->task, &pending->call.reply,
      [this, pending, state = state_](grpc::Status status) {
        pending->call.finished = timers_.clock().Now();
        pending->call.status = std::move(status);
        Ended(*pending);
        pending->counted.reset();
        MutexLock lock(&state->mu);
        state->replays.erase(pending);
      });
  return true;
}

void RejoinStep::Ended(Pending& pending) {
  const Replay& replay = pending.call;
  hooks_.record(replay);
  membership_->ReplayEnded(replay.learner);
  {
    MutexLock lock(&state_->mu);
    // Cancelled by Stop: says nothing of the learner.
    if (state_->stopping) return;
  }
  ScopedLogFields fields({{"learner", replay.learner.id},
                          {"address", replay.learner.address.ToString()}});
  if (replay.status.ok()) {
    membership_->Rejoined(replay.learner, pending.task_seq);
    spdlog::info("learner {} rejoins the plans: the task was replayed",
                 replay.learner.Name());
    return;
  }
  hooks_.failed(replay.learner,
                absl::StrCat("StartTask replay failed: ",
                             CodeName(replay.status.error_code()), ": ",
                             replay.status.error_message()));
}

bool RejoinStep::StartProbe(const LearnerHandle& learner) {
  auto probe = std::make_shared<Probe>();
  probe->learner = learner;
  probe->context = NewLearnerContext(
      nullptr,
      std::chrono::system_clock::now() +
          std::min<std::chrono::milliseconds>(hooks_.timeout(), kProbeTimeout),
      hooks_.call_path);
  {
    MutexLock lock(&state_->mu);
    // As Start: none starts once Stop waits.
    if (state_->stopping) return false;
    probe->counted = hooks_.enter();
    if (probe->counted == nullptr) return false;
    state_->probes.insert(probe);
  }
  learner.stub->async()->GetResource(
      probe->context.get(), &probe->request, &probe->reply,
      [this, probe, state = state_](grpc::Status status) {
        ProbeEnded(*probe, status);
        probe->counted.reset();
        MutexLock lock(&state->mu);
        state->probes.erase(probe);
      });
  return true;
}

void RejoinStep::ProbeEnded(const Probe& probe, const grpc::Status& status) {
  bool stopping;
  {
    MutexLock lock(&state_->mu);
    stopping = state_->stopping;
  }
  // Cancelled by Stop: says nothing of the learner.
  if (stopping || !status.ok()) {
    membership_->ProbeFailed(probe.learner);
    if (!stopping) {
      spdlog::debug("learner {}: still out, its GetResource probe failed: {}",
                    probe.learner.Name(), status.error_message());
    }
    return;
  }
  if (!membership_->ProbeAnswered(probe.learner)) return;
  ScopedLogFields fields({{"learner", probe.learner.id},
                          {"address", probe.learner.address.ToString()}});
  spdlog::info("learner {} rejoins the plans: it answered a GetResource probe",
               probe.learner.Name());
  // Lacking the task: the next step replays it (Select hands it out).
  Kick();
}

}  // namespace aggregator
