#include "lib/service/late_watch.h"

#include <algorithm>

namespace aggregator {

constexpr std::chrono::milliseconds LateWatch::kFloor;

LateWatch::LateWatch(Clock* clock) : clock_(ClockOrSteady(clock)) {}

void LateWatch::Observe(const std::string& method, const std::string& learner,
                        Clock::Duration took) {
  MutexLock lock(&mu_);
  Recent& recent = recent_[method][learner];
  std::vector<Clock::Duration>& sorted = recent.sorted;
  if (recent.times.size() < kRecent) {
    recent.times.push_back(took);
  } else {
    // The time that leaves the ring leaves the sorted copy (any equal one).
    Clock::Duration& oldest = recent.times[recent.next];
    sorted.erase(std::lower_bound(sorted.begin(), sorted.end(), oldest));
    oldest = took;
  }
  sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), took), took);
  recent.next = (recent.next + 1) % kRecent;
}

Clock::Duration LateWatch::P99(const Recent& recent) {
  const std::vector<Clock::Duration>& sorted = recent.sorted;
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
    after = std::max(after, kOwnFactor * own->second.sorted.back());
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
