// The Learner API's names on the wire besides its messages: the full method
// names a generic (byte-level) call uses, and the metadata keys an aggregator
// reads and writes (described in learner.proto). One definition for the
// daemon and the tools.
#ifndef PROTO_LEARNER_NAMES_H_
#define PROTO_LEARNER_NAMES_H_

namespace aggregator {

inline constexpr char kLearnMethod[] = "/aggregator.v1.Learner/Learn";
inline constexpr char kLearnStreamMethod[] =
    "/aggregator.v1.Learner/LearnStream";

// The aggregators a call has passed through (lib/learners/call_path.h).
inline constexpr char kCallPathKey[] = "x-aggregator-path";
// The answering aggregator's id, on every reply it sends.
inline constexpr char kAggregatorIdKey[] = "x-aggregator-id";
// Asks for the daemon's timestamps of a call (lib/service/call_timing.h).
inline constexpr char kTimingKey[] = "x-aggregator-timing";

}  // namespace aggregator

#endif  // PROTO_LEARNER_NAMES_H_
