// LearnerService without a network: fake learners in this process
// (tests/testing/in_process_learners.h) behind a FakeLearnerRoster, the
// service on a server with no listening port, called through its in-process
// channel, its time on a fake clock. Nothing sleeps: the tests wait on
// conditions (a call's answer, a fake's count, the clock's waiters) with real
// deadlines, and the clock moves only when a test moves it.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "lib/learners/failed_learners.h"
#include "lib/service/learner_service.h"
#include "tests/testing/in_process_learners.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/watched_clock.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using std::chrono::milliseconds;
using testing::FakeLearner;
using testing::FakeLearnerRoster;
using testing::WatchedClock;

// A real-time bound for what happens at once in this process, with room for
// a loaded machine under TSan; the tests take milliseconds.
constexpr milliseconds kRealWait(10000);

ServiceConfig Config(int min_learners) {
  ServiceConfig config;
  config.min_learners = min_learners;
  config.call_timeout = milliseconds(30000);  // real: never reached here
  // No late learner unless a test asks (the clock only moves when told to).
  config.straggler.late_after.mode = StragglerConfig::LateAfter::Mode::kOff;
  return config;
}

// A coordinator's view: the service over fake learners, called in-process.
struct Aggregator {
  WatchedClock clock;  // first: outlives the service
  FakeLearnerRoster learners;
  std::unique_ptr<LearnerService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::Learner::Stub> stub;

  void Start(const ServiceConfig& config) {
    LearnerServiceOptions options;
    options.clock = &clock;
    service = std::make_unique<LearnerService>(&learners, config, options);
    server = testing::ServeInProcess(service.get());
    grpc::ChannelArguments args;
    stub = pb::Learner::NewStub(server->InProcessChannel(args));
  }
  // As the daemon stops: held calls end, then the service waits until no
  // call is in flight (one counts out just after its caller has the answer)
  // before it goes.
  ~Aggregator() {
    learners.StopAll();
    service->StartDraining();
    CHECK(service->WaitIdle(std::chrono::steady_clock::now() + kRealWait));
    service->StopReplays();
    server->Shutdown();
  }
  // Adds learners "l0".."l<n-1>", ready, demanding `demands[i]` each.
  void AddReady(const std::vector<int64_t>& demands) {
    for (size_t i = 0; i < demands.size(); ++i) {
      const std::string id = "l" + std::to_string(i);
      learners.Add(id, FakeLearner::Options{1, demands[i]});
      learners.SetReady(id);
    }
  }
};

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + kRealWait);
  return context;
}

// A call in flight, answered on a gRPC thread.
template <typename Reply>
struct Pending {
  std::unique_ptr<grpc::ClientContext> context = Context();
  Reply reply;
  std::promise<grpc::Status> promise;
  std::future<grpc::Status> status = promise.get_future();

  std::function<void(grpc::Status)> Done() {
    return [this](grpc::Status s) { promise.set_value(std::move(s)); };
  }
  bool Answered(milliseconds within = milliseconds(0)) {
    return status.wait_for(within) == std::future_status::ready;
  }
};

pb::DataDemand GetData(Aggregator& aggregator) {
  pb::DataDemand demand;
  const grpc::Status status =
      aggregator.stub->GetData(Context().get(), {}, &demand);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return demand;
}

pb::LearnRequest Batch(int count) {
  pb::LearnRequest batch;
  for (int i = 0; i < count; ++i) {
    (*batch.add_samples()->mutable_meta()->mutable_fields())["replay_unique_id"]
        .set_string_value("s" + std::to_string(i));
  }
  return batch;
}

std::vector<std::string> Ids(int begin, int end) {
  std::vector<std::string> ids;
  for (int i = begin; i < end; ++i) ids.push_back("s" + std::to_string(i));
  return ids;
}

std::vector<std::string> Members(const pb::DataDemand& demand) {
  return {demand.membership().members().begin(),
          demand.membership().members().end()};
}

