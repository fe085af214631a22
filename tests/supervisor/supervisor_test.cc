// The supervisor against real children: process children run
// tests/testing/supervisor_test_worker, thread children serve the same mock env
// in-process. Ports DI-engine's supervisor tests (both child types), then the
// original's deadlock (a child killed mid-write), init crashes, exits and
// shutdown escalation, and the worker channel on its own. Every wait has a
// deadline; nothing sleeps to synchronize.
#include "lib/supervisor/supervisor.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/supervisor/worker_channel.h"
#include "lib/supervisor/worker_runtime.h"
#include "tests/testing/supervisor_test_env.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous bound for anything that should happen at once on a loaded machine.
constexpr seconds kLongWait(10);
constexpr char kWorker[] = "tests/testing/supervisor_test_worker";

enum class ChildKind { kProcess, kThread };

const char* KindName(ChildKind kind) {
  return kind == ChildKind::kProcess ? "process" : "thread";
}

// Children that do not follow "_shutdown" (busy in a method) get SIGTERM
// after 200ms, so tests do not wait the default stop timeout.
SupervisorOptions TestOptions() {
  SupervisorOptions options;
  options.stop_timeout = milliseconds(400);
  return options;
}

int AddChild(Supervisor& supervisor, ChildKind kind,
             const MockEnvOptions& env = {},
             const std::vector<std::string>& worker_args = {}) {
  absl::StatusOr<int> id;
  if (kind == ChildKind::kProcess) {
    ProcessChildSpec spec;
    spec.argv = {kWorker};
    if (env.fail_on_step != 0) {
      spec.argv.push_back(absl::StrCat("--fail_on_step=", env.fail_on_step));
    }
    spec.argv.insert(spec.argv.end(), worker_args.begin(), worker_args.end());
    id = supervisor.Register(std::move(spec));
  } else {
    MockEnvOptions thread_env = env;
    thread_env.allow_exit = false;  // exit() would end the test binary
    id = supervisor.Register(ThreadChildSpec{
        [thread_env]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
          return MakeMockEnv(thread_env);
        },
        "mock env"});
  }
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  return *id;
}

void StartOrDie(Supervisor& supervisor) {
  const absl::Status status = supervisor.StartLink();
  INFO(status.ToString());
  REQUIRE(status.ok());
}

SendPayload Payload(int proc_id, const std::string& method,
                    WorkerArgs args = {}) {
  SendPayload payload;
  payload.proc_id = proc_id;
  payload.method = method;
  payload.args = std::move(args);
  return payload;
}

SendPayload Step(int proc_id) {
  return Payload(proc_id, "step", MakeArgs({StringValue("any action")}));
}

void SendOrDie(Supervisor& supervisor, SendPayload& payload) {
  const absl::Status status = supervisor.Send(payload);
  INFO(status.ToString());
  REQUIRE(status.ok());
}

RecvPayload RecvOrDie(Supervisor& supervisor, bool ignore_err = false) {
  absl::StatusOr<RecvPayload> result = supervisor.Recv(ignore_err, kLongWait);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return std::move(*result);
}

std::vector<RecvPayload> RecvAllOrDie(
    Supervisor& supervisor, const std::vector<SendPayload>& payloads,
    bool ignore_err = false, const RecvAllCallback& callback = nullptr,
    Supervisor::Duration timeout = kLongWait) {
  absl::StatusOr<std::vector<RecvPayload>> results =
      supervisor.RecvAll(payloads, ignore_err, callback, timeout);
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  return std::move(*results);
}

double ElapsedSeconds(Steady::time_point start) {
  return std::chrono::duration<double>(Steady::now() - start).count();
}

// ---------------------------------------------------------------------------
// DI-engine's cases, for both child types.

TEST_CASE("Three children answer a step") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  for (int i = 0; i < 3; ++i) {
    SendPayload step = Step(i);
    SendOrDie(supervisor, step);
  }
  int proc_id_sum = 0;
  for (int i = 0; i < 3; ++i) {
    const RecvPayload result = RecvOrDie(supervisor);
    proc_id_sum += result.proc_id;
    CHECK(result.method == "step");
    CHECK(result.data.number_value() == 1);
  }
  CHECK(proc_id_sum == 0 + 1 + 2);
  CHECK(supervisor.Shutdown().ok());
}

TEST_CASE("RecvAll keeps request order and leaves other results for Recv") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  std::vector<SendPayload> payloads;
  for (int i = 0; i < 3; ++i) {
    payloads.push_back(Step(i));
    SendOrDie(supervisor, payloads.back());
  }
  // Wait for the last two in reverse order; the first stays queued.
  const std::vector<SendPayload> last_two = {payloads[2], payloads[1]};
  const std::vector<RecvPayload> results = RecvAllOrDie(supervisor, last_two);
  REQUIRE(results.size() == 2);
  CHECK(results[0].req_id == payloads[2].req_id);
  CHECK(results[0].proc_id == 2);
  CHECK(results[1].req_id == payloads[1].req_id);
  CHECK(results[1].proc_id == 1);

  const RecvPayload first = RecvOrDie(supervisor);
  CHECK(first.req_id == payloads[0].req_id);
  CHECK(first.data.number_value() == 1);
  // Nothing else is left.
  CHECK(absl::IsDeadlineExceeded(
      supervisor.Recv(false, milliseconds(20)).status()));
}

