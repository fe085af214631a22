// FanOut: one RPC sent to several learners at once over gRPC's callback API,
// with a deadline per call, reporting once when every learner has answered or
// failed. No thread blocks while the calls are in flight.
//
// Each outgoing call propagates the incoming call's deadline and cancellation
// (so a coordinator that gives up cancels the whole tree), is further bounded
// by `timeout`, and carries `call_path` (lib/learners/call_path.h).
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
  // when its last piece was given to the call) to its answer.
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point finished;
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

// Calls every learner. `requests` holds one request for all learners or one per
// learner (in the same order). `done` runs once, on a gRPC thread, with every
// call's outcome; it may consume the calls.
template <typename Request, typename Reply>
void FanOut(grpc::CallbackServerContext* parent,
            std::chrono::milliseconds timeout, const std::string& call_path,
            std::vector<LearnerHandle> learners, std::vector<Request> requests,
            StartCall<Request, Reply> start,
            std::function<void(LearnerCalls<Request, Reply>&)> done) {
  struct State {
    LearnerCalls<Request, Reply> calls;
    std::vector<Request> requests;
    std::function<void(LearnerCalls<Request, Reply>&)> done;
    std::atomic<size_t> remaining{0};
  };
  auto state = std::make_shared<State>();
  state->requests = std::move(requests);
  state->done = std::move(done);
  state->calls.resize(learners.size());
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
    call.started = std::chrono::steady_clock::now();
    start(call.learner, call.context.get(), request, &call.reply,
          [state, &call](grpc::Status status) {
            call.finished = std::chrono::steady_clock::now();
            call.status = std::move(status);
            if (state->remaining.fetch_sub(1) == 1) state->done(state->calls);
          });
  }
}

}  // namespace aggregator

#endif  // LIB_LEARNERS_FAN_OUT_H_
