// DiscoveryLoop: runs the `learner_sources` of aggregator.yaml, each on a
// thread of its own, and keeps each source's learners for the pool:
// - every `refresh` (from the start of one refresh to the start of the next;
//   at once after one that took longer) the source is asked again, within its
//   `timeout`;
// - its answer becomes its learners in a stable order: those it had keep
//   their places, new ones are appended (StableMerge);
// - an error keeps the last learners; it is logged once per episode of errors
//   (and once when the source recovers), counted, and shown in Status() until
//   a refresh succeeds. An exception thrown by the source, by make_source or
//   by failed_learners is such an error; one thrown by on_change is logged.
//   A source's thread never dies of one;
// - for a source that takes failure reports (the orchestrator), a learner of
//   it that the pool has had failed for report_failed_after (as seen at its
//   refreshes) is reported once per failure episode; a report that fails is
//   sent again at a later refresh, after a delay doubling from `refresh` to 5
//   minutes. The episode ends at the first refresh that finds the learner not
//   failed, or gone.
// The owner hears of each change of a source's learners through on_change and
// reads them with Members().
//
// Time comes from an injected Clock (refresh schedule, failure episodes,
// report backoff); the requests themselves have real deadlines.
//
// Thread-safety: all methods may be called from any thread. Hooks are called
// from the sources' threads without any of the loop's locks held; once Stop()
// returns none runs again.
#ifndef LIB_DISCOVERY_DISCOVERY_LOOP_H_
#define LIB_DISCOVERY_DISCOVERY_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/host_port.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/discovery/learner_source.h"

namespace aggregator {

// One source as status and metrics see it.
struct SourceSnapshot {
  std::string kind;    // "dns", "orchestrator"
  std::string key;     // LearnerSourceKey
  std::string target;  // LearnerSourceTarget
  // Which run of the source, unique in the loop: one removed and added again
  // is another, its counts from 0.
  uint64_t instance = 0;
  std::vector<HostPort> learners;
  // Since the end of its last successful refresh; nullopt: none yet.
  std::optional<Clock::Duration> since_last_refresh;
  // Why its refreshes fail, while they do; "" once one succeeds.
  std::string last_error;
  int64_t refreshes = 0;  // every attempt
  int64_t errors = 0;     // failed attempts
  int64_t reported = 0;   // learners reported failed (and accepted)
  int64_t report_errors = 0;
};

struct DiscoveryHooks {
  // Some source's learners changed.
  std::function<void()> on_change;
  // The ids (HostPort::ToString()) of the pool's learners that are failed.
  std::function<std::set<std::string>()> failed_learners;
  // Makes the source of a configuration entry; default: MakeLearnerSource.
  std::function<std::unique_ptr<LearnerSource>(const LearnerSourceConfig&)>
      make_source;
  Clock* clock = nullptr;  // default: SteadyClock()
};

// A DnsSource or an OrchestratorSource, as the entry says.
std::unique_ptr<LearnerSource> MakeLearnerSource(
    const LearnerSourceConfig& config);

// `next` in the order of `previous` where they share addresses, with the
// addresses only `next` has appended in its order (duplicates dropped).
std::vector<HostPort> StableMerge(const std::vector<HostPort>& previous,
                                  const std::vector<HostPort>& next);

class DiscoveryLoop {
 public:
  explicit DiscoveryLoop(DiscoveryHooks hooks = {});
  ~DiscoveryLoop();  // Stop()s
  DiscoveryLoop(const DiscoveryLoop&) = delete;
  DiscoveryLoop& operator=(const DiscoveryLoop&) = delete;

  // Makes `sources` the running set, in this order. A source whose
  // LearnerSourceKey was running keeps its thread and learners and takes the
  // other settings at its next refresh; a new one starts (and refreshes at
  // once); one no longer listed stops, and its learners go.
  void Apply(const std::vector<LearnerSourceConfig>& sources);

  // Stops every source (a request in flight is cut within 50 ms) and joins
  // their threads. Idempotent; the loop stays usable as an empty one.
  void Stop();

  // Each source's learners, in configuration order.
  std::vector<std::vector<HostPort>> Members() const;
  std::vector<SourceSnapshot> Status() const;

 private:
  struct Source;

  void Run(Source* source);
  // Waits until the source's next refresh is due; false when it stops.
  bool WaitForRefresh(Source* source);
  void Refresh(Source* source, LearnerSource& from,
               const LearnerSourceConfig& config);
  // Counts and logs a refresh's outcome (an error keeps the learners); true
  // when the source's learners changed.
  bool Record(Source* source,
              const absl::StatusOr<std::vector<HostPort>>& answer);
  void ReportFailed(Source* source, LearnerSource& to,
                    const LearnerSourceConfig& config);
  // Wakes every source's wait to look at the clock again.
  void Wake();

  const DiscoveryHooks hooks_;
  Clock& clock_;
  int waker_token_ = 0;

  mutable Mutex mu_;  // before any Source::mu
  std::vector<std::unique_ptr<Source>> sources_ ABSL_GUARDED_BY(mu_);
  uint64_t instances_ ABSL_GUARDED_BY(mu_) = 0;  // started so far
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aggregator

#endif  // LIB_DISCOVERY_DISCOVERY_LOOP_H_