TEST_CASE("Attributes of one child and of all") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  absl::StatusOr<std::vector<WorkerValue>> all =
      supervisor.GetAttrAll("action_space", kLongWait);
  INFO(all.status().ToString());
  REQUIRE(all.ok());
  REQUIRE(all->size() == 3);
  for (const WorkerValue& value : *all) CHECK(value.number_value() == 3);

  absl::StatusOr<WorkerValue> one =
      supervisor.GetAttr(1, "action_space", kLongWait);
  REQUIRE(one.ok());
  CHECK(one->number_value() == 3);

  // A computed attribute follows the child's state.
  SendPayload step = Step(2);
  SendOrDie(supervisor, step);
  RecvAllOrDie(supervisor, {step});
  absl::StatusOr<WorkerValue> counter =
      supervisor.GetAttr(2, "counter", kLongWait);
  REQUIRE(counter.ok());
  CHECK(counter->number_value() == 1);

  absl::StatusOr<WorkerValue> missing =
      supervisor.GetAttr(0, "no_such_attr", kLongWait);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(std::string(missing.status().message()),
             Catch::Contains("child 0") &&
                 Catch::Contains("no attribute 'no_such_attr'"));
}

TEST_CASE("A child that fails its second step is restarted and all continue") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, kind);
  AddChild(supervisor, kind);
  AddChild(supervisor, kind, MockEnvOptions{/*fail_on_step=*/2});
  StartOrDie(supervisor);

  for (int proc_id = 0; proc_id < 3; ++proc_id) {
    for (int i = 0; i < 2; ++i) {
      SendPayload step = Step(proc_id);
      SendOrDie(supervisor, step);
    }
  }
  int errors = 0;
  for (int i = 0; i < 6; ++i) {
    const RecvPayload result = RecvOrDie(supervisor, /*ignore_err=*/true);
    if (!result.ok()) {
      ++errors;
      CHECK(result.proc_id == 2);
      CHECK(result.error->kind() == v1::WorkerError::KIND_FAILED);
      CHECK_THAT(result.error->message(),
                 Catch::Contains("child 2") && Catch::Contains("Ohh"));
      const absl::Status restarted = supervisor.Restart(result.proc_id);
      INFO(restarted.ToString());
      REQUIRE(restarted.ok());
    }
  }
  CHECK(errors == 1);

  for (int proc_id = 0; proc_id < 3; ++proc_id) {
    SendPayload step = Step(proc_id);
    SendOrDie(supervisor, step);
  }
  double sum = 0;
  for (int i = 0; i < 3; ++i) sum += RecvOrDie(supervisor).data.number_value();
  // Two healthy children at their third step, the restarted one at its first.
  CHECK(sum == 3 + 3 + 1);
  absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(2);
  REQUIRE(status.ok());
  CHECK(status->restarts == 1);
  CHECK(status->state == ChildState::kRunning);
}

TEST_CASE("Recv without ignore_err surfaces the child's error") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, kind, MockEnvOptions{/*fail_on_step=*/1});
  StartOrDie(supervisor);

  SendPayload step = Step(0);
  step.req_id = "r7";
  SendOrDie(supervisor, step);
  const absl::StatusOr<RecvPayload> result = supervisor.Recv(false, kLongWait);
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kUnknown);
  CHECK_THAT(std::string(result.status().message()),
             Catch::StartsWith("child 0 (") &&
                 Catch::Contains("req 'r7' (step) failed: Ohh: step 1 fails"));

  // RecvAll fails the same way; an unknown method is UNIMPLEMENTED.
  SendPayload nope = Payload(0, "no_such_method");
  SendOrDie(supervisor, nope);
  absl::StatusOr<std::vector<RecvPayload>> all =
      supervisor.RecvAll({nope}, false, nullptr, kLongWait);
  CHECK(absl::IsUnimplemented(all.status()));
  CHECK_THAT(std::string(all.status().message()),
             Catch::Contains("no method 'no_such_method'"));
}

