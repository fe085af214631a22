// Fake learners in this process, for tests of the serving core without a
// network: each is a Learner service on a grpc::Server with no listening port,
// reached through the server's in-process channel. A test scripts each method
// (answer, fail with a status, hold), and a FakeLearnerRoster hands their
// handles to a LearnerService (lib/learners/learner_roster.h) the way the pool
// would, with readiness and epochs the test sets.
//
// LearnerPool itself watches its channels' connectivity, which gRPC allows
// only on a client channel, not on an in-process one ("called on something
// that is not a client channel", an abort in 1.51): for the pool, a fake
// learner can listen on a unix socket too (InProcessLearner's unix_socket): a
// client channel, and still no port.
//
// Thread-safety: all methods may be called from any thread.
#ifndef TESTS_TESTING_IN_PROCESS_LEARNERS_H_
#define TESTS_TESTING_IN_PROCESS_LEARNERS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/host_port.h"
#include "lib/base/mutex.h"
#include "lib/learners/learner_roster.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator::testing {

// A scriptable learner. By default it answers every call at once:
// GetResource with its gpus, GetData with its batch_size, Learn with the info
// {received: n, priority_info: {replay_unique_id: [one per sample]}}.
// Methods are named as in the proto ("GetData").
class FakeLearner final : public aggregator::v1::Learner::CallbackService {
 public:
  struct Options {
    int gpus = 1;
    int64_t batch_size = 32;  // what each GetData demands
  };
  explicit FakeLearner(Options options);
  // Stop()s.
  ~FakeLearner() override;

  // From now on calls of `method` fail with `status`.
  void Fail(const std::string& method, grpc::Status status);
  // From now on calls of `method` are held: each ends when the test releases
  // it (Answer), or with CANCELLED when its caller cancels it or its
  // deadline passes. No timer of the fake's own ends one.
  void Hold(const std::string& method);
  // From now on calls of `method` are answered, and those held are now.
  void Answer(const std::string& method);
  // Ends every held call with CANCELLED and holds no more (before the server
  // shuts down, which waits for its calls).
  void Stop();

  // Calls of `method` received (counted on arrival), held now, and ended by
  // their caller's cancellation (or deadline) while held.
  int64_t calls(const std::string& method) const;
  int64_t held(const std::string& method) const;
  int64_t cancelled(const std::string& method) const;
  // Waits (real `timeout`) until calls / held / cancelled of `method` reach
  // `count`; false if it passed first.
  bool AwaitCalls(const std::string& method, int64_t count,
                  std::chrono::milliseconds timeout) const;
  bool AwaitHeld(const std::string& method, int64_t count,
                 std::chrono::milliseconds timeout) const;
  bool AwaitCancelled(const std::string& method, int64_t count,
                      std::chrono::milliseconds timeout) const;

  // The replay_unique_id of each sample of each Learn answered, in order.
  std::vector<std::vector<std::string>> learned() const;
  bool task_open() const;
  const Options& options() const { return options_; }

  grpc::ServerUnaryReactor* GetResource(
      grpc::CallbackServerContext* context,
      const aggregator::v1::GetResourceRequest* request,
      aggregator::v1::Resource* reply) override;
  grpc::ServerUnaryReactor* StartTask(
      grpc::CallbackServerContext* context,
      const aggregator::v1::StartTaskRequest* request,
      aggregator::v1::StartTaskReply* reply) override;
  grpc::ServerUnaryReactor* GetData(
      grpc::CallbackServerContext* context,
      const aggregator::v1::GetDataRequest* request,
      aggregator::v1::DataDemand* reply) override;
  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const aggregator::v1::LearnRequest* request,
                                  aggregator::v1::LearnReply* reply) override;
  grpc::ServerUnaryReactor* CloseTask(
      grpc::CallbackServerContext* context,
      const aggregator::v1::CloseTaskRequest* request,
      aggregator::v1::CloseTaskReply* reply) override;

 private:
  class Call;
  struct Method {
    enum Script { kAnswer, kFail, kHold } script = kAnswer;
    grpc::Status failure;
    int64_t calls = 0;
    int64_t cancelled = 0;
    std::set<Call*> held;
  };

  // A call of `method` arrives; `answer` fills its reply (run now, or when it
  // is released).
  grpc::ServerUnaryReactor* Arrive(const char* method,
                                   std::function<grpc::Status()> answer);
  // The held `call` ends (released or cancelled): false if it already had.
  bool TakeHeld(Call* call, bool cancelled) ABSL_LOCKS_EXCLUDED(mu_);
  bool Await(const std::string& method, int64_t count, int64_t Method::*counter,
             std::chrono::milliseconds timeout) const;

  const Options options_;
  mutable Mutex mu_;
  std::map<std::string, Method> methods_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool task_open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::vector<std::string>> learned_ ABSL_GUARDED_BY(mu_);
};