TEST_CASE(
    "In process: GetResource sums the ready learners' resources; one not "
    "ready is left out") {
  Aggregator aggregator;
  aggregator.learners.Add("l0", FakeLearner::Options{2, 8});
  aggregator.learners.Add("l1", FakeLearner::Options{3, 8});
  aggregator.learners.Add("l2", FakeLearner::Options{5, 8});
  aggregator.learners.SetReady("l0");
  aggregator.learners.SetReady("l1");
  aggregator.Start(Config(1));
  pb::Resource resource;
  const grpc::Status status =
      aggregator.stub->GetResource(Context().get(), {}, &resource);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(resource.gpus() == 5);
  CHECK(resource.learners() == 2);
  // Answered from what each reported as it became ready: no round trip.
  CHECK(aggregator.learners.learner("l0").calls("GetResource") == 0);
}

TEST_CASE(
    "In process: GetData sums the learners' demands into a plan over them, "
    "and Learn splits the batch by it and merges the infos in plan order") {
  Aggregator aggregator;
  aggregator.AddReady({3, 5});
  aggregator.Start(Config(2));

  const pb::DataDemand demand = GetData(aggregator);
  CHECK(demand.batch_size() == 8);
  CHECK_FALSE(demand.plan_id().empty());
  CHECK(Members(demand) == std::vector<std::string>{"l0", "l1"});

  pb::LearnRequest batch = Batch(8);
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status learned =
      aggregator.stub->Learn(Context().get(), batch, &reply);
  INFO(learned.error_message());
  REQUIRE(learned.ok());
  CHECK(aggregator.learners.learner("l0").learned() ==
        std::vector<std::vector<std::string>>{Ids(0, 3)});
  CHECK(aggregator.learners.learner("l1").learned() ==
        std::vector<std::vector<std::string>>{Ids(3, 8)});
  const auto& info = reply.info().fields();
  const auto& received = info.at("received").list_value();
  REQUIRE(received.values_size() == 2);
  CHECK(received.values(0).number_value() == 3);
  CHECK(received.values(1).number_value() == 5);
  std::vector<std::string> merged;
  for (const auto& id : info.at("priority_info")
                            .struct_value()
                            .fields()
                            .at("replay_unique_id")
                            .list_value()
                            .values()) {
    merged.push_back(id.string_value());
  }
  CHECK(merged == Ids(0, 8));
}

TEST_CASE(
    "In process: a LearnStream's samples, over several messages, reach each "
    "learner as its slice of the plan and are merged as Learn's") {
  Aggregator aggregator;
  aggregator.AddReady({3, 5});
  aggregator.Start(Config(2));
  const pb::DataDemand demand = GetData(aggregator);
  pb::LearnReply reply;
  auto context = Context();
  auto writer = aggregator.stub->LearnStream(context.get(), &reply);
  const pb::LearnRequest batch = Batch(8);
  pb::LearnRequest first;   // s0..s3, with the plan
  pb::LearnRequest second;  // s4..s7
  first.set_plan_id(demand.plan_id());
  for (int i = 0; i < 8; ++i) {
    *(i < 4 ? first : second).add_samples() = batch.samples(i);
  }
  REQUIRE(writer->Write(first));
  REQUIRE(writer->Write(second));
  REQUIRE(writer->WritesDone());
  const grpc::Status status = writer->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());
  // The fakes serve no LearnStream: each slice went whole, as one Learn.
  CHECK(aggregator.learners.learner("l0").learned() ==
        std::vector<std::vector<std::string>>{Ids(0, 3)});
  CHECK(aggregator.learners.learner("l1").learned() ==
        std::vector<std::vector<std::string>>{Ids(3, 8)});
  const auto& received = reply.info().fields().at("received").list_value();
  REQUIRE(received.values_size() == 2);
  CHECK(received.values(0).number_value() == 3);
  CHECK(received.values(1).number_value() == 5);
}

