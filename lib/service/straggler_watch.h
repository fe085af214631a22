// StragglerWatch: which learner holds the steps back. After each Learn on
// which every learner answered, each learner's time is compared with the
// median of the others' times on that step; a learner slower than
// straggler.factor times that median for straggler.window steps in a row is
// flagged (once per episode), and unflagged on the first step it is not.
// Each learner's time is also kept as an exponentially weighted average and
// as the percentiles of its last kRecentSteps steps, for status.
//
// The watch reads no clock: the times are the Learn calls' own, taken by the
// fan-out on the service's clock (Times), so a FakeClock drives it exactly.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_SERVICE_STRAGGLER_WATCH_H_
#define LIB_SERVICE_STRAGGLER_WATCH_H_

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/learners/fan_out.h"

namespace aggregator {

class StragglerWatch {
 public:
  // A learner whose flag changed with this step.
  struct Change {
    std::string id;
    bool flagged;
    double ratio;  // its time over the median of the others' this step
  };
  static constexpr size_t kRecentSteps = 256;
  struct Learner {
    double ewma_seconds = 0;
    double p50_seconds = 0;  // of its last kRecentSteps Learn times
    double p99_seconds = 0;
    bool flagged = false;
  };

  // One step's times for Observe: each learner's call, from when it could
  // have its whole request to its answer, in seconds. Empty when a call
  // failed: a failure is not a slow step.
  template <typename Request, typename Reply>
  static std::vector<std::pair<std::string, double>> Times(
      const LearnerCalls<Request, Reply>& calls) {
    std::vector<std::pair<std::string, double>> seconds;
    for (const auto& call : calls) {
      if (!call.status.ok()) return {};
      seconds.emplace_back(
          call.learner.id,
          std::chrono::duration<double>(call.finished - call.started).count());
    }
    return seconds;
  }

  // One step: each learner's Learn time in seconds. Steps of a single learner
  // (nothing to compare with) change nothing.
  std::vector<Change> Observe(
      const StragglerConfig& config,
      const std::vector<std::pair<std::string, double>>& seconds);

  std::map<std::string, Learner> Learners() const;

  // Forgets `id`'s streak and flag: it is judged afresh from its next step
  // (once it is back in the plans after being taken out for being slow).
  void Reset(const std::string& id);

 private:
  struct State {
    Learner learner;
    int slow_steps = 0;          // in a row
    std::vector<double> recent;  // a ring of the last kRecentSteps times
    size_t next = 0;             // where the next time goes
  };
  mutable Mutex mu_;
  std::map<std::string, State> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aggregator

#endif  // LIB_SERVICE_STRAGGLER_WATCH_H_
