// FanOut: one RPC sent to several learners at once over gRPC's callback API,
// with a deadline per call, reporting once when every learner has answered or
// failed. No thread blocks while the calls are in flight.
//
// Each outgoing call propagates the incoming call's deadline and cancellation
// (so a coordinator that gives up cancels the whole tree), is further bounded
// by `timeout`, and carries `call_path` (lib/learners/call_path.h). Each
// call's time (LearnerCall::started, finished) is read from an injected Clock;
// its deadline is gRPC's, so real.
#ifndef LIB_LEARNERS_FAN_OUT_H_
#define LIB_LEARNERS_FAN_OUT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/clock.h"
#include "lib/learners/call_path.h"
#include "lib/learners/learner_pool.h"

namespace aggregator {

template <typename Request, typename Reply>
struct LearnerCall {
  LearnerHandle learner;
  Reply reply;
  grpc::Status status;
  std::unique_ptr<grpc::ClientContext> context;
  // From when the learner could have its whole request (a streamed slice:
  // when its last piece was given to the call) to its answer, on the clock
  // of whoever made the call (FanOut's, SliceSender's).
  Clock::TimePoint started;
  Clock::TimePoint finished;
};

template <typename Request, typename Reply>
using LearnerCalls = std::vector<LearnerCall<Request, Reply>>;

// Starts one call to a learner with gRPC's callback API.
template <typename Request, typename Reply>
using StartCall = void (*)(const LearnerHandle& learner,
                           grpc::ClientContext* context, const Request* request,
                           Reply* reply,
                           std::function<void(grpc::Status)> done);

// A context for a call to a learner on behalf of `parent` (null: none): it
// propagates the parent's deadline and cancellation, ends by `deadline` at the
// latest, and carries `call_path` (when not empty).
inline std::unique_ptr<grpc::ClientContext> NewLearnerContext(
    grpc::CallbackServerContext* parent,
    std::chrono::system_clock::time_point deadline,
    const std::string& call_path) {
  auto context = parent != nullptr
                     ? grpc::ClientContext::FromCallbackServerContext(*parent)
                     : std::make_unique<grpc::ClientContext>();
  context->set_deadline(deadline);
  if (!call_path.empty()) context->AddMetadata(kCallPathKey, call_path);
  return context;
}

// Told when every call of a fan-out of two or more learners has answered but
// one: `silent` is that one's index; `cancel` cancels its call (its status
// becomes CANCELLED), and may be called from any thread until `done` has
// returned, or later if `done` left the silent call's context in place.
using OneLeft =
    std::function<void(size_t silent, std::function<void()> cancel)>;

// Calls every learner. `requests` holds one request for all learners or one per
// learner (in the same order). `done` runs once, on a gRPC thread, with every
// call's outcome; it may consume the calls. `one_left` (optional) runs on a
// gRPC thread before `done`, if a call is still out when all the others have
// answered. The calls are timed on `clock` (null: SteadyClock()), which must
// outlive them.
template <typename Request, typename Reply>
void FanOut(grpc::CallbackServerContext* parent,
            std::chrono::milliseconds timeout, const std::string& call_path,
            std::vector<LearnerHandle> learners, std::vector<Request> requests,
            StartCall<Request, Reply> start,
            std::function<void(LearnerCalls<Request, Reply>&)> done,
            OneLeft one_left = nullptr, Clock* clock = nullptr) {
  struct State {
    Clock* clock;
    LearnerCalls<Request, Reply> calls;
    std::vector<Request> requests;
    std::function<void(LearnerCalls<Request, Reply>&)> done;
    OneLeft one_left;
    std::unique_ptr<std::atomic<bool>[]> answered;
    std::atomic<size_t> remaining{0};
  };
  auto state = std::make_shared<State>();
  state->clock = &ClockOrSteady(clock);
  state->requests = std::move(requests);
  state->done = std::move(done);
  state->one_left = std::move(one_left);
  state->calls.resize(learners.size());
  state->answered.reset(new std::atomic<bool>[learners.size()]);
  for (size_t i = 0; i < learners.size(); ++i) state->answered[i] = false;
  state->remaining = learners.size();
  if (learners.empty()) {
    state->done(state->calls);
    return;
  }
  const auto deadline = std::chrono::system_clock::now() + timeout;
  for (size_t i = 0; i < learners.size(); ++i) {
    auto& call = state->calls[i];
    call.learner = std::move(learners[i]);
    call.context = NewLearnerContext(parent, deadline, call_path);
  }
  // Start only after every call is set up: the first may finish at once.
  for (size_t i = 0; i < state->calls.size(); ++i) {
    auto& call = state->calls[i];
    const Request* request =
        &state->requests[state->requests.size() == 1 ? 0 : i];
    call.started = state->clock->Now();
    start(call.learner, call.context.get(), request, &call.reply,
          [state, &call, i](grpc::Status status) {
            call.finished = state->clock->Now();
            call.status = std::move(status);
            state->answered[i] = true;
            const size_t before = state->remaining.fetch_sub(1);
            if (before == 1) {
              state->done(state->calls);
            } else if (before == 2 && state->one_left) {
              // The last may be answering now too: then it is not silent.
              for (size_t j = 0; j < state->calls.size(); ++j) {
                if (state->answered[j]) continue;
                state->one_left(
                    j, [state, j] { state->calls[j].context->TryCancel(); });
                break;
              }
            }
          });
  }
}

}  // namespace aggregator

#endif  // LIB_LEARNERS_FAN_OUT_H_