TEST_CASE(
    "In process: a Learn whose learner was removed since GetData fails "
    "naming it; the other learner is sent nothing") {
  Aggregator aggregator;
  aggregator.AddReady({4, 4});
  aggregator.Start(Config(1));
  const pb::DataDemand demand = GetData(aggregator);
  aggregator.learners.Remove("l1");
  pb::LearnRequest batch = Batch(8);
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status =
      aggregator.stub->Learn(Context().get(), batch, &reply);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(),
             Catch::Contains("l1 is no longer a configured learner"));
  const pb::FailedLearners failed = ReadFailedLearners(status);
  REQUIRE(failed.learners_size() == 1);
  CHECK(failed.learners(0).id() == "l1");
  CHECK(aggregator.learners.learner("l0").calls("Learn") == 0);
}

TEST_CASE(
    "In process: a Learn after its learner reconnected fails before anything "
    "is sent, naming it, in the message and the error details") {
  Aggregator aggregator;
  aggregator.AddReady({4, 4});
  aggregator.Start(Config(2));
  const pb::DataDemand demand = GetData(aggregator);
  aggregator.learners.SetReady("l1");  // a new epoch: the plan is stale
  pb::LearnRequest batch = Batch(8);
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status =
      aggregator.stub->Learn(Context().get(), batch, &reply);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(),
             Catch::Contains("l1 (unix:/in-process/l1) reconnected since "
                             "GetData; call GetData again"));
  const pb::FailedLearners failed = ReadFailedLearners(status);
  REQUIRE(failed.learners_size() == 1);
  CHECK(failed.learners(0).id() == "l1");
  CHECK(failed.learners(0).message() == "reconnected since GetData");
  CHECK(aggregator.learners.learner("l0").calls("Learn") == 0);
  CHECK(aggregator.learners.learner("l1").calls("Learn") == 0);
}

TEST_CASE(
    "In process: a learner's failure is named in the call's status and in "
    "its error details, and counted against it") {
  Aggregator aggregator;
  aggregator.AddReady({4, 4});
  aggregator.learners.learner("l1").Fail(
      "GetData",
      grpc::Status(grpc::StatusCode::INTERNAL, "replay buffer gone"));
  aggregator.Start(Config(2));
  pb::DataDemand demand;
  const grpc::Status status =
      aggregator.stub->GetData(Context().get(), {}, &demand);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(status.error_message(),
             Catch::Contains("GetData failed on 1 of 2 learner(s): l1 "
                             "(unix:/in-process/l1): INTERNAL: replay buffer "
                             "gone"));
  const pb::FailedLearners failed = ReadFailedLearners(status);
  REQUIRE(failed.learners_size() == 1);
  CHECK(failed.learners(0).id() == "l1");
  CHECK(failed.learners(0).address() == "unix:/in-process/l1");
  CHECK(failed.learners(0).code() == grpc::StatusCode::INTERNAL);
  CHECK(failed.learners(0).message() == "replay buffer gone");
  const std::vector<LearnerSnapshot> snapshots = aggregator.learners.Status();
  CHECK(snapshots[0].failures == 0);
  CHECK(snapshots[1].calls == 1);
  CHECK(snapshots[1].failures == 1);
  CHECK(snapshots[1].last_error == "replay buffer gone");
}

TEST_CASE(
    "In process: with fewer learners ready than min_learners a call fails at "
    "once with UNAVAILABLE, naming the missing one and why; no learner is "
    "called") {
  Aggregator aggregator;
  aggregator.AddReady({4, 4});
  aggregator.learners.SetNotReady("l1", LearnerState::kFailed,
                                  "connection refused");
  aggregator.Start(Config(2));
  pb::DataDemand demand;
  const grpc::Status status =
      aggregator.stub->GetData(Context().get(), {}, &demand);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(),
             Catch::Contains("GetData: 1 of 2 learner(s) ready, 2 needed "
                             "(min_learners 2): l1 (unix:/in-process/l1) "
                             "failed: connection refused"));
  const pb::FailedLearners failed = ReadFailedLearners(status);
  REQUIRE(failed.learners_size() == 1);
  CHECK(failed.learners(0).id() == "l1");
  CHECK(failed.learners(0).code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(aggregator.learners.learner("l0").calls("GetData") == 0);
}

