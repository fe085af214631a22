// The worker side of a supervised child: a WorkerObject's names, how Handle
// answers methods and attributes (errors and exceptions included), SleepFor
// cut short by RequestStop, init and its handshake reply, and the serving
// loops over a real channel pair until "_shutdown" or the end of the stream.
// Every wait has a deadline.
#include "lib/supervisor/worker_runtime.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace aggregator {
namespace {

using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

constexpr seconds kDeadline(15);

v1::WorkerRequest Request(const std::string& id, const std::string& method,
                          WorkerArgs args = {}) {
  v1::WorkerRequest request;
  request.set_req_id(id);
  request.set_method(method);
  *request.mutable_args() = std::move(args);
  return request;
}

// An object with a method "add", a failing one, two throwing ones, a fixed
// attribute and a computed one.
std::unique_ptr<WorkerObject> Calculator(int* reads) {
  auto object = std::make_unique<WorkerObject>();
  REQUIRE(object
              ->AddMethod(
                  "add",
                  [](const WorkerArgs& args) -> absl::StatusOr<WorkerValue> {
                    double sum = 0;
                    for (const auto& v : args.values()) {
                      sum += v.number_value();
                    }
                    return NumberValue(sum);
                  })
              .ok());
  REQUIRE(object
              ->AddMethod("fail",
                          [](const WorkerArgs&) -> absl::StatusOr<WorkerValue> {
                            return absl::FailedPreconditionError("no task");
                          })
              .ok());
  REQUIRE(object
              ->AddMethod("throw",
                          [](const WorkerArgs&) -> absl::StatusOr<WorkerValue> {
                            throw std::runtime_error("boom");
                          })
              .ok());
  REQUIRE(object
              ->AddMethod("throw_int",
                          [](const WorkerArgs&) -> absl::StatusOr<WorkerValue> {
                            throw 7;
                          })
              .ok());
  REQUIRE(object->SetAttr("name", StringValue("calc")).ok());
  REQUIRE(
      object->AddAttr("reads", [reads] { return NumberValue(++*reads); }).ok());
  return object;
}

TEST_CASE("Names that are empty or start with '_' are reserved") {
  WorkerObject object;
  const absl::Status method = object.AddMethod("_shutdown", nullptr);
  CHECK(method.code() == absl::StatusCode::kInvalidArgument);
  CHECK(method.message() ==
        "worker method name '_shutdown' is empty or starts with '_' "
        "(reserved)");
  CHECK(object.SetAttr("", NullValue()).message() ==
        "worker attribute name '' is empty or starts with '_' (reserved)");
  CHECK(object.AddAttr("_x", [] { return NullValue(); }).message() ==
        "worker attribute name '_x' is empty or starts with '_' (reserved)");
}

TEST_CASE(
    "Handle answers a method with its result, req_id and method copied; a "
    "later registration replaces it") {
  int reads = 0;
  auto object = Calculator(&reads);
  v1::WorkerReply reply;
  object->Handle(
      Request("7", "add", MakeArgs({NumberValue(2), NumberValue(3)})), &reply);
  CHECK(reply.req_id() == "7");
  CHECK(reply.method() == "add");
  CHECK_FALSE(reply.has_error());
  CHECK(reply.data().number_value() == 5);
  REQUIRE(object
              ->AddMethod("add",
                          [](const WorkerArgs&) -> absl::StatusOr<WorkerValue> {
                            return StringValue("replaced");
                          })
              .ok());
  object->Handle(Request("8", "add"), &reply);
  CHECK(reply.data().string_value() == "replaced");
}

TEST_CASE(
    "Handle's errors: a failed method, exceptions, an unknown method; the "
    "reply holds no stale data") {
  int reads = 0;
  auto object = Calculator(&reads);
  v1::WorkerReply reply;
  object->Handle(Request("1", "add", MakeArgs({NumberValue(1)})), &reply);
  REQUIRE(reply.has_data());
  object->Handle(Request("2", "fail"), &reply);
  CHECK(reply.req_id() == "2");
  CHECK_FALSE(reply.has_data());
  CHECK(reply.error().kind() == v1::WorkerError::KIND_FAILED);
  CHECK(reply.error().message() == "no task");
  object->Handle(Request("3", "throw"), &reply);
  CHECK(reply.error().kind() == v1::WorkerError::KIND_FAILED);
  CHECK(reply.error().message() == "exception: boom");
  object->Handle(Request("4", "throw_int"), &reply);
  CHECK(reply.error().message() == "an exception of unknown type");
  object->Handle(Request("5", "divide"), &reply);
  CHECK(reply.error().kind() == v1::WorkerError::KIND_NO_SUCH_METHOD);
  CHECK(reply.error().message() == "no method 'divide'");
  // A good answer after errors carries no error.
  object->Handle(Request("6", "add"), &reply);
  CHECK_FALSE(reply.has_error());
}

TEST_CASE(
    "_getattr reads a fixed attribute, calls a computed one at each read, "
    "and names what is missing") {
  int reads = 0;
  auto object = Calculator(&reads);
  v1::WorkerReply reply;
  object->Handle(Request("1", kGetAttrMethod, MakeArgs({StringValue("name")})),
                 &reply);
  CHECK(reply.data().string_value() == "calc");
  object->Handle(Request("2", kGetAttrMethod, MakeArgs({StringValue("reads")})),
                 &reply);
  object->Handle(Request("3", kGetAttrMethod, MakeArgs({StringValue("reads")})),
                 &reply);
  CHECK(reply.data().number_value() == 2);
  object->Handle(Request("4", kGetAttrMethod, MakeArgs({StringValue("size")})),
                 &reply);
  CHECK(reply.error().kind() == v1::WorkerError::KIND_NO_SUCH_ATTRIBUTE);
  CHECK(reply.error().message() == "no attribute 'size'");
  for (const WorkerArgs& bad : {MakeArgs({}), MakeArgs({NumberValue(1)})}) {
    object->Handle(Request("5", kGetAttrMethod, bad), &reply);
    CHECK(reply.error().kind() == v1::WorkerError::KIND_FAILED);
    CHECK(reply.error().message() ==
          "_getattr needs the attribute name as its first argument");
  }
}

TEST_CASE(
    "SleepFor sleeps its time unless a stop is requested, from any thread") {
  WorkerObject object;
  CHECK(object.SleepFor(std::chrono::milliseconds(10)));
  auto sleeping = std::async(std::launch::async, [&object] {
    return object.SleepFor(std::chrono::hours(1));
  });
  CHECK_FALSE(object.stop_requested());
  object.RequestStop();
  REQUIRE(sleeping.wait_for(kDeadline) == std::future_status::ready);
  CHECK_FALSE(sleeping.get());
  CHECK(object.stop_requested());
  // Stopped: no sleep at all.
  const auto start = Steady::now();
  CHECK_FALSE(object.SleepFor(std::chrono::hours(1)));
  CHECK(Steady::now() - start < kDeadline);
}

TEST_CASE(
    "Init: an error passes, an exception or no object becomes one; the "
    "handshake reply says which") {
  auto ok = RunWorkerInit([] { return std::make_unique<WorkerObject>(); });
  CHECK(ok.ok());
  auto failed =
      RunWorkerInit([]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
        return absl::UnavailableError("no GPU");
      });
  CHECK(failed.status() == absl::UnavailableError("no GPU"));
  auto threw =
      RunWorkerInit([]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
        throw std::runtime_error("bad config");
      });
  CHECK(threw.status() == absl::InternalError("init threw: bad config"));
  auto none =
      RunWorkerInit([]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
        return std::unique_ptr<WorkerObject>();
      });
  CHECK(none.status() == absl::InternalError("init returned no object"));

  const v1::WorkerReply good = InitReply(absl::OkStatus());
  CHECK(good.method() == kInitMethod);
  CHECK(good.req_id().empty());
  CHECK_FALSE(good.has_error());
  const v1::WorkerReply bad = InitReply(absl::UnavailableError("no GPU"));
  CHECK(bad.method() == kInitMethod);
  CHECK(bad.error().kind() == v1::WorkerError::KIND_INIT_FAILED);
  CHECK(bad.error().message() == "UNAVAILABLE: no GPU");
}

