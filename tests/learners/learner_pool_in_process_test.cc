// LearnerPool with fake learners in this process (tests/testing/
// in_process_learners.h) and its time on a fake clock: readiness, removal,
// connect.timeout and backoff, each checked at the exact time on the clock and
// a moment before. The fakes listen on unix sockets in a fresh directory (the
// pool watches its channels' connectivity, which gRPC does not allow on an
// in-process channel): no port, nothing another test can take. Nothing sleeps;
// the tests wait on conditions with real deadlines.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "lib/learners/learner_pool.h"
#include "tests/testing/in_process_learners.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/watched_clock.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using testing::Eventually;
using testing::FakeLearner;
using testing::InProcessLearner;
using testing::WatchedClock;

// A real-time bound for what happens at once in this process, with room for
// a loaded machine under TSan.
constexpr milliseconds kRealWait(10000);

ConnectConfig HourlyConnect() {
  ConnectConfig connect;
  connect.timeout = minutes(30);
  connect.attempt_timeout = std::chrono::seconds(10);
  connect.backoff = BackoffOptions{hours(1), 2.0, 0.0, hours(4)};
  connect.resource_refresh = hours(10);
  return connect;
}

// A directory for the sockets, short enough for a unix socket's path (108
// bytes; $TEST_TMPDIR may be longer).
std::string SocketDir() {
  char pattern[] = "/tmp/pool-XXXXXX";
  REQUIRE(mkdtemp(pattern) != nullptr);
  return pattern;
}

struct Pool {
  WatchedClock clock;  // first: outlives the pool
  const std::string dir = SocketDir();
  std::unique_ptr<LearnerPool> pool;

  Pool() {
    LearnerPoolHooks hooks;
    hooks.clock = &clock;
    pool = std::make_unique<LearnerPool>(HourlyConnect(), int64_t{1} << 20,
                                         std::move(hooks));
  }
  ~Pool() {
    pool.reset();
    std::error_code ignored;  // a socket left behind is only litter in /tmp
    std::filesystem::remove_all(dir, ignored);
  }
  std::string Socket(const std::string& id) const {
    return dir + "/" + id + ".sock";
  }
  LearnerEndpoint Endpoint(const std::string& id) const {
    return LearnerEndpoint{id, HostPort::Unix(Socket(id))};
  }
  LearnerSnapshot Only() const {
    const std::vector<LearnerSnapshot> status = pool->Status();
    REQUIRE(status.size() == 1);
    return status[0];
  }
  bool ReadyNow() const {
    return pool->WaitForReady(1, std::chrono::steady_clock::now() + kRealWait);
  }
  // Waits until its attempt `n` has failed (its last error says so).
  bool FailedAttempt(int n) const {
    const std::string tail = "(attempt " + std::to_string(n) + ")";
    return Eventually(
        [&] {
          const std::string error = Only().last_error;
          return error.size() >= tail.size() &&
                 error.compare(error.size() - tail.size(), tail.size(), tail) ==
                     0;
        },
        kRealWait);
  }
  // Moves the clock and waits until the connector has looked at the new time
  // (it is the clock's only waiter).
  bool Advance(Clock::Duration delta) {
    return clock.AdvanceAndSettle(delta, std::nullopt, kRealWait);
  }
};

// How many times so far this process's one thread named `name` gave up the
// CPU to wait (voluntary_ctxt_switches in /proc/self/task/<tid>/status);
// nullopt when no thread, or more than one, has that name.
std::optional<long> ThreadWaits(const std::string& name) {
  std::optional<long> waits;
  int found = 0;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (!std::getline(comm, line) || line != name) continue;
    ++found;
    std::ifstream status(task.path() / "status");
    const std::string key = "voluntary_ctxt_switches:";
    while (std::getline(status, line)) {
      if (line.compare(0, key.size(), key) == 0) {
        waits = std::stol(line.substr(key.size()));
      }
    }
  }
  if (found != 1) return std::nullopt;
  return waits;
}

TEST_CASE(
    "Pool, in process: calls through a ready learner's handle do not wake the "
    "connector thread (it waits outside gRPC's pollers)") {
  Pool pool;
  InProcessLearner fake(FakeLearner::Options{1, 1}, pool.Socket("l0"));
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.ReadyNow());
  const LearnerHandle learner = pool.pool->Ready().at(0);
  const std::optional<long> before = ThreadWaits(kConnectorThreadName);
  REQUIRE(before.has_value());
  constexpr int kCalls = 300;
  for (int i = 0; i < kCalls; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kRealWait);
    pb::DataDemand demand;
    REQUIRE(learner.stub->GetData(&context, {}, &demand).ok());
  }
  const std::optional<long> after = ThreadWaits(kConnectorThreadName);
  REQUIRE(after.has_value());
  // It wakes for its own timers (about once a second) and watches (every 2
  // s). A thread waiting in a gRPC completion queue takes turns at polling
  // for every call in the process, the 300 calls here included.
  CHECK(*after - *before < kCalls / 10);
}

