// LearnerSource: one place learners are discovered (an entry of
// `learner_sources:` in aggregator.yaml), asked again and again by the
// discovery loop (lib/discovery/discovery_loop.h), each source on a thread of
// its own.
//
// Thread-safety: a source is used by one thread at a time; `limits.stop` may
// be set from another.
#ifndef LIB_DISCOVERY_LEARNER_SOURCE_H_
#define LIB_DISCOVERY_LEARNER_SOURCE_H_

#include <atomic>
#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/host_port.h"

namespace aggregator {

// How long one request to a source may take: it ends by `deadline`, or soon
// after `*stop` turns true (CANCELLED), whatever the other side does.
struct RequestLimits {
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* stop = nullptr;

  bool stopped() const { return stop != nullptr && stop->load(); }
};

class LearnerSource {
 public:
  virtual ~LearnerSource() = default;

  // The learners' addresses now. An error says what failed and where, e.g.
  // "DNS server 127.0.0.1:5353: Timeout while contacting DNS servers".
  virtual absl::StatusOr<std::vector<HostPort>> Fetch(
      const RequestLimits& limits) = 0;

  // Reports learners that stay failed (so that whoever runs them replaces
  // them); called for the sources whose config has report_failed_after.
  virtual absl::Status ReportFailed(const std::vector<HostPort>& learners,
                                    const RequestLimits& limits) {
    (void)learners;
    (void)limits;
    return absl::UnimplementedError("this source takes no failure reports");
  }
};

}  // namespace aggregator

#endif  // LIB_DISCOVERY_LEARNER_SOURCE_H_
