// InflightBudget: admission control by bytes. Each Learn holds a lease on the
// bytes of its batch while it is in flight; a Learn whose batch would take the
// total past the limit is refused at once with RESOURCE_EXHAUSTED, naming the
// figures, instead of pushing the daemon towards the OOM killer.
//
// Thread-safety: all methods may be called from any thread; a Lease may be
// released on any thread, and must not outlive its budget.
#ifndef LIB_SERVICE_INFLIGHT_BUDGET_H_
#define LIB_SERVICE_INFLIGHT_BUDGET_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"

namespace aggregator {

class InflightBudget {
 public:
  // Gives its bytes back when destroyed.
  class Lease {
   public:
    Lease(InflightBudget* budget, int64_t bytes)
        : budget_(budget), bytes_(bytes) {}
    ~Lease() { budget_->Release(bytes_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    // `bytes` more on this lease, on Acquire's terms (a stream's messages
    // grow one lease: no bookkeeping per message). Not thread-safe: one
    // holder extends it.
    absl::Status Extend(const char* what, int64_t bytes, int64_t limit);
    int64_t bytes() const { return bytes_; }

   private:
    InflightBudget* const budget_;
    int64_t bytes_;
  };

  // `bytes` more, if the total stays within `limit` (read at each call, so a
  // reload's new limit applies to the next request). `what` names the request
  // in the error ("Learn").
  absl::StatusOr<std::unique_ptr<Lease>> Acquire(const char* what,
                                                 int64_t bytes, int64_t limit);
  int64_t in_flight() const;

 private:
  // Adds `bytes` to the total if it stays within `limit`.
  absl::Status Reserve(const char* what, int64_t bytes, int64_t limit);
  void Release(int64_t bytes);

  mutable Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aggregator

#endif  // LIB_SERVICE_INFLIGHT_BUDGET_H_