TEST_CASE(
    "In process, on_learner_failure shrink: a learner whose call failed "
    "leaves the plans, and is probed back by the rejoin step only once its "
    "retry is due on the clock") {
  Aggregator aggregator;
  aggregator.AddReady({4, 6});
  ServiceConfig config = Config(1);
  config.on_learner_failure = OnLearnerFailure::kShrink;
  aggregator.Start(config);
  FakeLearner& l1 = aggregator.learners.learner("l1");
  l1.Fail("GetData", grpc::Status(grpc::StatusCode::INTERNAL, "oom"));
  pb::DataDemand demand;
  CHECK(aggregator.stub->GetData(Context().get(), {}, &demand).error_code() ==
        grpc::StatusCode::INTERNAL);
  REQUIRE(aggregator.service->Standings().count("l1") == 1);
  CHECK(aggregator.service->Standings().at("l1").state ==
        LearnerStanding::kOut);
  l1.Answer("GetData");

  // Out: the next plan is over l0 alone, a generation of its own.
  demand = GetData(aggregator);
  CHECK(demand.batch_size() == 4);
  CHECK(Members(demand) == std::vector<std::string>{"l0"});
  const uint64_t generation = demand.membership().generation();

  // Its retry (Membership::kFirstRetry) is not due a millisecond early: the
  // rejoin step runs at the new time (its next step is set from it) and
  // starts no probe (one would be held, and counted in flight).
  l1.Hold("GetResource");
  const auto early = Membership::kFirstRetry - milliseconds(1);
  const Clock::TimePoint next_step =
      aggregator.clock.Now() + early + RejoinStep::kPeriod;
  aggregator.clock.Advance(early);
  REQUIRE(aggregator.clock.AwaitLooks(1, next_step, kRealWait));
  // (The GetData above counts out just after its answer: the wait.)
  CHECK(aggregator.service->WaitIdle(std::chrono::steady_clock::now() +
                                     kRealWait));
  CHECK(aggregator.service->Standings().count("l1") == 1);

  // Due at the next step: probed (GetResource), back in the plans.
  l1.Answer("GetResource");
  aggregator.clock.Advance(RejoinStep::kPeriod);
  REQUIRE(l1.AwaitCalls("GetResource", 1, kRealWait));
  REQUIRE(testing::Eventually(
      [&] { return aggregator.service->Standings().empty(); }, kRealWait));
  demand = GetData(aggregator);
  CHECK(demand.batch_size() == 10);
  CHECK(Members(demand) == std::vector<std::string>{"l0", "l1"});
  CHECK(demand.membership().generation() > generation);
}

// straggler.late_after 40ms, with l1 holding its GetData: once l0 has answered
// the late timer is set for 40 ms later on the service's clock.
struct LateCall {
  explicit LateCall(OnLearnerFailure policy, int min_learners) {
    aggregator.AddReady({4, 6});
    ServiceConfig config = Config(min_learners);
    config.on_learner_failure = policy;
    config.straggler.late_after = {StragglerConfig::LateAfter::Mode::kFixed,
                                   milliseconds(40)};
    aggregator.Start(config);
    aggregator.learners.learner("l1").Hold("GetData");
    late_at = aggregator.clock.Now() + milliseconds(40);
    aggregator.stub->async()->GetData(call.context.get(), &request, &call.reply,
                                      call.Done());
    REQUIRE(
        aggregator.learners.learner("l1").AwaitHeld("GetData", 1, kRealWait));
    REQUIRE(aggregator.clock.AwaitLooks(1, late_at, kRealWait));
  }
  // A millisecond early the late timer has seen the time and not fired.
  void NotLateYet() {
    REQUIRE(aggregator.clock.AdvanceAndSettle(milliseconds(39), late_at,
                                              kRealWait));
    CHECK_FALSE(call.Answered());
    CHECK(aggregator.learners.learner("l1").held("GetData") == 1);
    CHECK(aggregator.service->LateMs().empty());
  }

