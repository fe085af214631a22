// Loop protection for trees of aggregators. An aggregator's learner may be
// another aggregator; a learner address that leads back to the daemon itself,
// or an A -> B -> A cycle, would otherwise relay each call around the loop
// until memory ran out. So every call an aggregator makes to a learner (the
// pool's probe included) carries, in the metadata kCallPathKey, the ids of the
// aggregators it has passed through, and every reply carries the answering
// aggregator's id (kAggregatorIdKey):
// - a call that arrives at an aggregator already on its path is refused at
//   once with FAILED_PRECONDITION naming the cycle;
// - a path already kMaxTreeDepth long is refused the same way;
// - a probe answered by this aggregator's own id marks that learner failed
//   ("address is this aggregator").
#ifndef LIB_LEARNERS_CALL_PATH_H_
#define LIB_LEARNERS_CALL_PATH_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <string>
#include <vector>

#include "proto/learner_names.h"

namespace aggregator {

// Aggregators a call may pass through, the coordinator's own excluded.
inline constexpr size_t kMaxTreeDepth = 16;

// A fresh id for this aggregator: "<hostname>/<8 random hex digits>" (the
// hostname for people reading messages, the digits so that two daemons on one
// host differ).
std::string NewAggregatorId();

// The ids of the aggregators an incoming call has passed through, oldest first
// (empty: straight from a coordinator).
std::vector<std::string> IncomingPath(const grpc::ServerContextBase& context);

// OK, or FAILED_PRECONDITION when `self` is already on `path` (the cycle
// named) or `path` is kMaxTreeDepth long.
grpc::Status CheckPath(const std::vector<std::string>& path,
                       const std::string& self, const char* method);

// The kCallPathKey value of calls `self` makes for a call that came by `path`.
std::string OutgoingPath(const std::vector<std::string>& path,
                         const std::string& self);

// The aggregator id a finished client call's reply carried ("" if none).
std::string AnsweringAggregator(const grpc::ClientContext& context);

}  // namespace aggregator

#endif  // LIB_LEARNERS_CALL_PATH_H_