TEST_CASE(
    "Pool, in process: a fake learner becomes ready with the resources it "
    "reported, and a call through its handle reaches it") {
  Pool pool;
  InProcessLearner fake(FakeLearner::Options{3, 7}, pool.Socket("l0"));
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.ReadyNow());
  const std::vector<LearnerHandle> ready = pool.pool->Ready();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].id == "l0");
  CHECK(ready[0].resource.gpus() == 3);
  CHECK(fake.learner().calls("GetResource") == 1);
  CHECK(pool.Only().last_error.empty());

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRealWait);
  pb::DataDemand demand;
  REQUIRE(ready[0].stub->GetData(&context, {}, &demand).ok());
  CHECK(demand.batch_size() == 7);
}

TEST_CASE(
    "Pool, in process: a learner dropped from the set stops being ready at "
    "once, and its plans' Current names it; a handle taken before still "
    "calls it") {
  Pool pool;
  InProcessLearner fake(FakeLearner::Options{1, 5}, pool.Socket("l0"));
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.ReadyNow());
  const LearnerHandle handle = pool.pool->Ready().at(0);
  REQUIRE(pool.pool->Current("l0", handle.epoch).ok());

  pool.pool->SetLearners({});
  CHECK(pool.pool->Ready().empty());
  CHECK(pool.pool->size() == 0);
  const auto current = pool.pool->Current("l0", handle.epoch);
  CHECK(current.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(current.status().message() == "l0 is no longer a configured learner");

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRealWait);
  pb::DataDemand demand;
  CHECK(handle.stub->GetData(&context, {}, &demand).ok());
}

TEST_CASE(
    "Pool, in process: an address nobody answers turns failed exactly when "
    "connect.timeout passes on the pool's clock, not a millisecond before") {
  Pool pool;
  pool.pool->SetLearners({pool.Endpoint("nobody")});
  REQUIRE(pool.FailedAttempt(1));
  CHECK_THAT(pool.Only().last_error, Catch::StartsWith("connection failed: "));

  REQUIRE(pool.Advance(minutes(30) - milliseconds(1)));
  CHECK(pool.Only().state == LearnerState::kConnecting);
  REQUIRE(pool.Advance(milliseconds(1)));
  CHECK(pool.Only().state == LearnerState::kFailed);
  CHECK(pool.FailedAttempt(1));  // its retry is an hour off
}

TEST_CASE(
    "Pool, in process: a retry is made only once its backoff delay has passed "
    "on the pool's clock; a learner that came up meanwhile is not asked a "
    "millisecond before, and is ready after") {
  Pool pool;
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.FailedAttempt(1));
  InProcessLearner fake(FakeLearner::Options{}, pool.Socket("l0"));

  // An attempt started at the new time would have set its deadline
  // (connect.attempt_timeout) from it, for the connector to look at.
  REQUIRE(pool.Advance(hours(1) - milliseconds(1)));
  CHECK(pool.clock.Looks(pool.clock.Now() + HourlyConnect().attempt_timeout) ==
        0);
  CHECK(fake.learner().calls("GetResource") == 0);
  CHECK(pool.pool->Ready().empty());

  pool.clock.Advance(milliseconds(1));
  REQUIRE(pool.ReadyNow());
  CHECK(fake.learner().calls("GetResource") == 1);
  CHECK(pool.Only().state == LearnerState::kReady);
}

TEST_CASE(
    "Pool, in process: a learner whose GetResource fails is not ready, the "
    "pool says why, and it is ready at the retry once it answers") {
  Pool pool;
  InProcessLearner fake(FakeLearner::Options{}, pool.Socket("l0"));
  fake.learner().Fail("GetResource",
                      grpc::Status(grpc::StatusCode::INTERNAL, "warming up"));
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.FailedAttempt(1));
  CHECK(pool.Only().last_error ==
        "connected, but GetResource failed: INTERNAL: warming up (attempt 1)");
  CHECK(pool.Only().state == LearnerState::kConnecting);
  CHECK(pool.pool->Ready().empty());

  fake.learner().Answer("GetResource");
  pool.clock.Advance(hours(1));
  REQUIRE(pool.ReadyNow());
  CHECK(fake.learner().calls("GetResource") == 2);
}

TEST_CASE(
    "Pool, in process: a learner that stops serving is no longer ready, and "
    "is tried again at once") {
  Pool pool;
  InProcessLearner fake(FakeLearner::Options{}, pool.Socket("l0"));
  pool.pool->SetLearners({pool.Endpoint("l0")});
  REQUIRE(pool.ReadyNow());
  fake.Shutdown();
  REQUIRE(Eventually([&] { return pool.pool->Ready().empty(); }, kRealWait));
  // Its reconnection starts without a clock move, and fails: nobody serves.
  REQUIRE(pool.FailedAttempt(1));
  CHECK(pool.Only().state == LearnerState::kConnecting);
}

}  // namespace
}  // namespace aggregator
