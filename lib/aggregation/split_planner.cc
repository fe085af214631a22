#include "lib/aggregation/split_planner.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace aggregator {
namespace {

// How many consumed plan ids are remembered for a clear "already used".
constexpr size_t kUsedRemembered = 1024;

std::string RandomPrefix() {
  std::random_device device;
  return absl::StrFormat("%08x", device());
}

}  // namespace

PlanClaim::PlanClaim(PlanClaim&& other) noexcept
    : planner_(std::exchange(other.planner_, nullptr)),
      plan_(std::move(other.plan_)) {}

PlanClaim::~PlanClaim() {
  if (planner_ != nullptr) planner_->Release(*plan_, /*consumed=*/false);
}

void PlanClaim::Consume() {
  if (planner_ != nullptr) planner_->Release(*plan_, /*consumed=*/true);
  planner_ = nullptr;
}

SplitPlanner::SplitPlanner(size_t capacity)
    : prefix_(RandomPrefix()), capacity_(std::max<size_t>(1, capacity)) {}

std::shared_ptr<const Plan> SplitPlanner::Record(std::vector<PlanSlice> slices,
                                                 uint64_t generation) {
  auto plan = std::make_shared<Plan>();
  plan->generation = generation;
  for (const PlanSlice& slice : slices) plan->total += slice.batch_size;
  plan->slices = std::move(slices);
  MutexLock lock(&mu_);
  plan->id = absl::StrCat(prefix_, "-", next_number_++);
  plans_.emplace(plan->id, plan);
  order_.push_back(plan->id);
  newest_ = plan->id;
  // Expire the oldest unclaimed plans beyond capacity.
  for (auto it = order_.begin();
       plans_.size() > capacity_ && it != order_.end();) {
    if (claimed_.count(*it) != 0) {
      ++it;
      continue;
    }
    plans_.erase(*it);
    it = order_.erase(it);
  }
  return plan;
}

absl::StatusOr<PlanClaim> SplitPlanner::Claim(std::string_view plan_id) {
  MutexLock lock(&mu_);
  // Without an id: the newest plan (an older one would be a stale split).
  const std::string id = plan_id.empty() ? newest_ : std::string(plan_id);
  if (id.empty()) {
    return absl::FailedPreconditionError(
        "Learn before any GetData: there is no split plan yet; call GetData "
        "first");
  }
  auto found = plans_.find(id);
  if (found == plans_.end()) {
    const bool used = std::find(used_.begin(), used_.end(), id) != used_.end();
    return absl::FailedPreconditionError(
        used ? absl::StrCat("plan '", id,
                            "' already used: a plan trains once; call GetData "
                            "again")
             : absl::StrCat("plan '", id, "' is unknown or expired (only the ",
                            capacity_,
                            " newest plans are kept); call GetData again"));
  }
  if (!claimed_.insert(id).second) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan '", id, "' is in use by another Learn; call GetData again"));
  }
  return PlanClaim(this, found->second);
}

void SplitPlanner::Release(const Plan& plan, bool consumed) {
  MutexLock lock(&mu_);
  claimed_.erase(plan.id);
  if (!consumed) return;
  plans_.erase(plan.id);
  auto in_order = std::find(order_.begin(), order_.end(), plan.id);
  if (in_order != order_.end()) order_.erase(in_order);
  used_.push_back(plan.id);
  if (used_.size() > kUsedRemembered) used_.pop_front();
}

int64_t SplitPlanner::LargestTotal() const {
  MutexLock lock(&mu_);
  int64_t largest = 0;
  for (const auto& [id, plan] : plans_)
    largest = std::max(largest, plan->total);
  return largest;
}

absl::Status CheckSampleCount(const Plan& plan, int64_t sample_count) {
  if (sample_count == plan.total) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Learn got ", sample_count, " samples but ", DescribePlan(plan)));
}

std::string DescribePlan(const Plan& plan) {
  return absl::StrCat(
      "plan '", plan.id, "' demands ", plan.total, " (",
      absl::StrJoin(plan.slices, ", ",
                    [](std::string* out, const PlanSlice& slice) {
                      absl::StrAppend(out, slice.learner_id, ": ",
                                      slice.batch_size);
                    }),
      ")");
}

}  // namespace aggregator
