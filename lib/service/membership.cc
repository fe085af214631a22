#include "lib/service/membership.h"

#include <algorithm>
#include <set>

namespace aggregator {

const char* StandingName(LearnerStanding::State state) {
  switch (state) {
    case LearnerStanding::kIn:
      return "in";
    case LearnerStanding::kOut:
      return "out";
    case LearnerStanding::kRejoining:
      return "rejoining";
  }
  return "unknown";
}

Membership::Membership(std::chrono::milliseconds first_retry,
                       std::chrono::milliseconds max_retry, Clock* clock)
    : first_retry_(first_retry),
      max_retry_(max_retry),
      clock_(ClockOrSteady(clock)) {}

void Membership::SetPolicy(OnLearnerFailure policy) {
  MutexLock lock(&mu_);
  policy_ = policy;
  if (policy == OnLearnerFailure::kFail) {
    // Every ready learner is a member now: standings from shrink (out,
    // rejoining, their retry delays) no longer hold, and status must not show
    // them. Epochs and who has the task stay, should shrink come back.
    for (auto& [id, entry] : entries_) {
      entry.standing = {};
      entry.replaying = false;
      entry.probing = false;
      entry.retry_at = {};
      entry.retry_delay = std::chrono::milliseconds(0);
    }
  }
}

OnLearnerFailure Membership::policy() const {
  MutexLock lock(&mu_);
  return policy_;
}

Membership::View Membership::Select(const std::vector<LearnerHandle>& ready,
                                    bool claim_replays) {
  MutexLock lock(&mu_);
  View view;
  std::set<std::string> present;
  for (const LearnerHandle& learner : ready) {
    present.insert(learner.id);
    if (policy_ == OnLearnerFailure::kFail) {
      view.members.push_back(learner);
      continue;
    }
    Entry& entry = entries_[learner.id];
    if (entry.epoch != learner.epoch) {
      // New, or reconnected (restarted): whatever it had is gone.
      entry.epoch = learner.epoch;
      entry.has_task = false;
      entry.replaying = false;
      entry.probing = false;
      entry.retry_delay = std::chrono::milliseconds(0);
      if (entry.standing.state == LearnerStanding::kOut) entry.standing = {};
    }
    // Back only when a probe answers (ProbeAnswered), not when its retry is
    // due: a learner still hung would cost this call a wait.
    if (entry.standing.state == LearnerStanding::kOut) continue;
    if (task_ && !entry.has_task) {
      entry.standing = {LearnerStanding::kRejoining, ""};
      if (entry.replaying) {
        view.replaying.push_back(learner);
      } else {
        entry.replaying = claim_replays;
        view.to_replay.push_back(learner);
      }
      continue;
    }
    entry.standing = {};
    view.members.push_back(learner);
  }
  // Learners that are no longer ready start afresh when they return.
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = present.count(it->first) ? std::next(it) : entries_.erase(it);
  }
  std::vector<std::string> ids;
  for (const LearnerHandle& member : view.members) ids.push_back(member.id);
  if (ids != last_members_) {
    last_members_ = std::move(ids);
    ++generation_;
  }
  if (!view.to_replay.empty()) {
    view.task = task_;
    view.task_seq = task_seq_;
  }
  view.generation = generation_;
  return view;
}

void Membership::Failed(const LearnerHandle& learner, const std::string& why) {
  MutexLock lock(&mu_);
  if (policy_ != OnLearnerFailure::kShrink) return;
  Entry& entry = entries_[learner.id];
  // A failure of a call made before it reconnected says nothing of it now.
  if (entry.epoch > learner.epoch) return;
  entry.epoch = learner.epoch;
  entry.standing = {LearnerStanding::kOut, why};
  entry.retry_delay = entry.retry_delay.count() == 0
                          ? first_retry_
                          : std::min(max_retry_, entry.retry_delay * 2);
  entry.retry_at = clock_.Now() + entry.retry_delay;
}

std::vector<LearnerHandle> Membership::DueProbes(
    const std::vector<LearnerHandle>& ready) {
  MutexLock lock(&mu_);
  std::vector<LearnerHandle> due;
  if (policy_ != OnLearnerFailure::kShrink) return due;
  const Clock::TimePoint now = clock_.Now();
  for (const LearnerHandle& learner : ready) {
    auto it = entries_.find(learner.id);
    // Reconnected since it went out: Select has it back, no probe needed.
    if (it == entries_.end() || it->second.epoch != learner.epoch) continue;
    Entry& entry = it->second;
    if (entry.standing.state != LearnerStanding::kOut || entry.probing ||
        now < entry.retry_at) {
      continue;
    }
    entry.probing = true;
    due.push_back(learner);
  }
  return due;
}

bool Membership::ProbeAnswered(const LearnerHandle& learner) {
  MutexLock lock(&mu_);
  auto it = entries_.find(learner.id);
  if (it == entries_.end() || it->second.epoch != learner.epoch) return false;
  Entry& entry = it->second;
  entry.probing = false;
  if (policy_ != OnLearnerFailure::kShrink ||
      entry.standing.state != LearnerStanding::kOut) {
    return false;
  }
  entry.standing = {};
  return true;
}

void Membership::ProbeFailed(const LearnerHandle& learner) {
  MutexLock lock(&mu_);
  auto it = entries_.find(learner.id);
  if (it == entries_.end() || it->second.epoch != learner.epoch) return;
  Entry& entry = it->second;
  entry.probing = false;
  if (entry.standing.state != LearnerStanding::kOut) return;
  entry.retry_at = clock_.Now() + first_retry_;
}

void Membership::Rejoined(const LearnerHandle& learner, uint64_t task_seq) {
  MutexLock lock(&mu_);
  auto it = entries_.find(learner.id);
  if (it == entries_.end() || it->second.epoch != learner.epoch) return;
  it->second.replaying = false;
  // A replay of a task that has been replaced or closed since: it has the old
  // one, so it does not have the task.
  if (task_seq != task_seq_) return;
  it->second.has_task = true;
  it->second.replaying = false;
  it->second.standing = {};
}

void Membership::ReplayEnded(const LearnerHandle& learner) {
  MutexLock lock(&mu_);
  auto it = entries_.find(learner.id);
  if (it == entries_.end() || it->second.epoch != learner.epoch) return;
  it->second.replaying = false;
}

void Membership::TaskStarted(const aggregator::v1::StartTaskRequest& request,
                             const std::vector<LearnerHandle>& started) {
  MutexLock lock(&mu_);
  task_ = request;
  ++task_seq_;
  for (const LearnerHandle& learner : started) {
    Entry& entry = entries_[learner.id];
    if (entry.epoch != learner.epoch) {
      entry = Entry{};
      entry.epoch = learner.epoch;
    }
    entry.has_task = true;
  }
}

void Membership::TaskClosed() {
  MutexLock lock(&mu_);
  task_.reset();
  ++task_seq_;
  for (auto& [id, entry] : entries_) {
    entry.has_task = false;
    entry.replaying = false;
  }
}

uint64_t Membership::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

std::map<std::string, LearnerStanding> Membership::Standings() const {
  MutexLock lock(&mu_);
  std::map<std::string, LearnerStanding> standings;
  for (const auto& [id, entry] : entries_) {
    if (entry.standing.state != LearnerStanding::kIn) {
      standings[id] = entry.standing;
    }
  }
  return standings;
}

aggregator::v1::Membership Membership::ToProto(const View& view) {
  aggregator::v1::Membership membership;
  membership.set_generation(view.generation);
  for (const LearnerHandle& member : view.members) {
    membership.add_members(member.id);
  }
  return membership;
}

}  // namespace aggregator
