#include "lib/aggregation/split_planner.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace aggregator {
namespace {

std::string RandomPrefix() {
  std::random_device device;
  return absl::StrFormat("%08x", device());
}

}  // namespace

SplitPlanner::SplitPlanner() : prefix_(RandomPrefix()) {}

std::shared_ptr<const Plan> SplitPlanner::Record(
    std::vector<PlanSlice> slices) {
  auto plan = std::make_shared<Plan>();
  for (const PlanSlice& slice : slices) plan->total += slice.batch_size;
  plan->slices = std::move(slices);
  MutexLock lock(&mu_);
  plan->id = absl::StrCat(prefix_, "-", next_number_++);
  latest_ = plan;
  return plan;
}

absl::StatusOr<std::shared_ptr<const Plan>> SplitPlanner::Find(
    std::string_view plan_id) const {
  MutexLock lock(&mu_);
  if (latest_ == nullptr) {
    return absl::FailedPreconditionError(
        "Learn before any GetData: there is no split plan yet; call GetData "
        "first");
  }
  if (!plan_id.empty() && plan_id != latest_->id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan '", std::string(plan_id), "' is not the latest plan ('",
        latest_->id, "'); call GetData again"));
  }
  return latest_;
}

absl::Status CheckSampleCount(const Plan& plan, int64_t sample_count) {
  if (sample_count == plan.total) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Learn got ", sample_count, " samples but plan '", plan.id,
                   "' demands ", plan.total, " (",
                   absl::StrJoin(plan.slices, ", ",
                                 [](std::string* out, const PlanSlice& slice) {
                                   absl::StrAppend(out, slice.learner_id, ": ",
                                                   slice.batch_size);
                                 }),
                   ")"));
}

}  // namespace aggregator
