#include "lib/server/reloader.h"

#include <utility>

#include "lib/base/clock.h"

namespace aggregator {

Reloader::Reloader(Reload reload) : reload_(std::move(reload)) {
  thread_ = std::thread([this] { Run(); });
}

Reloader::~Reloader() { Stop(); }

void Reloader::RequestAsync() {
  MutexLock lock(&mu_);
  if (stopping_) return;
  if (waiting_ == nullptr) waiting_ = std::make_shared<Batch>();
}

absl::StatusOr<ReloadResult> Reloader::Request(
    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("aggregatord is shutting down: no reload");
  }
  if (waiting_ == nullptr) waiting_ = std::make_shared<Batch>();
  std::shared_ptr<Batch> batch = waiting_;
  ++batch->requests;
  auto done = [&batch, this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return batch->result.has_value();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), TimeUntil(deadline))) {
    return absl::DeadlineExceededError(
        "the reload did not finish before the call's deadline; it goes on, "
        "and its result will be logged");
  }
  return *batch->result;
}

int Reloader::QueuedRequests() {
  MutexLock lock(&mu_);
  return waiting_ == nullptr ? 0 : waiting_->requests;
}

void Reloader::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  thread_.join();
}

void Reloader::Run() {
  for (;;) {
    std::shared_ptr<Batch> batch;
    {
      MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return waiting_ != nullptr || stopping_;
      };
      mu_.Await(absl::Condition(&work));
      if (stopping_) {
        if (waiting_ != nullptr) {
          waiting_->result =
              absl::UnavailableError("aggregatord is shutting down: no reload");
        }
        waiting_ = nullptr;
        return;
      }
      batch = std::exchange(waiting_, nullptr);  // later requests: next batch
    }
    absl::StatusOr<ReloadResult> result = reload_();
    MutexLock lock(&mu_);
    batch->result = std::move(result);
  }
}

}  // namespace aggregator
