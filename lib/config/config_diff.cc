#include "lib/config/config_diff.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aggregator {
namespace {

template <typename T>
void Changed(const char* field, const T& from, const T& to,
             std::vector<std::string>* out) {
  if (from != to) out->push_back(absl::StrCat(field, " ", from, " -> ", to));
}

void ChangedDuration(const char* field, std::chrono::milliseconds from,
                     std::chrono::milliseconds to,
                     std::vector<std::string>* out) {
  if (from != to) {
    out->push_back(
        absl::StrCat(field, " ", from.count(), "ms -> ", to.count(), "ms"));
  }
}

}  // namespace

absl::StatusOr<std::string> DescribeReload(const AggregatorConfig& running,
                                           const AggregatorConfig& next) {
  std::vector<std::string> frozen;
  if (running.listen != next.listen) {
    frozen.push_back(absl::StrCat("listen (running ", running.listen,
                                  ", file says ", next.listen, ")"));
  }
  if (running.max_message_bytes != next.max_message_bytes) {
    frozen.push_back(absl::StrCat("max_message_bytes (running ",
                                  running.max_message_bytes, ", file says ",
                                  next.max_message_bytes, ")"));
  }
  if (running.metrics_listen != next.metrics_listen) {
    frozen.push_back(absl::StrCat("metrics.listen (running '",
                                  running.metrics_listen, "', file says '",
                                  next.metrics_listen, "')"));
  }
  if (!frozen.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reload refused: ", absl::StrJoin(frozen, ", "),
        " cannot change without a restart; the running configuration stays"));
  }

  std::vector<std::string> changes;
  int added = 0;
  int removed = 0;
  int moved = 0;
  for (const LearnerEndpoint& learner : next.learners) {
    auto same_id = std::find_if(
        running.learners.begin(), running.learners.end(),
        [&](const LearnerEndpoint& l) { return l.id == learner.id; });
    if (same_id == running.learners.end()) {
      ++added;
    } else if (same_id->address != learner.address) {
      ++moved;
    }
  }
  for (const LearnerEndpoint& learner : running.learners) {
    if (std::none_of(
            next.learners.begin(), next.learners.end(),
            [&](const LearnerEndpoint& l) { return l.id == learner.id; })) {
      ++removed;
    }
  }
  if (added + removed + moved > 0) {
    changes.push_back(
        absl::StrCat("learners +", added, " -", removed, " ~", moved));
  } else if (running.learners != next.learners) {
    changes.push_back("learners reordered");
  }
  std::vector<std::string> workers;
  for (const WorkerSpec& worker : next.workers) {
    auto same = std::find_if(
        running.workers.begin(), running.workers.end(),
        [&](const WorkerSpec& w) { return w.name == worker.name; });
    if (same == running.workers.end()) {
      workers.push_back("+" + worker.name);
    } else if (*same != worker) {
      workers.push_back("~" + worker.name);
    }
  }
  for (const WorkerSpec& worker : running.workers) {
    if (std::none_of(
            next.workers.begin(), next.workers.end(),
            [&](const WorkerSpec& w) { return w.name == worker.name; })) {
      workers.push_back("-" + worker.name);
    }
  }
  if (!workers.empty()) {
    changes.push_back(absl::StrCat("workers ", absl::StrJoin(workers, " ")));
  }
  Changed("min_learners", running.min_learners, next.min_learners, &changes);
  ChangedDuration("call_timeout", running.call_timeout, next.call_timeout,
                  &changes);
  ChangedDuration("drain_timeout", running.drain_timeout, next.drain_timeout,
                  &changes);
  if (!(running.connect.timeout == next.connect.timeout &&
        running.connect.attempt_timeout == next.connect.attempt_timeout &&
        running.connect.backoff.initial == next.connect.backoff.initial &&
        running.connect.backoff.multiplier == next.connect.backoff.multiplier &&
        running.connect.backoff.jitter == next.connect.backoff.jitter &&
        running.connect.backoff.max == next.connect.backoff.max)) {
    changes.push_back("connect");
  }
  if (running.homogeneous_keys != next.homogeneous_keys) {
    changes.push_back("merge.homogeneous_keys");
  }
  Changed("log.level", running.log_level, next.log_level, &changes);
  return changes.empty() ? std::string("no changes")
                         : absl::StrJoin(changes, "; ");
}

}  // namespace aggregator