TEST_CASE("A RecvAll callback resends until every child was retried twice") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  std::vector<SendPayload> payloads;
  for (int i = 0; i < 3; ++i) {
    payloads.push_back(Step(i));
    SendOrDie(supervisor, payloads.back());
  }
  std::map<int, int> retries = {{0, 0}, {1, 0}, {2, 0}};
  std::vector<double> retried_steps;
  auto callback = [&](const RecvPayload& result, RecvAllHandle& handle) {
    REQUIRE(result.ok());
    if (result.data.number_value() > 1) {
      retried_steps.push_back(result.data.number_value());
    }
    if (retries[result.proc_id] == 2) return;
    ++retries[result.proc_id];
    SendPayload again = Step(result.proc_id);
    const absl::Status status = handle.Send(again);
    INFO(status.ToString());
    REQUIRE(status.ok());
  };
  const std::vector<RecvPayload> results =
      RecvAllOrDie(supervisor, payloads, false, callback);
  REQUIRE(results.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(results[i].req_id == payloads[i].req_id);
    CHECK(results[i].data.number_value() == 1);
    CHECK(retries[i] == 2);
  }
  // The retried results went to the callback: steps 2 and 3 of each child.
  CHECK(retried_steps.size() == 6);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WorkerValue> counter =
        supervisor.GetAttr(i, "counter", kLongWait);
    REQUIRE(counter.ok());
    CHECK(counter->number_value() == 3);
  }
}

TEST_CASE("Blocking calls time out") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  // Without ignore_err: the call fails, naming what is missing.
  std::vector<SendPayload> blocked;
  for (int i = 0; i < 3; ++i) {
    blocked.push_back(Payload(i, "block"));
    SendOrDie(supervisor, blocked.back());
  }
  Steady::time_point start = Steady::now();
  absl::StatusOr<std::vector<RecvPayload>> failed =
      supervisor.RecvAll(blocked, false, nullptr, milliseconds(300));
  CHECK(ElapsedSeconds(start) >= 0.29);
  CHECK(ElapsedSeconds(start) < 5);
  REQUIRE(absl::IsDeadlineExceeded(failed.status()));
  CHECK_THAT(std::string(failed.status().message()),
             Catch::Contains("300ms") && Catch::Contains("3 of 3") &&
                 Catch::Contains(blocked[0].req_id));
  start = Steady::now();
  // Process children sleep through "_shutdown" and go at SIGTERM; threads
  // are woken from their sleep.
  CHECK(supervisor.Shutdown(milliseconds(400)).ok());
  CHECK(ElapsedSeconds(start) < 5);

  // With ignore_err: a TIMEOUT error stands in for the missing reply.
  StartOrDie(supervisor);
  std::vector<SendPayload> payloads = {Payload(0, "block"), Step(1), Step(2)};
  for (SendPayload& payload : payloads) SendOrDie(supervisor, payload);
  start = Steady::now();
  const std::vector<RecvPayload> results = RecvAllOrDie(
      supervisor, payloads, /*ignore_err=*/true, nullptr, milliseconds(300));
  CHECK(ElapsedSeconds(start) >= 0.29);
  REQUIRE(results.size() == 3);
  REQUIRE(!results[0].ok());
  CHECK(results[0].error->kind() == v1::WorkerError::KIND_TIMEOUT);
  CHECK_THAT(
      results[0].error->message(),
      Catch::StartsWith("child 0 (") &&
          Catch::Contains(absl::StrCat("no reply to req '", payloads[0].req_id,
                                       "' (block) within 300ms")));
  CHECK(results[1].ok());
  CHECK(results[2].ok());

  // Recv times out too.
  start = Steady::now();
  CHECK(absl::IsDeadlineExceeded(
      supervisor.Recv(false, milliseconds(100)).status()));
  CHECK(ElapsedSeconds(start) >= 0.09);
}

TEST_CASE("The timeout is a total for the call, not per reply") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  FakeClock clock;
  SupervisorOptions options = TestOptions();
  options.clock = &clock;
  Supervisor supervisor(options);
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  std::vector<SendPayload> payloads = {Step(0), Step(1), Payload(2, "block")};
  for (SendPayload& payload : payloads) SendOrDie(supervisor, payload);
  // Each reply "takes" 6 s of the 10 s timeout: no gap reaches 10 s, but
  // after two replies the total does.
  int replies = 0;
  auto callback = [&](const RecvPayload& result, RecvAllHandle&) {
    if (result.ok()) {
      ++replies;
      clock.Advance(seconds(6));
    }
  };
  const Steady::time_point start = Steady::now();
  const std::vector<RecvPayload> results = RecvAllOrDie(
      supervisor, payloads, /*ignore_err=*/true, callback, seconds(10));
  // A per-reply timeout would have waited 10 real seconds for the third.
  CHECK(ElapsedSeconds(start) < 5);
  CHECK(replies == 2);
  REQUIRE(results.size() == 3);
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  REQUIRE(!results[2].ok());
  CHECK(results[2].error->kind() == v1::WorkerError::KIND_TIMEOUT);
  CHECK_THAT(results[2].error->message(), Catch::Contains("within 10s"));
  CHECK(supervisor.Shutdown(milliseconds(400)).ok());
}

