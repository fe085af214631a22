// ExampleLearner: a real Learner service for demos, tests and benchmarks, with
// fault injection. Its Learn info is
//   {learner_step, learner_done: false, task_id, buffer_id, received: n,
//    priority_info: {priority: [one number per sample], replay_unique_id:
//    [...]}}
// where priority is a deterministic function of the sample's data (its length
// and first 64 bytes, so large payloads cost nothing to score) and
// replay_unique_id lists each sample's meta.replay_unique_id in order (null
// where missing).
//
// Thread-safety: RPCs may run concurrently; state is guarded by mu_.
#ifndef TESTS_TESTING_EXAMPLE_LEARNER_SERVICE_H_
#define TESTS_TESTING_EXAMPLE_LEARNER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {

struct ExampleLearnerOptions {
  int64_t batch_size = 32;  // demanded by every GetData
  int gpus = 1;
  // RPCs wait this long before answering (cut short by Stop()): the one named
  // by delay_on, or every RPC when it is empty.
  std::chrono::milliseconds delay{0};
  std::string delay_on;
  // An RPC name (GetResource, StartTask, GetData, Learn, CloseTask) that always
  // fails with INTERNAL, or empty.
  std::string fail_on;
  // After answering this many RPCs (GetResource, which pools ask as they
  // connect and every resource_refresh, not counted) the process exits at once
  // (status 70) when the next one arrives, as a crashed learner would;
  // negative: never.
  int64_t crash_after = -1;
  // Learn answers without priority_info.priority, as a learner that forgot
  // it would (to test that merged per-sample lists stay aligned).
  bool omit_priorities = false;
  // A file read at the start of every RPC, so a test or the soak can change
  // faults while the learner runs (write it elsewhere and rename it into
  // place). While it exists, its whitespace-separated settings replace delay,
  // delay_on and fail_on ("delay_ms=N", "delay_on=METHOD", "fail_on=METHOD";
  // an empty file: no fault); while it does not, the options above apply. A
  // file that cannot be parsed fails the RPC with INTERNAL. Empty path: none.
  std::string fault_file;
};

// The faults a fault file (ExampleLearnerOptions::fault_file) asks for.
struct InjectedFaults {
  std::chrono::milliseconds delay{0};
  std::string delay_on;  // empty: every RPC
  std::string fail_on;   // empty: none
};
// Parses a fault file's text; unknown or malformed settings are errors.
absl::StatusOr<InjectedFaults> ParseFaults(const std::string& text);

// The score the example learner gives a sample's data.
double SamplePriority(const std::string& data);

class ExampleLearner final : public aggregator::v1::Learner::Service {
 public:
  explicit ExampleLearner(ExampleLearnerOptions options);

  grpc::Status GetResource(grpc::ServerContext* context,
                           const aggregator::v1::GetResourceRequest* request,
                           aggregator::v1::Resource* reply) override;
  grpc::Status StartTask(grpc::ServerContext* context,
                         const aggregator::v1::StartTaskRequest* request,
                         aggregator::v1::StartTaskReply* reply) override;
  grpc::Status GetData(grpc::ServerContext* context,
                       const aggregator::v1::GetDataRequest* request,
                       aggregator::v1::DataDemand* reply) override;
  grpc::Status Learn(grpc::ServerContext* context,
                     const aggregator::v1::LearnRequest* request,
                     aggregator::v1::LearnReply* reply) override;
  grpc::Status CloseTask(grpc::ServerContext* context,
                         const aggregator::v1::CloseTaskRequest* request,
                         aggregator::v1::CloseTaskReply* reply) override;

  // Releases delayed calls at once (before the server shuts down).
  void Stop();
  // Releases the calls delayed now, as SIGCONT a stopped process; later
  // calls are delayed as the faults say.
  void Continue();

  // For tests: the replay_unique_id strings of each Learn call received, in
  // order.
  std::vector<std::vector<std::string>> received() const;
  int64_t learner_step() const;
  // RPCs received so far but GetResource (counted on arrival, before any
  // delay).
  int64_t calls() const;
  bool task_open() const;

 private:
  // Applies delay, fault injection and crash-after; non-OK fails the RPC.
  grpc::Status Enter(const char* method);
  // The faults in force for this RPC: the options', or the fault file's.
  absl::StatusOr<InjectedFaults> CurrentFaults() const;

  const ExampleLearnerOptions options_;
  mutable Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t continued_ ABSL_GUARDED_BY(mu_) = 0;  // Continue()s so far
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t learner_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool task_open_ ABSL_GUARDED_BY(mu_) = false;
  std::string task_id_ ABSL_GUARDED_BY(mu_);
  std::string buffer_id_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> received_ ABSL_GUARDED_BY(mu_);
};

// An example learner serving on `address` ("127.0.0.1:0" picks a port).
struct ExampleLearnerServer {
  std::unique_ptr<ExampleLearner> learner;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;  // "127.0.0.1:<port>"

  ~ExampleLearnerServer();
  // Stops serving; in-flight calls are cancelled.
  void Shutdown();
};

// `credentials`: the listener's (null: plaintext).
absl::StatusOr<std::unique_ptr<ExampleLearnerServer>> StartExampleLearner(
    const ExampleLearnerOptions& options, const std::string& address,
    int64_t max_message_bytes = int64_t{1} << 30,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

}  // namespace aggregator

#endif  // TESTS_TESTING_EXAMPLE_LEARNER_SERVICE_H_
