// FanOut over real gRPC: fake learners on servers at 127.0.0.1:0, each
// answering at once or holding its call until released or cancelled. Every
// call's outcome in learner order, one request for all or one each, the
// call_path metadata, the per-call timeout, one_left (the silent learner and
// its cancel), the times read from the clock given, and the incoming call's
// deadline and cancellation passed on by a relay in between. Every wait has a
// deadline.
#include "lib/learners/fan_out.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/clock.h"
#include "proto/learner.grpc.pb.h"
#include "proto/learner_names.h"
#include "tests/testing/monitor.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using std::chrono::milliseconds;
using Calls = LearnerCalls<pb::LearnRequest, pb::LearnReply>;

constexpr std::chrono::seconds kDeadline(15);

using testing::Monitor;

// A learner whose Learn answers "<name>:<plan_id>" at once, or, holding,
// when Release() is called or the call is cancelled (CANCELLED).
class FakeLearner : public pb::Learner::CallbackService {
 public:
  FakeLearner(std::string name, bool hold) : name_(std::move(name)) {
    holding_ = hold;
  }

  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const pb::LearnRequest* request,
                                  pb::LearnReply* reply) override {
    reply->set_task_id(name_ + ":" + request->plan_id());
    auto* reactor = new Held(this);
    bool hold = false;
    monitor.Change([&] {
      ++received;
      const auto path = context->client_metadata().find(kCallPathKey);
      if (path != context->client_metadata().end()) {
        call_path = std::string(path->second.data(), path->second.size());
      }
      hold = holding_;
      if (hold) held_.push_back(reactor);
    });
    if (!hold) reactor->End(grpc::Status::OK);
    return reactor;
  }

  // Answers the held calls. Under the monitor's lock, as OnCancel ends a
  // call: a reactor is in held_ until one of them has ended it.
  void Release() {
    monitor.Change([&] {
      for (Held* reactor : held_) reactor->End(grpc::Status::OK);
      held_.clear();
    });
  }

  Monitor monitor;
  int received = 0;       // by the monitor
  int cancelled = 0;      // by the monitor: calls the caller cancelled
  std::string call_path;  // by the monitor: the last call's

 private:
  class Held : public grpc::ServerUnaryReactor {
   public:
    explicit Held(FakeLearner* learner) : learner_(learner) {}
    void End(const grpc::Status& status) {
      if (!ended_.exchange(true)) Finish(status);
    }
    void OnCancel() override {
      learner_->monitor.Change([this] {
        ++learner_->cancelled;
        auto& held = learner_->held_;
        held.erase(std::remove(held.begin(), held.end(), this), held.end());
        End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      });
    }
    void OnDone() override { delete this; }

   private:
    FakeLearner* const learner_;
    std::atomic<bool> ended_{false};
  };

  const std::string name_;
  bool holding_ = false;     // fixed before serving
  std::vector<Held*> held_;  // by the monitor
};

// A service on its own server at 127.0.0.1:0.
struct Server {
  explicit Server(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
  }
  ~Server() { server->Shutdown(std::chrono::system_clock::now() + kDeadline); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Fake learners on their own servers, and the handles the pool would give.
struct Learners {
  // One learner per entry: whether it holds its calls.
  explicit Learners(const std::vector<bool>& hold) {
    for (size_t i = 0; i < hold.size(); ++i) {
      fakes.push_back(
          std::make_unique<FakeLearner>("l" + std::to_string(i), hold[i]));
      servers.push_back(std::make_unique<Server>(fakes.back().get()));
      LearnerHandle handle;
      handle.id = "l" + std::to_string(i);
      handle.address = HostPort::Tcp("127.0.0.1", servers.back()->port);
      auto channel = grpc::CreateChannel(handle.address.ToString(),
                                         grpc::InsecureChannelCredentials());
      // Connected before any timed call: no connection set-up in its time.
      REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        kDeadline));
      handle.stub = pb::Learner::NewStub(channel);
      handles.push_back(std::move(handle));
    }
  }
  ~Learners() { Release(); }
  void Release() {
    for (auto& fake : fakes) fake->Release();
  }
  std::vector<std::unique_ptr<FakeLearner>> fakes;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<LearnerHandle> handles;
};

void StartLearn(const LearnerHandle& learner, grpc::ClientContext* context,
                const pb::LearnRequest* request, pb::LearnReply* reply,
                std::function<void(grpc::Status)> done) {
  learner.stub->async()->Learn(context, request, reply, std::move(done));
}

pb::LearnRequest Plan(const std::string& plan_id) {
  pb::LearnRequest request;
  request.set_plan_id(plan_id);
  return request;
}

// What a fan-out's done saw.
struct Outcome {
  Monitor monitor;
  int done_runs = 0;                   // by the monitor
  std::vector<grpc::Status> statuses;  // by the monitor
  std::vector<std::string> answers;    // by the monitor
  std::vector<Clock::TimePoint> started, finished;
  std::function<void(Calls&)> Done() {
    return [this](Calls& calls) {
      monitor.Change([&] {
        ++done_runs;
        for (auto& call : calls) {
          statuses.push_back(call.status);
          answers.push_back(call.reply.task_id());
          started.push_back(call.started);
          finished.push_back(call.finished);
        }
      });
    };
  }
  bool Await() {
    return monitor.Await([this] { return done_runs > 0; });
  }
};