TEST_CASE("A timeout callback adds a request that was not sent") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  std::vector<SendPayload> payloads = {Payload(0, "block"), Step(1), Step(2)};
  for (SendPayload& payload : payloads) SendOrDie(supervisor, payload);
  bool block_reset_timed_out = false;
  auto callback = [&](const RecvPayload& result, RecvAllHandle& handle) {
    if (result.method == "block" && !result.ok()) {
      SendPayload reset = Payload(result.proc_id, "block_reset");
      reset.req_id = "block-reset-0";
      const absl::Status status = handle.Add(reset);
      INFO(status.ToString());
      REQUIRE(status.ok());
      CHECK(handle.remaining() == 1);
      return;
    }
    if (result.method == "block_reset" && !result.ok()) {
      CHECK(result.error->kind() == v1::WorkerError::KIND_TIMEOUT);
      block_reset_timed_out = true;
    }
  };
  const std::vector<RecvPayload> results = RecvAllOrDie(
      supervisor, payloads, /*ignore_err=*/true, callback, milliseconds(300));
  CHECK(block_reset_timed_out);
  REQUIRE(results.size() == 3);
  REQUIRE(!results[0].ok());
  CHECK(results[0].error->kind() == v1::WorkerError::KIND_TIMEOUT);
  CHECK(results[1].ok());
  CHECK(results[2].ok());
}

TEST_CASE("Recv leaves the results a RecvAll waits for to it") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  for (int i = 0; i < 3; ++i) AddChild(supervisor, kind);
  StartOrDie(supervisor);

  // r1 is awaited by the RecvAll below and arrives before r2, which nobody
  // awaits. A Recv on another thread, started once the RecvAll holds r1, must
  // get r2.
  SendPayload r0 = Payload(2, "echo", MakeArgs({NumberValue(0)}));
  SendPayload r1 = Payload(0, "sleep_ms", MakeArgs({NumberValue(100)}));
  SendPayload r2 = Payload(1, "sleep_ms", MakeArgs({NumberValue(300)}));
  for (SendPayload* payload : {&r0, &r1, &r2}) SendOrDie(supervisor, *payload);
  std::thread other;
  absl::StatusOr<RecvPayload> other_result = absl::UnknownError("not run");
  auto callback = [&](const RecvPayload& result, RecvAllHandle&) {
    if (result.req_id != r0.req_id) return;
    other =
        std::thread([&] { other_result = supervisor.Recv(false, kLongWait); });
  };
  const std::vector<RecvPayload> results =
      RecvAllOrDie(supervisor, {r0, r1}, false, callback);
  REQUIRE(other.joinable());
  other.join();
  CHECK(results[0].req_id == r0.req_id);
  CHECK(results[1].req_id == r1.req_id);
  INFO(other_result.status().ToString());
  REQUIRE(other_result.ok());
  CHECK(other_result->req_id == r2.req_id);
}

TEST_CASE("A thread child that does not stop in time is detached, reported") {
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, ChildKind::kThread);
  StartOrDie(supervisor);
  // busy_ms ignores the stop request. The stop comes once it is under way
  // (a stop that came first would be honoured), and it outlasts the 100 ms.
  const int busy_before = BusyCallsStarted();
  SendPayload busy = Payload(0, "busy_ms", MakeArgs({NumberValue(5000)}));
  SendOrDie(supervisor, busy);
  REQUIRE(supervisor.WaitRunning(0, kLongWait).ok());
  const Steady::time_point give_up = Steady::now() + kLongWait;
  while (BusyCallsStarted() == busy_before && Steady::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(1));  // polling, with a deadline
  }
  REQUIRE(BusyCallsStarted() > busy_before);
  const Steady::time_point start = Steady::now();
  const absl::Status status = supervisor.Shutdown(milliseconds(100));
  CHECK(ElapsedSeconds(start) < 1);
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("child 0 (thread 'mock env') did not stop within "
                             "100ms and was detached"));
  const absl::StatusOr<ChildStatus> child = supervisor.GetChildStatus(0);
  REQUIRE(child.ok());
  CHECK(child->state == ChildState::kExited);
  CHECK_THAT(child->last_error, Catch::Contains("its thread was detached"));
}

// ---------------------------------------------------------------------------
// The original's deadlock, and reporting.

