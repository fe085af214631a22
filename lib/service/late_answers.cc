#include "lib/service/late_answers.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

int64_t Ms(Clock::Duration duration) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(duration)
      .count();
}

}  // namespace

struct LateAnswers::Watch {
  const char* method;
  StragglerConfig::LateAfter rule;
  OnLearnerFailure policy;
  std::vector<LearnerHandle> learners;
  Mutex mu;
  bool ended ABSL_GUARDED_BY(mu) = false;
  TimerThread::Id timer ABSL_GUARDED_BY(mu) = 0;
  std::optional<Late> late ABSL_GUARDED_BY(mu);
};

LateAnswers::LateAnswers(Clock* clock, AggregatorMetrics* metrics)
    : clock_(ClockOrSteady(clock)),
      metrics_(metrics),
      rule_(&clock_),
      timers_(&clock_) {}

std::shared_ptr<LateAnswers::Watch> LateAnswers::Begin(
    const char* method, const StragglerConfig::LateAfter& rule,
    OnLearnerFailure policy, std::vector<LearnerHandle> learners) {
  auto watch = std::make_shared<Watch>();
  watch->method = method;
  watch->rule = rule;
  watch->policy = policy;
  watch->learners = std::move(learners);
  return watch;
}

OneLeft LateAnswers::Hook(const std::shared_ptr<Watch>& watch) {
  return [this, watch](size_t silent, std::function<void()> cancel) {
    const Clock::TimePoint now = clock_.Now();
    std::vector<std::string> others;
    for (size_t i = 0; i < watch->learners.size(); ++i) {
      if (i != silent) others.push_back(watch->learners[i].id);
    }
    const std::optional<Clock::Duration> after = rule_.LateAfter(
        watch->rule, watch->method, watch->learners[silent].id, others);
    if (!after) return;
    MutexLock lock(&watch->mu);
    if (watch->ended) return;
    watch->timer = timers_.Schedule(
        now + *after,
        [this, watch, silent, now, after = *after, cancel = std::move(cancel)] {
          Fire(watch, silent, now, after, cancel);
        });
  };
}

void LateAnswers::Fire(const std::shared_ptr<Watch>& watch, size_t silent,
                       Clock::TimePoint others_answered, Clock::Duration after,
                       const std::function<void()>& cancel) {
  const LearnerHandle& learner = watch->learners[silent];
  const std::string rule =
      watch->rule.mode == StragglerConfig::LateAfter::Mode::kAuto
          ? absl::StrCat("auto: ", Ms(after), " ms")
          : LateAfterName(watch->rule);
  const std::string why =
      absl::StrCat("late: silent ", Ms(clock_.Now() - others_answered),
                   " ms after the other ", watch->learners.size() - 1,
                   " learner(s) answered ", watch->method,
                   " (straggler.late_after ", rule, ")");
  {
    MutexLock lock(&watch->mu);
    if (watch->ended) return;
    watch->late = Late{silent, why};
  }
  bool first = false;
  {
    MutexLock lock(&mu_);
    first = late_since_.emplace(learner.id, others_answered).second;
  }
  if (metrics_ != nullptr) metrics_->SetLate(learner.id, true, true);
  const std::string then =
      watch->policy == OnLearnerFailure::kShrink
          ? "its call is cancelled and it leaves the plans "
            "(on_learner_failure: "
            "shrink)"
          : "its call is cancelled and the call fails (on_learner_failure: "
            "fail)";
  if (first) {
    spdlog::warn("learner {} is {}; {}", learner.Name(), why, then);
  } else {
    spdlog::debug("learner {} is {} again; {}", learner.Name(), why, then);
  }
  cancel();
}

std::optional<LateAnswers::Late> LateAnswers::End(
    Watch& watch, const std::vector<Answer>& answers) {
  std::optional<Late> late;
  {
    MutexLock lock(&watch.mu);
    watch.ended = true;
    if (watch.timer != 0) timers_.Cancel(watch.timer);
    late = watch.late;
  }
  for (size_t i = 0; i < answers.size() && i < watch.learners.size(); ++i) {
    if ((late && late->index == i) || !answers[i].ok) continue;
    const std::string& id = watch.learners[i].id;
    rule_.Observe(watch.method, id, answers[i].took);
    bool was_late = false;
    {
      MutexLock lock(&mu_);
      was_late = late_since_.erase(id) > 0;
    }
    if (!was_late) continue;
    if (metrics_ != nullptr) metrics_->SetLate(id, false);
    spdlog::info("learner {} answers again ({} in {} ms); no longer late",
                 watch.learners[i].Name(), watch.method, Ms(answers[i].took));
  }
  return late;
}

std::map<std::string, int64_t> LateAnswers::LateMs() const {
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(&mu_);
  std::map<std::string, int64_t> late;
  for (const auto& [id, since] : late_since_) late[id] = Ms(now - since);
  return late;
}

void LateAnswers::Collect(const std::vector<std::string>& learners) const {
  if (metrics_ == nullptr) return;
  MutexLock lock(&mu_);
  for (const std::string& id : learners) {
    metrics_->SetLate(id, late_since_.count(id) > 0);
  }
}

}  // namespace aggregator