// A FakeLearner served with no listening port, or on a unix socket too.
class InProcessLearner {
 public:
  // `unix_socket`: a path to serve it on too (for LearnerPool, see the file
  // comment); empty: none.
  explicit InProcessLearner(FakeLearner::Options options = {},
                            const std::string& unix_socket = "");
  // Shutdown().
  ~InProcessLearner();
  InProcessLearner(const InProcessLearner&) = delete;
  InProcessLearner& operator=(const InProcessLearner&) = delete;

  FakeLearner& learner() { return learner_; }
  // A new channel to it in this process (no message size limit).
  std::shared_ptr<grpc::Channel> Channel();
  // Stops serving: its held calls are cancelled, its connections closed.
  void Shutdown();

 private:
  FakeLearner learner_;
  std::unique_ptr<grpc::Server> server_;
};

// A LearnerService's learners (lib/learners/learner_roster.h) as the test
// says: in-process fake learners, each ready or not when the test sets it.
// Handles carry a stub and a generic stub on the learner's in-process channel
// and the resources its GetResource would report; their address is
// "unix:/in-process/<id>", which nothing listens on.
class FakeLearnerRoster final : public LearnerRoster {
 public:
  FakeLearnerRoster() = default;
  ~FakeLearnerRoster() override;

  // Adds the learner `id` (last in order), connecting, not ready yet.
  FakeLearner& Add(const std::string& id, FakeLearner::Options options = {});
  // Makes `id` ready at a new epoch, as a learner that (re)connected.
  void SetReady(const std::string& id);
  // `id` is no longer ready: `state` (connecting or failed) because of `why`.
  void SetNotReady(const std::string& id, LearnerState state,
                   const std::string& why);
  // Drops `id` from the roster (its server keeps serving calls in flight).
  void Remove(const std::string& id);
  FakeLearner& learner(const std::string& id);
  // Stops every fake learner's held calls (before a service over them goes).
  void StopAll();

  // LearnerRoster:
  std::vector<LearnerHandle> Ready() const override;
  absl::StatusOr<LearnerHandle> Current(const std::string& id,
                                        uint64_t epoch) const override;
  void RecordCall(const LearnerHandle& learner,
                  const grpc::Status& status) override;
  std::vector<LearnerSnapshot> Status() const override;
  std::string DescribeNotReady() const override;
  size_t size() const override;

 private:
  struct Entry {
    std::string id;
    std::unique_ptr<InProcessLearner> server;
    LearnerState state = LearnerState::kConnecting;
    std::string last_error;
    LearnerHandle handle;  // while ready
    std::shared_ptr<LearnerCounters> counters =
        std::make_shared<LearnerCounters>();
  };
  Entry* Find(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Entry* Find(const std::string& id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Learners removed: served until the roster goes (handles may hold them).
  std::vector<std::unique_ptr<Entry>> removed_ ABSL_GUARDED_BY(mu_);
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
};

// Serves `service` (a LearnerService, say) with no listening port; call it
// through server->InProcessChannel. No message size limit.
std::unique_ptr<grpc::Server> ServeInProcess(grpc::Service* service);

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_IN_PROCESS_LEARNERS_H_