TEST_CASE("Killing a child mid-write 50 times never stalls the others") {
  Supervisor supervisor(TestOptions());
  // Child 0 writes large unsolicited frames without end, so it is nearly
  // always inside a write; 1 and 2 answer steps.
  AddChild(supervisor, ChildKind::kProcess, {}, {"--stream_bytes=131072"});
  AddChild(supervisor, ChildKind::kProcess);
  AddChild(supervisor, ChildKind::kProcess);
  StartOrDie(supervisor);
  for (int i = 0; i < 3; ++i)
    REQUIRE(supervisor.WaitRunning(i, kLongWait).ok());

  // The others stream replies on a second thread (concurrently with the
  // kills, restarts and waits below). Failures are collected and checked
  // here, as Catch2 assertions are not thread-safe.
  std::mutex mu;
  std::condition_variable progressed;
  int rounds = 0;
  std::vector<std::string> failures;
  double slowest_round = 0;
  std::atomic<bool> stop{false};
  std::thread streamer([&] {
    double expected = 1;
    while (!stop.load()) {
      std::vector<SendPayload> payloads = {Step(1), Step(2)};
      const Steady::time_point start = Steady::now();
      absl::Status status;
      for (SendPayload& payload : payloads) {
        if (status.ok()) status = supervisor.Send(payload);
      }
      absl::StatusOr<std::vector<RecvPayload>> results =
          status.ok() ? supervisor.RecvAll(payloads, false, nullptr, seconds(5))
                      : absl::StatusOr<std::vector<RecvPayload>>(status);
      std::lock_guard<std::mutex> lock(mu);
      slowest_round = std::max(slowest_round, ElapsedSeconds(start));
      if (!results.ok()) {
        failures.push_back(results.status().ToString());
        break;
      }
      for (const RecvPayload& result : *results) {
        if (result.data.number_value() != expected) {
          failures.push_back(absl::StrCat(
              "child ", result.proc_id, " answered step ",
              result.data.number_value(), ", expected ", expected));
        }
      }
      ++expected;
      ++rounds;
      progressed.notify_all();
    }
    progressed.notify_all();
  });

  for (int kill_count = 0; kill_count < 50; ++kill_count) {
    INFO("kill " << kill_count);
    const absl::Status running = supervisor.WaitRunning(0, kLongWait);
    INFO(running.ToString());
    REQUIRE(running.ok());
    const absl::StatusOr<ChildStatus> before = supervisor.GetChildStatus(0);
    REQUIRE(before.ok());
    REQUIRE(before->pid > 0);
    REQUIRE(kill(before->pid, SIGKILL) == 0);

    const absl::StatusOr<ChildStatus> after =
        supervisor.WaitExited(0, kLongWait);
    INFO(after.status().ToString());
    REQUIRE(after.ok());
    CHECK(after->state == ChildState::kExited);
    CHECK_THAT(after->last_error, Catch::Contains("was killed by SIGKILL"));

    // The others keep answering meanwhile.
    {
      std::unique_lock<std::mutex> lock(mu);
      const int seen = rounds;
      REQUIRE(progressed.wait_for(
          lock, kLongWait, [&] { return rounds > seen || !failures.empty(); }));
      REQUIRE(failures.empty());
    }
    const absl::Status restarted = supervisor.Restart(0, seconds(1));
    INFO(restarted.ToString());
    REQUIRE(restarted.ok());
  }
  stop = true;
  streamer.join();

  INFO(absl::StrJoin(failures, "\n"));
  CHECK(failures.empty());
  CHECK(rounds >= 50);
  CHECK(slowest_round < 5);
  const SupervisorStats stats = supervisor.stats();
  WARN("streaming rounds: "
       << rounds << ", slowest " << slowest_round * 1000
       << " ms; partial frames discarded: " << stats.partial_frames_discarded
       << ", unsolicited frames dropped: " << stats.dropped_replies);
  CHECK(stats.restarts == 50);
  // Frames cut by the kills were discarded, and the unsolicited ones dropped.
  CHECK(stats.partial_frames_discarded >= 1);
  CHECK(stats.dropped_replies >= 1);
  absl::StatusOr<ChildStatus> victim = supervisor.GetChildStatus(0);
  REQUIRE(victim.ok());
  CHECK(victim->restarts == 50);
}

struct InitCrash {
  ChildKind kind;
  std::string mode;
  std::string expected;
};

