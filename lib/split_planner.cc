#include "lib/split_planner.h"

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
  std::lock_guard<std::mutex> lock(mu_);
  plan->id = absl::StrCat(prefix_, "-", next_number_++);
  latest_ = plan;
  return plan;
}

absl::StatusOr<std::shared_ptr<const Plan>> SplitPlanner::Find(
    std::string_view plan_id) const {
  std::lock_guard<std::mutex> lock(mu_);
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

std::vector<aggregator::v1::LearnRequest> SplitBatch(
    const Plan& plan, aggregator::v1::LearnRequest* batch) {
  // Take ownership of every Sample object and hand each to its slice: pointers
  // move, payloads stay where the server parsed them.
  auto* samples = batch->mutable_samples();
  std::vector<aggregator::v1::Sample*> owned(samples->size());
  samples->ExtractSubrange(0, samples->size(), owned.data());
  std::vector<aggregator::v1::LearnRequest> requests(plan.slices.size());
  size_t next = 0;
  for (size_t i = 0; i < plan.slices.size(); ++i) {
    requests[i].set_plan_id(plan.slices[i].learner_plan_id);
    auto* slice = requests[i].mutable_samples();
    slice->Reserve(static_cast<int>(plan.slices[i].batch_size));
    for (int64_t n = 0; n < plan.slices[i].batch_size && next < owned.size();
         ++n) {
      slice->AddAllocated(owned[next++]);
    }
  }
  // Only reached when the count was not checked first: nothing may leak.
  for (; next < owned.size(); ++next) delete owned[next];
  return requests;
}

}  // namespace aggregator
