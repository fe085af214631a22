// SplitPlanner: the plans GetData made (how each batch is split over the
// learners), kept by id so that several coordinators, or one that plans step
// t+1 while step t learns, each Learn on their own plan.
//
// A plan is only valid for the learner connections that answered its GetData:
// the learner's `epoch` (bumped by the pool on every reconnect) is part of it,
// so a learner that restarted in between is caught instead of silently
// mis-split. A plan is used once: a Learn claims it, and a successful Learn
// consumes it (a retry of a Learn that succeeded would train twice); a failed
// one gives it back. The newest `capacity` unused plans are kept; an older one
// has expired.
//
// Thread-safety: all methods may be called concurrently.
#ifndef LIB_AGGREGATION_SPLIT_PLANNER_H_
#define LIB_AGGREGATION_SPLIT_PLANNER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
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
  // The learners it stands for (its DataDemand.learners: 0 for a plain
  // learner), for merging its per-learner lists (info_merger.h).
  size_t learners = 0;
};

struct Plan {
  std::string id;
  std::vector<PlanSlice> slices;  // in learner order
  int64_t total = 0;
  // The membership generation it was made at (lib/service/membership.h).
  uint64_t generation = 0;
};

class SplitPlanner;

// A Learn's hold on its plan: while it lives no other Learn can use the plan.
// Consume() after the Learn succeeded; otherwise the plan is given back when
// the claim goes.
class PlanClaim {
 public:
  PlanClaim(PlanClaim&& other) noexcept;
  PlanClaim& operator=(PlanClaim&&) = delete;
  ~PlanClaim();

  const Plan& plan() const { return *plan_; }
  void Consume();

 private:
  friend class SplitPlanner;
  PlanClaim(SplitPlanner* planner, std::shared_ptr<const Plan> plan)
      : planner_(planner), plan_(std::move(plan)) {}
  SplitPlanner* planner_;  // null once consumed or moved from
  std::shared_ptr<const Plan> plan_;
};

class SplitPlanner {
 public:
  static constexpr size_t kDefaultCapacity = 64;
  explicit SplitPlanner(size_t capacity = kDefaultCapacity);

  // Records a plan; returns it with its new id.
  std::shared_ptr<const Plan> Record(std::vector<PlanSlice> slices,
                                     uint64_t generation = 0);

  // Claims the plan a Learn names (empty: the newest plan).
  // FAILED_PRECONDITION, saying what to do, when no plan was made yet, or
  // `plan_id` is unknown or expired, already used, or claimed by a Learn in
  // flight.
  absl::StatusOr<PlanClaim> Claim(std::string_view plan_id);

  // The most samples any unused plan demands (0 when none): more samples
  // cannot match any plan, so a Learn can be refused while it is scanned.
  int64_t LargestTotal() const;

 private:
  friend class PlanClaim;
  void Release(const Plan& plan, bool consumed);

  const std::string prefix_;  // tells this process's plans from another's
  const size_t capacity_;
  mutable Mutex mu_;
  uint64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  // Unused plans by id, and their ids oldest first (for expiry).
  std::map<std::string, std::shared_ptr<const Plan>> plans_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::string newest_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> claimed_ ABSL_GUARDED_BY(mu_);
  // Recently consumed ids, to tell "already used" from "unknown".
  std::deque<std::string> used_ ABSL_GUARDED_BY(mu_);
};

// INVALID_ARGUMENT, with both numbers and the split, unless `sample_count`
// equals the plan's total.
absl::Status CheckSampleCount(const Plan& plan, int64_t sample_count);

// "plan 'ID' demands 128 (learner0: 64, learner1: 64)", for messages.
std::string DescribePlan(const Plan& plan);

}  // namespace aggregator

#endif  // LIB_AGGREGATION_SPLIT_PLANNER_H_