TEST_CASE("A child whose init crashes is reported, never waited for") {
  const InitCrash crash = GENERATE(
      InitCrash{ChildKind::kProcess, "exit3",
                "exited with exit code 3 during init"},
      InitCrash{ChildKind::kProcess, "abort",
                "was killed by SIGABRT during init"},
      InitCrash{ChildKind::kProcess, "error",
                "failed in init: INVALID_ARGUMENT: the mock env refuses to "
                "start"},
      InitCrash{ChildKind::kProcess, "throw",
                "failed in init: INTERNAL: init threw: the mock env threw in "
                "init"},
      InitCrash{ChildKind::kThread, "error",
                "failed in init: INVALID_ARGUMENT: the mock env refuses to "
                "start"},
      InitCrash{ChildKind::kThread, "throw",
                "failed in init: INTERNAL: init threw: the mock env threw in "
                "init"});
  INFO(KindName(crash.kind) << " child, init " << crash.mode);
  Supervisor supervisor(TestOptions());
  if (crash.kind == ChildKind::kProcess) {
    AddChild(supervisor, crash.kind, {}, {"--init=" + crash.mode});
  } else {
    const std::string mode = crash.mode;
    REQUIRE(supervisor
                .Register(ThreadChildSpec{
                    [mode]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
                      if (mode == "throw") {
                        throw std::runtime_error("the mock env threw in init");
                      }
                      return absl::InvalidArgumentError(
                          "the mock env refuses to start");
                    },
                    ""})
                .ok());
  }
  AddChild(supervisor, crash.kind);  // a healthy sibling
  StartOrDie(supervisor);

  // A request sent before the failure is noticed fails with it.
  SendPayload early = Step(0);
  SendOrDie(supervisor, early);
  SendPayload sibling = Step(1);
  SendOrDie(supervisor, sibling);
  const std::vector<RecvPayload> results =
      RecvAllOrDie(supervisor, {early, sibling}, /*ignore_err=*/true);
  REQUIRE(!results[0].ok());
  CHECK(results[0].error->kind() == v1::WorkerError::KIND_INIT_FAILED);
  CHECK_THAT(results[0].error->message(),
             Catch::StartsWith("child 0 (") && Catch::Contains(crash.expected));
  CHECK(results[1].ok());

  const absl::StatusOr<ChildStatus> status =
      supervisor.WaitExited(0, kLongWait);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kFailed);
  CHECK_THAT(status->last_error, Catch::Contains(crash.expected));
  const absl::Status running = supervisor.WaitRunning(0, kLongWait);
  CHECK(absl::IsFailedPrecondition(running));
  CHECK_THAT(std::string(running.message()), Catch::Contains(crash.expected));

  // Later requests fail at once, without reaching the child.
  SendPayload late = Step(0);
  SendOrDie(supervisor, late);
  const absl::StatusOr<RecvPayload> result = supervisor.Recv(false, kLongWait);
  CHECK(absl::IsFailedPrecondition(result.status()));
  CHECK_THAT(
      std::string(result.status().message()),
      Catch::Contains(crash.expected) && Catch::Contains("was not sent"));
}

TEST_CASE("A program that cannot be executed fails StartLink, naming it") {
  Supervisor supervisor(TestOptions());
  ProcessChildSpec spec;
  spec.argv = {"/nonexistent/worker"};
  REQUIRE(supervisor.Register(spec).ok());
  AddChild(supervisor, ChildKind::kThread);
  const absl::Status status = supervisor.StartLink();
  CHECK(absl::IsNotFound(status));
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("child 0 (argv[0] '/nonexistent/worker'): could "
                             "not be started"));
  const absl::StatusOr<ChildStatus> child = supervisor.GetChildStatus(0);
  REQUIRE(child.ok());
  CHECK(child->state == ChildState::kFailed);
  // The other child runs.
  CHECK(supervisor.WaitRunning(1, kLongWait).ok());
}

TEST_CASE("A child that exits mid-request completes it with CHILD_EXITED") {
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, ChildKind::kProcess);
  StartOrDie(supervisor);
  REQUIRE(supervisor.WaitRunning(0, kLongWait).ok());
  const pid_t pid = supervisor.GetChildStatus(0)->pid;

  SendPayload exit = Payload(0, "exit", MakeArgs({NumberValue(3)}));
  exit.req_id = "r7";
  SendOrDie(supervisor, exit);
  const std::vector<RecvPayload> results =
      RecvAllOrDie(supervisor, {exit}, /*ignore_err=*/true);
  REQUIRE(!results[0].ok());
  CHECK(results[0].error->kind() == v1::WorkerError::KIND_CHILD_EXITED);
  CHECK(results[0].error->message() ==
        absl::StrCat("child 0 (pid ", pid, ", argv[0] '", kWorker,
                     "'): exited with exit code 3 before replying to req "
                     "'r7' (exit)"));
  absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(0);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kExited);
  REQUIRE(status->exit_status.has_value());
  CHECK(status->exit_status->exit_code == 3);
  CHECK_THAT(status->last_error, Catch::Contains("exited with exit code 3"));

  // Sent to the exited child: fails at once. After a restart it serves again.
  SendPayload step = Step(0);
  SendOrDie(supervisor, step);
  CHECK(absl::IsUnavailable(supervisor.Recv(false, kLongWait).status()));
  REQUIRE(supervisor.Restart(0).ok());
  step = Step(0);
  SendOrDie(supervisor, step);
  CHECK(RecvOrDie(supervisor).data.number_value() == 1);
}

