#include "lib/service/inflight_budget.h"

#include "absl/strings/str_cat.h"

namespace aggregator {

absl::StatusOr<std::unique_ptr<InflightBudget::Lease>> InflightBudget::Acquire(
    const char* what, int64_t bytes, int64_t limit) {
  if (absl::Status reserved = Reserve(what, bytes, limit); !reserved.ok()) {
    return reserved;
  }
  return std::make_unique<Lease>(this, bytes);
}

absl::Status InflightBudget::Lease::Extend(const char* what, int64_t bytes,
                                           int64_t limit) {
  if (absl::Status reserved = budget_->Reserve(what, bytes, limit);
      !reserved.ok()) {
    return reserved;
  }
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status InflightBudget::Reserve(const char* what, int64_t bytes,
                                     int64_t limit) {
  MutexLock lock(&mu_);
  if (bytes > limit - in_flight_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": a batch of ", bytes,
        " bytes would exceed max_inflight_bytes (", limit, " bytes; ",
        in_flight_, " in flight now): retry later, or send smaller batches"));
  }
  in_flight_ += bytes;
  return absl::OkStatus();
}

int64_t InflightBudget::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

void InflightBudget::Release(int64_t bytes) {
  MutexLock lock(&mu_);
  in_flight_ -= bytes;
}

}  // namespace aggregator