// The supervisor's end of a channel pair whose other end `serve` uses.
struct Channels {
  Channels() {
    auto pair = WorkerChannel::CreatePair();
    REQUIRE(pair.ok());
    supervisor = std::move(pair->first);
    child_fd = pair->second;
  }
  v1::WorkerReply Call(const v1::WorkerRequest& request) {
    REQUIRE(supervisor->Write(request, Steady::now() + kDeadline).ok());
    v1::WorkerReply reply;
    REQUIRE(supervisor->Read(&reply, Steady::now() + kDeadline).ok());
    return reply;
  }
  std::unique_ptr<WorkerChannel> supervisor;
  int child_fd = -1;
};

TEST_CASE(
    "ServeWorker answers requests in order until _shutdown, which is not "
    "answered, or the end of the stream") {
  SECTION("_shutdown") {
    Channels channels;
    int reads = 0;
    auto object = Calculator(&reads);
    auto child = std::make_unique<WorkerChannel>(channels.child_fd);
    auto serving = std::async(std::launch::async,
                              [&] { return ServeWorker(*object, *child); });
    const v1::WorkerReply sum = channels.Call(
        Request("a", "add", MakeArgs({NumberValue(1), NumberValue(2)})));
    CHECK(sum.req_id() == "a");
    CHECK(sum.data().number_value() == 3);
    CHECK(channels.Call(Request("b", "nothing")).error().kind() ==
          v1::WorkerError::KIND_NO_SUCH_METHOD);
    REQUIRE(
        channels.supervisor
            ->Write(Request("c", kShutdownMethod), Steady::now() + kDeadline)
            .ok());
    REQUIRE(serving.wait_for(kDeadline) == std::future_status::ready);
    CHECK(serving.get().ok());
    // Not answered: once the child's end is closed the stream just ends.
    child.reset();
    v1::WorkerReply after;
    CHECK(absl::IsOutOfRange(
        channels.supervisor->Read(&after, Steady::now() + kDeadline)));
  }
  SECTION("end of the stream") {
    Channels channels;
    WorkerObject object;
    WorkerChannel child(channels.child_fd);
    auto serving = std::async(std::launch::async,
                              [&] { return ServeWorker(object, child); });
    channels.supervisor.reset();
    REQUIRE(serving.wait_for(kDeadline) == std::future_status::ready);
    CHECK(serving.get().ok());
  }
}