TEST_CASE("A child that closes its channel but keeps running is killed") {
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, ChildKind::kProcess, {}, {"--close_channel"});
  AddChild(supervisor, ChildKind::kProcess);
  StartOrDie(supervisor);
  REQUIRE(supervisor.WaitRunning(0, kLongWait).ok());
  SendPayload step = Step(0);
  SendOrDie(supervisor, step);
  const std::vector<RecvPayload> results =
      RecvAllOrDie(supervisor, {step}, /*ignore_err=*/true);
  REQUIRE(!results[0].ok());
  CHECK(results[0].error->kind() == v1::WorkerError::KIND_CHILD_EXITED);
  CHECK_THAT(results[0].error->message(),
             Catch::Contains("was killed by the supervisor: it closed its "
                             "channel and was still running 100ms later"));
  const absl::StatusOr<ChildStatus> status = supervisor.GetChildStatus(0);
  REQUIRE(status.ok());
  CHECK(status->state == ChildState::kExited);
  REQUIRE(status->exit_status.has_value());
  CHECK(status->exit_status->signal == SIGKILL);
  // The other child was served all along.
  SendPayload other = Step(1);
  SendOrDie(supervisor, other);
  CHECK(RecvAllOrDie(supervisor, {other})[0].data.number_value() == 1);
}

TEST_CASE("Restart completes the pending requests of the old start") {
  const ChildKind kind = GENERATE(ChildKind::kProcess, ChildKind::kThread);
  INFO(KindName(kind) << " children");
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, kind);
  StartOrDie(supervisor);
  SendPayload block = Payload(0, "block");
  SendOrDie(supervisor, block);
  const Steady::time_point start = Steady::now();
  // A process sleeps through "_shutdown" and goes at SIGTERM; a thread's
  // sleep is cut short by the stop request.
  REQUIRE(supervisor.Restart(0, milliseconds(400)).ok());
  CHECK(ElapsedSeconds(start) < 5);
  const RecvPayload result = RecvOrDie(supervisor, /*ignore_err=*/true);
  CHECK(result.req_id == block.req_id);
  REQUIRE(!result.ok());
  CHECK(result.error->kind() == v1::WorkerError::KIND_CHILD_EXITED);
  CHECK_THAT(result.error->message(),
             Catch::Contains("was restarted") &&
                 Catch::Contains(absl::StrCat("before replying to req '",
                                              block.req_id, "' (block)")));
  SendPayload step = Step(0);
  SendOrDie(supervisor, step);
  CHECK(RecvOrDie(supervisor).data.number_value() == 1);
}

TEST_CASE("Shutdown kills a child that ignores SIGTERM after the timeout") {
  Supervisor supervisor(TestOptions());
  AddChild(supervisor, ChildKind::kProcess, {}, {"--ignore_sigterm"});
  AddChild(supervisor, ChildKind::kProcess);
  StartOrDie(supervisor);
  for (int i = 0; i < 2; ++i)
    REQUIRE(supervisor.WaitRunning(i, kLongWait).ok());
  const pid_t stubborn = supervisor.GetChildStatus(0)->pid;
  const pid_t polite = supervisor.GetChildStatus(1)->pid;
  // Busy in a method, child 0 cannot read "_shutdown"; SIGTERM is ignored.
  SendPayload block = Payload(0, "block");
  SendOrDie(supervisor, block);

  const Steady::time_point start = Steady::now();
  REQUIRE(supervisor.Shutdown(milliseconds(400)).ok());
  const double elapsed = ElapsedSeconds(start);
  CHECK(elapsed >= 0.39);
  CHECK(elapsed < 5);

  const absl::StatusOr<ChildStatus> killed = supervisor.GetChildStatus(0);
  REQUIRE(killed.ok());
  CHECK(killed->state == ChildState::kExited);
  REQUIRE(killed->exit_status.has_value());
  CHECK(killed->exit_status->signal == SIGKILL);
  CHECK_THAT(killed->last_error,
             Catch::Contains("was shut down (ignored _shutdown and SIGTERM "
                             "for 400ms, so SIGKILL; killed by SIGKILL)"));
  // The idle child followed "_shutdown".
  const absl::StatusOr<ChildStatus> stopped = supervisor.GetChildStatus(1);
  REQUIRE(stopped.ok());
  CHECK(stopped->state == ChildState::kExited);
  CHECK(stopped->last_error.empty());
  REQUIRE(stopped->exit_status.has_value());
  CHECK(stopped->exit_status->ok());
  // Both are reaped: their pids are gone.
  CHECK(kill(stubborn, 0) != 0);
  CHECK(kill(polite, 0) != 0);
}

// ---------------------------------------------------------------------------
// The worker channel on its own.

struct ChannelPair {
  std::unique_ptr<WorkerChannel> channel;
  int peer;
};

ChannelPair MakePair() {
  auto pair = WorkerChannel::CreatePair();
  REQUIRE(pair.ok());
  return {std::move(pair->first), pair->second};
}

