#include "lib/service/straggler_watch.h"

#include <algorithm>

namespace aggregator {
namespace {

// The weight of the newest step in the average.
constexpr double kEwmaWeight = 0.2;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

std::vector<StragglerWatch::Change> StragglerWatch::Observe(
    const StragglerConfig& config,
    const std::vector<std::pair<std::string, double>>& seconds) {
  MutexLock lock(&mu_);
  std::vector<Change> changes;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const auto& [id, took] = seconds[i];
    State& state = states_[id];
    if (state.recent.size() < kRecentSteps) {
      state.recent.push_back(took);
    } else {
      state.recent[state.next] = took;
    }
    state.next = (state.next + 1) % kRecentSteps;
    state.learner.ewma_seconds =
        state.learner.ewma_seconds == 0
            ? took
            : (1 - kEwmaWeight) * state.learner.ewma_seconds +
                  kEwmaWeight * took;
    if (seconds.size() < 2) continue;
    std::vector<double> others;
    for (size_t j = 0; j < seconds.size(); ++j) {
      if (j != i) others.push_back(seconds[j].second);
    }
    const double median = Median(std::move(others));
    const double ratio = median > 0 ? took / median : 1;
    if (ratio > config.factor) {
      ++state.slow_steps;
      if (!state.learner.flagged && state.slow_steps >= config.window) {
        state.learner.flagged = true;
        changes.push_back({id, true, ratio});
      }
    } else {
      state.slow_steps = 0;
      if (state.learner.flagged) {
        state.learner.flagged = false;
        changes.push_back({id, false, ratio});
      }
    }
  }
  return changes;
}

void StragglerWatch::Reset(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return;
  it->second.slow_steps = 0;
  it->second.learner.flagged = false;
}

std::map<std::string, StragglerWatch::Learner> StragglerWatch::Learners()
    const {
  MutexLock lock(&mu_);
  std::map<std::string, Learner> learners;
  for (const auto& [id, state] : states_) {
    Learner learner = state.learner;
    std::vector<double> sorted = state.recent;
    std::sort(sorted.begin(), sorted.end());
    if (!sorted.empty()) {
      // Nearest rank.
      learner.p50_seconds = sorted[(sorted.size() - 1) / 2];
      learner.p99_seconds = sorted[(sorted.size() * 99 + 99) / 100 - 1];
    }
    learners[id] = learner;
  }
  return learners;
}

}  // namespace aggregator
