// A learner's channel whose last reference is a finished call's LearnerHandle,
// dropped in that call's own callback: the pool has let the learner go, and no
// server is left in the process. Debian's gRPC 1.51 runs every callback-API
// completion on the threads of one shared completion queue and tears that
// queue down when its last user (a channel or server) goes; torn down from one
// of its own threads, it freed the queue under that thread, which then freed
// it again (lib/learners/callback_queue.h). Without LearnerPool keeping the
// queue: ASan "attempting double-free" and TSan "Mutex corrupt" in 3 of 3
// runs, gRPC's "prior > 0" abort in 1 of 5 plain runs.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>

#include "lib/learners/learner_pool.h"
#include "tests/testing/monitor.h"
#include "tests/testing/test_cluster.h"

namespace aggregator {
namespace {

using testing::Endpoint;
using testing::Monitor;
using testing::StartLearner;

// One GetResource call that owns its handle, as a fan-out call does, and is
// deleted in its own callback.
struct Call {
  LearnerHandle learner;
  grpc::ClientContext context;
  v1::GetResourceRequest request;
  v1::Resource reply;
};

// Starts `call` and deletes it when done; `done` is set after the delete.
void StartAndDropInCallback(Call* call, Monitor& monitor, bool& done) {
  call->context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(10));
  v1::Learner::Stub* stub = call->learner.stub.get();
  stub->async()->GetResource(&call->context, &call->request, &call->reply,
                             [call, &monitor, &done](grpc::Status) {
                               delete call;
                               monitor.Change([&] { done = true; });
                             });
}

// A handle of a ready learner that only it holds: the pool has stopped.
LearnerHandle LastHandle(const std::string& address) {
  LearnerPool pool(testing::FastConfig({}, 1).connect, int64_t{1} << 20,
                   LearnerPoolHooks{});
  pool.SetLearners({Endpoint("l0", address)});
  REQUIRE(pool.WaitForReady(
      1, std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  std::vector<LearnerHandle> ready = pool.Ready();
  REQUIRE(ready.size() == 1);
  pool.Stop();
  return ready[0];
}

TEST_CASE(
    "A learner's last handle dropped in its call's callback leaves gRPC's "
    "callback threads working for the next call") {
  for (int round = 0; round < 5; ++round) {
    auto learner = StartLearner();
    auto* call = new Call{LastHandle(learner->address)};
    // No server left: the call's channel is the callback queue's only user.
    learner.reset();
    Monitor monitor;
    bool done = false;
    StartAndDropInCallback(call, monitor, done);
    REQUIRE(monitor.Await([&] { return done; }));
  }
}

}  // namespace
}  // namespace aggregator
