// A Python worker (tests/python/sample_worker.py, run by tools/python/run with
// learner_aggregator.worker) under the C++ Supervisor: it answers calls and
// attribute reads, reports an init failure, and is restarted after a crash.
// Every wait has a deadline; nothing sleeps to synchronize.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "lib/supervisor/supervisor.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Starting Python (grpc, numpy imports) on a loaded 2-core machine.
constexpr seconds kLongWait(30);

SupervisorOptions TestOptions() {
  SupervisorOptions options;
  options.default_timeout = kLongWait;
  options.stop_timeout = seconds(5);
  return options;
}

int AddPythonWorker(Supervisor& supervisor, const std::string& mode) {
  ProcessChildSpec spec;
  spec.argv = {"tools/python/run", "tests/python/sample_worker.py", mode};
  absl::StatusOr<int> id = supervisor.Register(std::move(spec));
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  return *id;
}

RecvPayload Call(Supervisor& supervisor, int id, const std::string& method,
                 WorkerArgs args = {}) {
  SendPayload payload{id, "", method, std::move(args)};
  absl::Status sent = supervisor.Send(payload);
  INFO(sent.ToString());
  REQUIRE(sent.ok());
  auto results = supervisor.RecvAll({payload}, /*ignore_err=*/true);
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  REQUIRE(results->size() == 1);
  return (*results)[0];
}

double Number(Supervisor& supervisor, int id, const std::string& attr) {
  absl::StatusOr<WorkerValue> value = supervisor.GetAttr(id, attr);
  INFO(value.status().ToString());
  REQUIRE(value.ok());
  REQUIRE(value->has_number_value());
  return value->number_value();
}

TEST_CASE("A Python worker answers calls and attribute reads") {
  Supervisor supervisor(TestOptions());
  const int id = AddPythonWorker(supervisor, "ok");
  REQUIRE(supervisor.StartLink().ok());
  absl::Status running = supervisor.WaitRunning(id);
  INFO(running.ToString());
  REQUIRE(running.ok());

  RecvPayload added = Call(supervisor, id, "add", MakeArgs({NumberValue(2)}));
  REQUIRE(added.ok());
  CHECK(added.data.number_value() == 2);
  CHECK(Call(supervisor, id, "add", MakeArgs({NumberValue(0.5)}))
            .data.number_value() == 2.5);
  CHECK(Number(supervisor, id, "count") == 2.5);
  absl::StatusOr<WorkerValue> name = supervisor.GetAttr(id, "name");
  REQUIRE(name.ok());
  CHECK(name->string_value() == "counter");

  RecvPayload failed =
      Call(supervisor, id, "fail", MakeArgs({StringValue("bad input")}));
  REQUIRE(failed.error.has_value());
  CHECK(failed.error->kind() == v1::WorkerError::KIND_FAILED);
  CHECK_THAT(failed.error->message(), Catch::Contains("ValueError: bad input"));
  RecvPayload missing = Call(supervisor, id, "nope");
  REQUIRE(missing.error.has_value());
  CHECK(missing.error->kind() == v1::WorkerError::KIND_NO_SUCH_METHOD);
  absl::StatusOr<WorkerValue> no_attr = supervisor.GetAttr(id, "missing");
  CHECK(absl::IsNotFound(no_attr.status()));

  REQUIRE(supervisor.Shutdown().ok());
  absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(id);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kExited);
  REQUIRE(status->exit_status.has_value());
  CHECK(status->last_error.empty());  // exited 0 after "_shutdown"
}

TEST_CASE("A Python worker whose init raises is reported as INIT_FAILED") {
  Supervisor supervisor(TestOptions());
  const int id = AddPythonWorker(supervisor, "init-fail");
  REQUIRE(supervisor.StartLink().ok());
  absl::Status running = supervisor.WaitRunning(id);
  INFO(running.ToString());
  CHECK(absl::IsFailedPrecondition(running));
  CHECK_THAT(std::string(running.message()),
             Catch::Contains("RuntimeError: no GPU here"));
  absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(id);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kFailed);
  CHECK_THAT(status->last_error, Catch::Contains("no GPU here"));

  RecvPayload call = Call(supervisor, id, "add", MakeArgs({NumberValue(1)}));
  REQUIRE(call.error.has_value());
  CHECK(call.error->kind() == v1::WorkerError::KIND_INIT_FAILED);
}

TEST_CASE("A crashed Python worker is restarted and serves again") {
  Supervisor supervisor(TestOptions());
  const int id = AddPythonWorker(supervisor, "ok");
  REQUIRE(supervisor.StartLink().ok());
  REQUIRE(supervisor.WaitRunning(id).ok());
  REQUIRE(Call(supervisor, id, "add", MakeArgs({NumberValue(5)})).ok());
  const pid_t first_pid = static_cast<pid_t>(Number(supervisor, id, "pid"));

  SECTION("killed with SIGKILL") {
    REQUIRE(kill(first_pid, SIGKILL) == 0);
    absl::StatusOr<ChildStatus> exited = supervisor.WaitExited(id);
    REQUIRE(exited.ok());
    CHECK(exited->state == ChildState::kExited);
    CHECK_THAT(exited->last_error, Catch::Contains("SIGKILL"));
  }
  SECTION("crashing inside a call") {
    RecvPayload crash = Call(supervisor, id, "crash");
    REQUIRE(crash.error.has_value());
    CHECK(crash.error->kind() == v1::WorkerError::KIND_CHILD_EXITED);
    absl::StatusOr<ChildStatus> exited = supervisor.WaitExited(id);
    REQUIRE(exited.ok());
    CHECK_THAT(exited->last_error, Catch::Contains("70"));
  }

  absl::Status restarted = supervisor.Restart(id);
  INFO(restarted.ToString());
  REQUIRE(restarted.ok());
  REQUIRE(supervisor.WaitRunning(id).ok());
  CHECK(Number(supervisor, id, "count") == 0);  // a fresh process
  CHECK(static_cast<pid_t>(Number(supervisor, id, "pid")) != first_pid);
  CHECK(Call(supervisor, id, "add", MakeArgs({NumberValue(1)}))
            .data.number_value() == 1);
  absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(id);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kRunning);
  CHECK(status->restarts == 1);
}

}  // namespace
}  // namespace aggregator