TEST_CASE(
    "RunWorkerProcess: its channel from AGGREGATOR_WORKER_FD, the handshake, "
    "serving, and its exit codes") {
  SECTION("no channel: 2") {
    unsetenv(kWorkerFdEnv);
    CHECK(RunWorkerProcess([] { return std::make_unique<WorkerObject>(); }) ==
          2);
    setenv(kWorkerFdEnv, "999", 1);
    CHECK(RunWorkerProcess([] { return std::make_unique<WorkerObject>(); }) ==
          2);
  }
  SECTION("served until _shutdown: 0") {
    Channels channels;
    setenv(kWorkerFdEnv, std::to_string(channels.child_fd).c_str(), 1);
    int reads = 0;
    auto running = std::async(std::launch::async, [&reads] {
      return RunWorkerProcess([&reads] { return Calculator(&reads); });
    });
    v1::WorkerReply handshake;
    REQUIRE(
        channels.supervisor->Read(&handshake, Steady::now() + kDeadline).ok());
    CHECK(handshake.method() == kInitMethod);
    CHECK_FALSE(handshake.has_error());
    CHECK(
        channels
            .Call(Request("1", kGetAttrMethod, MakeArgs({StringValue("name")})))
            .data()
            .string_value() == "calc");
    REQUIRE(
        channels.supervisor
            ->Write(Request("2", kShutdownMethod), Steady::now() + kDeadline)
            .ok());
    REQUIRE(running.wait_for(kDeadline) == std::future_status::ready);
    CHECK(running.get() == 0);
    // _shutdown is not answered: the stream ends.
    v1::WorkerReply after;
    CHECK(absl::IsOutOfRange(
        channels.supervisor->Read(&after, Steady::now() + kDeadline)));
  }
  SECTION("init failed: 1, after an INIT_FAILED handshake") {
    Channels channels;
    setenv(kWorkerFdEnv, std::to_string(channels.child_fd).c_str(), 1);
    auto running = std::async(std::launch::async, [] {
      return RunWorkerProcess(
          []() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
            return absl::UnavailableError("no GPU");
          });
    });
    v1::WorkerReply handshake;
    REQUIRE(
        channels.supervisor->Read(&handshake, Steady::now() + kDeadline).ok());
    CHECK(handshake.error().kind() == v1::WorkerError::KIND_INIT_FAILED);
    CHECK(handshake.error().message() == "UNAVAILABLE: no GPU");
    REQUIRE(running.wait_for(kDeadline) == std::future_status::ready);
    CHECK(running.get() == 1);
  }
  unsetenv(kWorkerFdEnv);
}

}  // namespace
}  // namespace aggregator
