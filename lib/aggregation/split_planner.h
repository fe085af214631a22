// SplitPlanner: remembers how the last GetData split the batch over the
// learners (a plan), checks a Learn against it, and cuts the batch into
// per-learner requests.
//
// A plan is only valid for the learner connections that answered its GetData:
// the learner's `epoch` (bumped by the pool on every reconnect) is part of it,
// so a learner that restarted in between is caught instead of silently
// mis-split.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_AGGREGATION_SPLIT_PLANNER_H_
#define LIB_AGGREGATION_SPLIT_PLANNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"

namespace aggregator {

struct PlanSlice {
  std::string learner_id;
  uint64_t epoch = 0;
  int64_t batch_size = 0;
  // The learner's own plan id (when it is an aggregator itself), passed on in
  // Learn.
  std::string learner_plan_id;
};

struct Plan {
  std::string id;
  std::vector<PlanSlice> slices;  // in learner order
  int64_t total = 0;
};

class SplitPlanner {
 public:
  SplitPlanner();

  // Records a plan and makes it the latest; returns it with its new id.
  std::shared_ptr<const Plan> Record(std::vector<PlanSlice> slices);

  // The plan a Learn names: `plan_id` must be the latest plan's id, or empty
  // for the latest. FAILED_PRECONDITION when no plan was made yet or `plan_id`
  // is stale.
  absl::StatusOr<std::shared_ptr<const Plan>> Find(
      std::string_view plan_id) const;

 private:
  const std::string
      prefix_;  // distinguishes this process's plans from a previous one's
  mutable Mutex mu_;
  uint64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  std::shared_ptr<const Plan> latest_ ABSL_GUARDED_BY(mu_);
};

// INVALID_ARGUMENT, with both numbers and the split, unless `sample_count`
// equals the plan's total.
absl::Status CheckSampleCount(const Plan& plan, int64_t sample_count);

}  // namespace aggregator

#endif  // LIB_AGGREGATION_SPLIT_PLANNER_H_
