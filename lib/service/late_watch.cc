#include "lib/service/late_watch.h"

#include <algorithm>

namespace aggregator {

constexpr std::chrono::milliseconds LateWatch::kFloor;

LateWatch::LateWatch(Clock* clock) : clock_(ClockOrSteady(clock)) {}

void LateWatch::Observe(const std::string& method, const std::string& learner,
                        Clock::Duration took) {
  MutexLock lock(&mu_);
  Recent& recent = recent_[method][learner];
  if (recent.times.size() < kRecent) {
    recent.times.push_back(took);
  } else {
    recent.times[recent.next] = took;
  }
  recent.next = (recent.next + 1) % kRecent;
}

Clock::Duration LateWatch::P99(const Recent& recent) {
  std::vector<Clock::Duration> sorted = recent.times;
  std::sort(sorted.begin(), sorted.end());
  return sorted[(sorted.size() * 99 + 99) / 100 - 1];
}

std::optional<Clock::Duration> LateWatch::LateAfter(
    const StragglerConfig::LateAfter& rule, const std::string& method,
    const std::string& learner, const std::vector<std::string>& others) const {
  using Mode = StragglerConfig::LateAfter::Mode;
  if (others.empty() || rule.mode == Mode::kOff) return std::nullopt;
  if (rule.mode == Mode::kFixed) return rule.fixed;
  MutexLock lock(&mu_);
  auto by_method = recent_.find(method);
  if (by_method == recent_.end()) return std::nullopt;
  const auto& learners = by_method->second;
  Clock::Duration after = kFloor;
  for (const std::string& other : others) {
    auto it = learners.find(other);
    if (it == learners.end() || it->second.times.size() < kMinSamples) {
      return std::nullopt;
    }
    after = std::max(after, kOthersP99Factor * P99(it->second));
  }
  if (auto own = learners.find(learner); own != learners.end()) {
    const auto& times = own->second.times;
    after = std::max(
        after, kOwnFactor * *std::max_element(times.begin(), times.end()));
  }
  return after;
}

std::optional<Clock::TimePoint> LateWatch::LateAt(
    const StragglerConfig::LateAfter& rule, const std::string& method,
    const std::string& learner, const std::vector<std::string>& others,
    Clock::TimePoint others_answered) const {
  auto after = LateAfter(rule, method, learner, others);
  if (!after) return std::nullopt;
  return others_answered + *after;
}

bool LateWatch::IsLate(const StragglerConfig::LateAfter& rule,
                       const std::string& method, const std::string& learner,
                       const std::vector<std::string>& others,
                       Clock::TimePoint others_answered) const {
  auto at = LateAt(rule, method, learner, others, others_answered);
  return at && clock_.Now() >= *at;
}

}  // namespace aggregator