TEST_CASE(
    "Every learner answers: done runs once with each call's outcome in "
    "learner order; one request for all, or one each; call_path carried") {
  Learners learners({false, false, false});
  {
    Outcome outcome;
    FanOut<pb::LearnRequest, pb::LearnReply>(
        nullptr, milliseconds(kDeadline), "agg-a,agg-b", learners.handles,
        {Plan("p")}, &StartLearn, outcome.Done());
    REQUIRE(outcome.Await());
    CHECK(outcome.answers == std::vector<std::string>{"l0:p", "l1:p", "l2:p"});
    for (const auto& status : outcome.statuses) CHECK(status.ok());
  }
  {
    Outcome outcome;
    FanOut<pb::LearnRequest, pb::LearnReply>(
        nullptr, milliseconds(kDeadline), "", learners.handles,
        {Plan("x"), Plan("y"), Plan("z")}, &StartLearn, outcome.Done());
    REQUIRE(outcome.Await());
    CHECK(outcome.answers == std::vector<std::string>{"l0:x", "l1:y", "l2:z"});
    CHECK(outcome.done_runs == 1);
  }
  for (auto& fake : learners.fakes) {
    CHECK(fake->monitor.Read<int>([&] { return fake->received; }) == 2);
    // The first fan-out's path; the second carried none.
    CHECK(fake->monitor.Read<std::string>([&] { return fake->call_path; }) ==
          "agg-a,agg-b");
  }
}

TEST_CASE("No learners: done runs at once with no calls") {
  Outcome outcome;
  FanOut<pb::LearnRequest, pb::LearnReply>(nullptr, milliseconds(10), "", {},
                                           {Plan("p")}, &StartLearn,
                                           outcome.Done());
  CHECK(outcome.done_runs == 1);
  CHECK(outcome.statuses.empty());
}

TEST_CASE(
    "A learner that does not answer within the timeout fails "
    "DEADLINE_EXCEEDED; the others' answers stand") {
  Learners learners({false, true});
  Outcome outcome;
  const auto start = std::chrono::steady_clock::now();
  FanOut<pb::LearnRequest, pb::LearnReply>(nullptr, milliseconds(1000), "",
                                           learners.handles, {Plan("p")},
                                           &StartLearn, outcome.Done());
  REQUIRE(outcome.Await());
  // Not before its timeout (a few ms of slack: the deadline is on the system
  // clock, gRPC's timers have their own).
  CHECK(std::chrono::steady_clock::now() - start >= milliseconds(990));
  REQUIRE(outcome.statuses.size() == 2);
  CHECK(outcome.statuses[0].ok());
  CHECK(outcome.answers[0] == "l0:p");
  CHECK(outcome.statuses[1].error_code() ==
        grpc::StatusCode::DEADLINE_EXCEEDED);
  // If the call reached the learner before its deadline, it is cancelled
  // there too.
  FakeLearner& held = *learners.fakes[1];
  CHECK(held.monitor.Await([&] { return held.cancelled == held.received; }));
}

TEST_CASE(
    "one_left names the silent learner once the others answered; its cancel "
    "ends that call CANCELLED; times come from the clock given") {
  Learners learners({false, true, false});
  FakeClock clock;
  const Clock::TimePoint start = clock.Now();
  Outcome outcome;
  Monitor left;
  int left_calls = 0;
  size_t silent = 99;
  std::function<void()> cancel;
  FanOut<pb::LearnRequest, pb::LearnReply>(
      nullptr, milliseconds(kDeadline), "", learners.handles, {Plan("p")},
      &StartLearn, outcome.Done(),
      [&](size_t index, std::function<void()> cancel_it) {
        left.Change([&] {
          ++left_calls;
          silent = index;
          cancel = std::move(cancel_it);
        });
      },
      &clock);
  REQUIRE(left.Await([&] { return left_calls > 0; }));
  CHECK(silent == 1);
  CHECK(outcome.monitor.Read<int>([&] { return outcome.done_runs; }) == 0);
  // The silent learner has the call (else the cancel never reaches it).
  FakeLearner& held = *learners.fakes[1];
  REQUIRE(held.monitor.Await([&] { return held.received == 1; }));
  // The answers so far were timed at `start`; the silent one is cancelled
  // 5 ms later.
  clock.Advance(milliseconds(5));
  std::function<void()> cancel_silent =
      left.Read<std::function<void()>>([&] { return cancel; });
  cancel_silent();
  REQUIRE(outcome.Await());
  CHECK(left_calls == 1);
  REQUIRE(outcome.statuses.size() == 3);
  CHECK(outcome.statuses[0].ok());
  CHECK(outcome.statuses[1].error_code() == grpc::StatusCode::CANCELLED);
  CHECK(outcome.statuses[2].ok());
  CHECK(outcome.started == std::vector<Clock::TimePoint>(3, start));
  CHECK(outcome.finished[0] == start);
  CHECK(outcome.finished[1] == start + milliseconds(5));
  CHECK(outcome.finished[2] == start);
  // The learner saw its call cancelled.
  CHECK(held.monitor.Await([&] { return held.cancelled == 1; }));
}

