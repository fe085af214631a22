// The worker side of a supervised child: a WorkerObject holds the named
// methods and attributes a child offers, and the serving loops answer the
// supervisor's requests with them until "_shutdown" or the end of the channel.
//
// A process child is a program whose main() calls RunWorkerProcess() (it finds
// its channel through AGGREGATOR_WORKER_FD); a thread child is the same
// WorkerObject served inside the supervisor's process (see supervisor.h).
//
// The start-up handshake, which the supervisor relies on to tell a failed
// start from a crash later on: once init succeeds the child sends a WorkerReply
// with method "_init" and an empty req_id; when init fails it sends the same
// with error kind INIT_FAILED and the reason, then ends. A child that ends
// before either is reported as having failed during init.
#ifndef LIB_SUPERVISOR_WORKER_RUNTIME_H_
#define LIB_SUPERVISOR_WORKER_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/mutex.h"
#include "lib/supervisor/worker_channel.h"
#include "proto/worker.pb.h"
#include "proto/worker_names.h"

namespace aggregator {

// Reserved methods (worker.proto) and the handshake reply's method:
// kGetAttrMethod, kShutdownMethod, kInitMethod in proto/worker_names.h.

using WorkerValue = google::protobuf::Value;
using WorkerArgs = google::protobuf::ListValue;
// A method: its result, or an error that reaches the caller as KIND_FAILED
// with the status message. A thrown exception is caught and reported the same
// way.
using WorkerMethod =
    std::function<absl::StatusOr<WorkerValue>(const WorkerArgs& args)>;

// Small builders for the dynamic values methods take and return.
WorkerValue NumberValue(double value);
WorkerValue StringValue(std::string value);
WorkerValue BoolValue(bool value);
WorkerValue NullValue();
WorkerArgs MakeArgs(std::initializer_list<WorkerValue> values);

// The object a child serves. Register methods and attributes before serving;
// afterwards Handle() runs on the serving thread only.
//
// Thread-safety: registration and Handle() are not synchronized (one thread at
// a time, registration first). RequestStop(), stop_requested() and SleepFor()
// may be called from any thread. Ownership: owns its methods and getters.
class WorkerObject {
 public:
  WorkerObject() = default;
  WorkerObject(const WorkerObject&) = delete;
  WorkerObject& operator=(const WorkerObject&) = delete;

  // Replaces any method of the same name. Names starting with '_' are
  // reserved and rejected with INVALID_ARGUMENT.
  absl::Status AddMethod(std::string name, WorkerMethod method);
  // An attribute whose value is fixed.
  absl::Status SetAttr(std::string name, WorkerValue value);
  // An attribute computed on every read.
  absl::Status AddAttr(std::string name, std::function<WorkerValue()> getter);

  // Answers one request (not "_shutdown", which the serving loop handles):
  // calls the method or reads the attribute and fills `reply` (req_id and
  // method copied from the request; error set on failure). Never throws.
  void Handle(const v1::WorkerRequest& request, v1::WorkerReply* reply);

  // Cooperative cancellation for long methods: the supervisor requests a stop
  // before it shuts a thread child down, so a method waiting in SleepFor()
  // returns early instead of delaying the shutdown.
  void RequestStop();
  bool stop_requested() const {
    return stop_requested_.load(std::memory_order_acquire);
  }
  // Sleeps for `duration` unless a stop is requested first. Returns false if
  // it was cut short by a stop.
  bool SleepFor(std::chrono::nanoseconds duration);

 private:
  std::map<std::string, WorkerMethod, std::less<>> methods_;
  std::map<std::string, std::function<WorkerValue()>, std::less<>> attrs_;

  std::atomic<bool> stop_requested_{false};
  Mutex stop_mu_;  // wakes SleepFor() on RequestStop()
};

// Creates a child's object; an error (or an exception) is the child's init
// failure, reported to the supervisor as INIT_FAILED with the message.
using WorkerInit =
    std::function<absl::StatusOr<std::unique_ptr<WorkerObject>>()>;

// Runs `init` and converts an exception into a status naming it.
absl::StatusOr<std::unique_ptr<WorkerObject>> RunWorkerInit(
    const WorkerInit& init);

// The handshake reply for an init result.
v1::WorkerReply InitReply(const absl::Status& init_status);

// Serves `object` on `channel` until "_shutdown" (not answered) or the end of
// the stream; either is OK. Reading waits without a deadline: the supervisor
// decides when a child ends. Errors name what failed (a broken frame, a write
// to a closed channel).
absl::Status ServeWorker(WorkerObject& object, WorkerChannel& channel);

// main() of a process child: takes the channel named by AGGREGATOR_WORKER_FD
// (marking it close-on-exec so the child's own children do not inherit it),
// runs `init`, sends the handshake and serves. Returns the exit code: 0 after
// "_shutdown" or the end of the channel, 1 when init failed, 2 when the
// channel is missing or broken. Messages go to stderr.
int RunWorkerProcess(const WorkerInit& init);

}  // namespace aggregator

#endif  // LIB_SUPERVISOR_WORKER_RUNTIME_H_
