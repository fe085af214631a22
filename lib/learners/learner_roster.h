// LearnerRoster: what the Learner service (lib/service/learner_service.h)
// needs of the learners it calls: the ready ones, one of them again at the
// epoch a plan was made at, where each call went, and what status shows.
// LearnerPool (lib/learners/learner_pool.h) is the one the daemon uses; a
// test may give the service fake learners on in-process channels instead
// (tests/testing/in_process_learners.h), so the service runs without a
// network.
//
// Named a roster, not a source: a LearnerSource is a place learners are
// discovered (lib/discovery/learner_source.h).
//
// Thread-safety: implementations allow every method from any thread.
#ifndef LIB_LEARNERS_LEARNER_ROSTER_H_
#define LIB_LEARNERS_LEARNER_ROSTER_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/host_port.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {

// Per-learner call statistics, shared by the roster and the handles.
struct LearnerCounters {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> failures{0};
};

// Where a learner is in its life (see lib/learners/learner_pool.h).
enum class LearnerState {
  kConnecting,
  kReady,
  // Not reachable within connect.timeout; still retried in the background.
  kFailed,
  // Dropped by a reload; waits for its in-flight calls to finish.
  kRemoved,
};

// "connecting", "ready", "failed", "removed".
const char* LearnerStateName(LearnerState state);

// One learner as status and metrics see it.
struct LearnerSnapshot {
  std::string id;
  HostPort address;
  LearnerState state = LearnerState::kConnecting;
  std::string last_error;
  int64_t calls = 0;
  int64_t failures = 0;
};

// A ready learner as a call sees it. Valid (and its channel open) while held.
struct LearnerHandle {
  std::string id;
  HostPort address;
  // Bumped each time the learner becomes ready: a plan made at one epoch is not
  // valid at another.
  uint64_t epoch = 0;
  std::shared_ptr<aggregator::v1::Learner::Stub> stub;
  // The same channel for calls relayed as raw bytes (Learn).
  std::shared_ptr<grpc::GenericStub> generic;
  std::shared_ptr<LearnerCounters> counters;
  // Its answer to GetResource when it connected (a learner's resources do not
  // change while it runs), so GetResource needs no round trip.
  aggregator::v1::Resource resource;
  // "learner0 (127.0.0.1:22300)", for messages.
  std::string Name() const { return id + " (" + address.ToString() + ")"; }
};

class LearnerRoster {
 public:
  virtual ~LearnerRoster() = default;

  // The ready learners, in configured order.
  virtual std::vector<LearnerHandle> Ready() const = 0;
  // The learner `id` if it is still ready at `epoch`; otherwise
  // FAILED_PRECONDITION saying what happened to it, its Name() first.
  virtual absl::StatusOr<LearnerHandle> Current(const std::string& id,
                                                uint64_t epoch) const = 0;
  // Records a call's outcome against a learner (counters and last error).
  virtual void RecordCall(const LearnerHandle& learner,
                          const grpc::Status& status) = 0;
  // One entry per learner, in configured order.
  virtual std::vector<LearnerSnapshot> Status() const = 0;
  // "learner1 (127.0.0.1:22301) connecting: connection refused; ..." for every
  // learner that is not ready, for error messages.
  virtual std::string DescribeNotReady() const = 0;
  // How many learners there are, ready or not.
  virtual size_t size() const = 0;
};

}  // namespace aggregator

#endif  // LIB_LEARNERS_LEARNER_ROSTER_H_