TEST_CASE("A fan-out to one learner has no one_left") {
  Learners learners({false});
  Outcome outcome;
  std::atomic<int> left_calls{0};
  FanOut<pb::LearnRequest, pb::LearnReply>(
      nullptr, milliseconds(kDeadline), "", learners.handles, {Plan("p")},
      &StartLearn, outcome.Done(),
      [&](size_t, std::function<void()>) { ++left_calls; });
  REQUIRE(outcome.Await());
  CHECK(left_calls == 0);
}

// A relay between a caller and the learners: its Learn fans out with its own
// call as the parent and a timeout of an hour, and reports the outcome.
class Relay : public pb::Learner::CallbackService {
 public:
  explicit Relay(std::vector<LearnerHandle> learners)
      : learners_(std::move(learners)) {}

  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const pb::LearnRequest* request,
                                  pb::LearnReply*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    FanOut<pb::LearnRequest, pb::LearnReply>(context, std::chrono::hours(1), "",
                                             learners_, {*request}, &StartLearn,
                                             [this, reactor](Calls& calls) {
                                               outcome.Done()(calls);
                                               // The first learner's failure,
                                               // as the service would answer.
                                               grpc::Status status;
                                               for (const auto& call : calls) {
                                                 if (!call.status.ok()) {
                                                   status = call.status;
                                                   break;
                                                 }
                                               }
                                               reactor->Finish(status);
                                             });
    return reactor;
  }

  Outcome outcome;

 private:
  const std::vector<LearnerHandle> learners_;
};

TEST_CASE(
    "The incoming call's deadline and cancellation reach the learners' calls") {
  SECTION("deadline") {
    Learners learners({false, true});
    Relay relay(learners.handles);
    Server server(&relay);
    // Held calls end before the relay's server waits for its own.
    struct ReleaseFirst {
      Learners& learners;
      ~ReleaseFirst() { learners.Release(); }
    } release_first{learners};
    auto stub = pb::Learner::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + milliseconds(1000));
    pb::LearnReply reply;
    // Its own deadline, or the relay's answer with the learner's status when
    // the learner's copy of the deadline fired first.
    const grpc::StatusCode code =
        stub->Learn(&context, Plan("p"), &reply).error_code();
    CHECK((code == grpc::StatusCode::DEADLINE_EXCEEDED ||
           code == grpc::StatusCode::CANCELLED));
    REQUIRE(relay.outcome.Await());
    const auto statuses = relay.outcome.monitor.Read<std::vector<grpc::Status>>(
        [&] { return relay.outcome.statuses; });
    CHECK(statuses[0].ok());
    // Ended by the caller's deadline, not the relay's hour.
    CHECK((statuses[1].error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
           statuses[1].error_code() == grpc::StatusCode::CANCELLED));
    // If the call reached the learner in time, it is cancelled there too.
    FakeLearner& held = *learners.fakes[1];
    CHECK(held.monitor.Await([&] { return held.cancelled == held.received; }));
  }
  SECTION("cancellation") {
    Learners learners({true, true});
    Relay relay(learners.handles);
    Server server(&relay);
    // Held calls end before the relay's server waits for its own.
    struct ReleaseFirst {
      Learners& learners;
      ~ReleaseFirst() { learners.Release(); }
    } release_first{learners};
    auto stub = pb::Learner::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kDeadline);
    const pb::LearnRequest request = Plan("p");
    pb::LearnReply reply;
    Monitor answered;
    bool over = false;
    grpc::Status status;
    stub->async()->Learn(&context, &request, &reply, [&](grpc::Status s) {
      answered.Change([&] {
        status = std::move(s);
        over = true;
      });
    });
    // Both learners hold their calls; the caller gives up.
    for (auto& fake : learners.fakes) {
      REQUIRE(fake->monitor.Await([&] { return fake->received == 1; }));
    }
    context.TryCancel();
    REQUIRE(answered.Await([&] { return over; }));
    CHECK(answered.Read<grpc::StatusCode>([&] {
      return status.error_code();
    }) == grpc::StatusCode::CANCELLED);
    REQUIRE(relay.outcome.Await());
    const auto statuses = relay.outcome.monitor.Read<std::vector<grpc::Status>>(
        [&] { return relay.outcome.statuses; });
    REQUIRE(statuses.size() == 2);
    for (const auto& learner_status : statuses) {
      CHECK(learner_status.error_code() == grpc::StatusCode::CANCELLED);
    }
    for (auto& fake : learners.fakes) {
      CHECK(fake->monitor.Await([&] { return fake->cancelled == 1; }));
    }
  }
}

}  // namespace
}  // namespace aggregator
