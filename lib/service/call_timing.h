// Where a relayed call's time goes, for a caller that asks: a call whose
// metadata carries kTimingKey (any value) gets back, in its trailing metadata
// under the same key, the moments the daemon saw, as CLOCK_MONOTONIC
// nanoseconds (std::chrono::steady_clock on Linux, so a caller on the same
// host can set them against its own; they are read from the service's Clock,
// which is the steady clock but in tests on a FakeClock):
//
//   arrived=T,learner0=T0-T1,learner1=T2-T3,...,merged=T,replied=T
//
// arrived: the handler ran (a LearnStream: its first message was read); one
// entry per learner call, from its start (a streamed slice: from when it was
// whole) to its answer, in learner order;
// merged: the answers were merged into the reply; replied: the reply was
// handed to gRPC. A call with no learner call (GetResource) has neither
// learner entries nor merged. Costs nothing when not asked for.
#ifndef LIB_SERVICE_CALL_TIMING_H_
#define LIB_SERVICE_CALL_TIMING_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/learners/fan_out.h"
#include "proto/learner_names.h"

namespace aggregator {

// Whether the caller of `context` asked for the timing.
inline bool TimingWanted(const grpc::ServerContextBase& context) {
  return context.client_metadata().find(kTimingKey) !=
         context.client_metadata().end();
}

inline int64_t MonotonicNanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

// Adds the timing to `context`'s trailing metadata; call it just before the
// reactor's Finish. `merged` is ignored when there are no calls; `clock`
// (the one the other moments were read from) says when it was replied.
template <typename Request, typename Reply>
void AddTiming(grpc::CallbackServerContext* context, Clock::TimePoint arrived,
               const LearnerCalls<Request, Reply>& calls,
               Clock::TimePoint merged, const Clock& clock) {
  std::string timing = absl::StrCat("arrived=", MonotonicNanos(arrived));
  for (const auto& call : calls) {
    absl::StrAppend(&timing, ",", call.learner.id, "=",
                    MonotonicNanos(call.started), "-",
                    MonotonicNanos(call.finished));
  }
  if (!calls.empty()) {
    absl::StrAppend(&timing, ",merged=", MonotonicNanos(merged));
  }
  absl::StrAppend(&timing, ",replied=", MonotonicNanos(clock.Now()));
  context->AddTrailingMetadata(kTimingKey, timing);
}

}  // namespace aggregator

#endif  // LIB_SERVICE_CALL_TIMING_H_