  // The call first: it outlives the aggregator's wait for it.
  pb::GetDataRequest request;
  Pending<pb::DataDemand> call;
  Aggregator aggregator;
  Clock::TimePoint late_at;
};

TEST_CASE(
    "In process: a held learner is declared late exactly when the clock "
    "passes straggler.late_after, not before; its call is cancelled and the "
    "GetData fails naming it late") {
  LateCall late(OnLearnerFailure::kFail, 2);
  late.NotLateYet();
  late.aggregator.clock.Advance(milliseconds(1));
  REQUIRE(late.call.Answered(kRealWait));
  const grpc::Status status = late.call.status.get();
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK_THAT(status.error_message(),
             Catch::Contains("l1 (unix:/in-process/l1): DEADLINE_EXCEEDED: "
                             "late: silent 40 ms after the other 1 learner(s) "
                             "answered GetData (straggler.late_after 40ms)"));
  CHECK(late.aggregator.learners.learner("l1").AwaitCancelled("GetData", 1,
                                                              kRealWait));
  CHECK(late.aggregator.service->LateMs() ==
        std::map<std::string, int64_t>{{"l1", 40}});
}

TEST_CASE(
    "In process, on_learner_failure shrink: a learner late by "
    "straggler.late_after leaves the plans and the GetData completes over "
    "the others") {
  LateCall late(OnLearnerFailure::kShrink, 1);
  late.NotLateYet();
  late.aggregator.clock.Advance(milliseconds(1));
  REQUIRE(late.call.Answered(kRealWait));
  const grpc::Status status = late.call.status.get();
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(late.call.reply.batch_size() == 4);
  CHECK(Members(late.call.reply) == std::vector<std::string>{"l0"});
  const auto standings = late.aggregator.service->Standings();
  REQUIRE(standings.count("l1") == 1);
  CHECK(standings.at("l1").state == LearnerStanding::kOut);
  CHECK_THAT(standings.at("l1").why, Catch::StartsWith("GetData late: "));
}

TEST_CASE(
    "In process, on_learner_failure shrink: a learner ready while a task is "
    "open joins the plans only once the rejoin step replayed the task to it") {
  Aggregator aggregator;
  aggregator.AddReady({4});
  aggregator.learners.Add("l1", FakeLearner::Options{1, 6});
  ServiceConfig config = Config(1);
  config.on_learner_failure = OnLearnerFailure::kShrink;
  aggregator.Start(config);
  pb::StartTaskReply started;
  REQUIRE(aggregator.stub->StartTask(Context().get(), {}, &started).ok());
  CHECK(aggregator.learners.learner("l0").task_open());

  FakeLearner& l1 = aggregator.learners.learner("l1");
  l1.Hold("StartTask");
  aggregator.learners.SetReady("l1");
  // The GetData does not wait for the replay: its plan is l0's alone, and it
  // asks the step for the replay at once (no clock move needed).
  pb::DataDemand demand = GetData(aggregator);
  CHECK(Members(demand) == std::vector<std::string>{"l0"});
  REQUIRE(l1.AwaitHeld("StartTask", 1, kRealWait));
  CHECK(aggregator.service->Standings().at("l1").state ==
        LearnerStanding::kRejoining);
  demand = GetData(aggregator);  // still replaying: not in this plan either
  CHECK(Members(demand) == std::vector<std::string>{"l0"});

  l1.Answer("StartTask");
  REQUIRE(testing::Eventually(
      [&] { return aggregator.service->Standings().empty(); }, kRealWait));
  CHECK(l1.task_open());
  CHECK(l1.calls("StartTask") == 1);
  demand = GetData(aggregator);
  CHECK(Members(demand) == std::vector<std::string>{"l0", "l1"});
  CHECK(demand.batch_size() == 10);
}

}  // namespace
}  // namespace aggregator