TEST_CASE("WorkerChannel carries frames larger than the socket buffer") {
  ChannelPair pair = MakePair();
  WorkerChannel peer(pair.peer);
  v1::WorkerReply big;
  big.set_req_id("big");
  big.mutable_data()->set_string_value(std::string(8 << 20, 'x'));
  v1::WorkerReply small;
  small.set_req_id("small");

  // The writer blocks on a full buffer until the reader catches up.
  absl::Status written;
  std::thread writer([&] {
    written = peer.Write(big, Steady::now() + kLongWait);
    if (written.ok()) written = peer.Write(small, Steady::now() + kLongWait);
  });
  v1::WorkerReply got;
  const absl::Status first =
      pair.channel->Read(&got, Steady::now() + kLongWait);
  const bool big_ok = first.ok() && got.req_id() == "big" &&
                      got.data().string_value() == big.data().string_value();
  const absl::Status second =
      pair.channel->Read(&got, Steady::now() + kLongWait);
  writer.join();
  CHECK(written.ok());
  CHECK(big_ok);
  CHECK(second.ok());
  CHECK(got.req_id() == "small");
}

TEST_CASE("WorkerChannel reports ends, cut frames, garbage and deadlines") {
  SECTION("a clean end of stream") {
    ChannelPair pair = MakePair();
    close(pair.peer);
    v1::WorkerReply got;
    CHECK(absl::IsOutOfRange(
        pair.channel->Read(&got, Steady::now() + kLongWait)));
  }
  SECTION("a frame cut short is discarded, not waited for") {
    ChannelPair pair = MakePair();
    // Announces 100 bytes, sends 10, then ends.
    const char partial[14] = {100, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    REQUIRE(write(pair.peer, partial, sizeof(partial)) == sizeof(partial));
    close(pair.peer);
    v1::WorkerReply got;
    const absl::Status status =
        pair.channel->Read(&got, Steady::now() + kLongWait);
    CHECK(absl::IsDataLoss(status));
    CHECK_THAT(std::string(status.message()),
               Catch::Contains("ended inside a frame"));
    CHECK(pair.channel->peer_closed());
    CHECK(pair.channel->partial_bytes() == 14);
  }
  SECTION("an oversized length is refused without allocating it") {
    ChannelPair pair = MakePair();
    const unsigned char huge[4] = {0xff, 0xff, 0xff, 0x7f};
    REQUIRE(write(pair.peer, huge, sizeof(huge)) == sizeof(huge));
    v1::WorkerReply got;
    const absl::Status status =
        pair.channel->Read(&got, Steady::now() + kLongWait);
    CHECK(absl::IsDataLoss(status));
    CHECK_THAT(std::string(status.message()),
               Catch::Contains("over the limit"));
    close(pair.peer);
  }
  SECTION("a read waits until its deadline, then keeps a partial frame") {
    ChannelPair pair = MakePair();
    const char header[2] = {5, 0};
    REQUIRE(write(pair.peer, header, sizeof(header)) == sizeof(header));
    v1::WorkerReply got;
    const Steady::time_point start = Steady::now();
    CHECK(absl::IsDeadlineExceeded(
        pair.channel->Read(&got, Steady::now() + milliseconds(50))));
    CHECK(ElapsedSeconds(start) >= 0.049);
    CHECK(pair.channel->partial_bytes() == 2);
    // The rest arrives: the frame is whole.
    v1::WorkerReply reply;
    reply.set_req_id("abc");  // 5 bytes serialized: tag, length, "abc"
    std::string bytes = reply.SerializeAsString();
    REQUIRE(bytes.size() == 5);
    const char rest[2] = {0, 0};
    REQUIRE(write(pair.peer, rest, sizeof(rest)) == sizeof(rest));
    REQUIRE(write(pair.peer, bytes.data(), bytes.size()) ==
            static_cast<ssize_t>(bytes.size()));
    REQUIRE(pair.channel->Read(&got, Steady::now() + kLongWait).ok());
    CHECK(got.req_id() == "abc");
    close(pair.peer);
  }
  SECTION("a write to a closed peer is UNAVAILABLE") {
    ChannelPair pair = MakePair();
    close(pair.peer);
    v1::WorkerRequest request;
    request.set_method("step");
    CHECK(absl::IsUnavailable(
        pair.channel->Write(request, Steady::now() + kLongWait)));
  }
  SECTION("a write the peer does not take times out; mid-frame it breaks") {
    ChannelPair pair = MakePair();
    v1::WorkerRequest request;
    request.mutable_args()->add_values()->set_string_value(
        std::string(16 << 20, 'x'));
    const Steady::time_point start = Steady::now();
    const absl::Status status =
        pair.channel->Write(request, Steady::now() + milliseconds(50));
    CHECK(absl::IsDeadlineExceeded(status));
    CHECK(ElapsedSeconds(start) >= 0.049);
    CHECK(pair.channel->broken());
    CHECK(absl::IsFailedPrecondition(
        pair.channel->Write(request, Steady::now() + kLongWait)));
    close(pair.peer);
  }
}

}  // namespace
}  // namespace aggregator
