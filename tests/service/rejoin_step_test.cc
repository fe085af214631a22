// Issue 28, rejoin off the call path: a learner that is ready again has the
// task replayed and joins the plans by a step of its own (RejoinStep), never
// waiting for another learner's call, here one stuck on a hung learner.
// Example learners on loopback; a is hung by its fault file.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
using aggregator::AggregatorConfig;
using aggregator::AggregatorServer;
using aggregator::ExampleLearnerOptions;
using aggregator::ExampleLearnerServer;
using aggregator::OnLearnerFailure;
using aggregator::StragglerConfig;
namespace pb = aggregator::v1;

namespace {

// Replaces a learner's fault file at once (ExampleLearnerOptions::fault_file).
void WriteFaults(const std::string& path, const std::string& faults) {
  WriteFile(path + ".new", faults);
  REQUIRE(rename((path + ".new").c_str(), path.c_str()) == 0);
}

// a, b and c under shrink, each with a fault file; late_after off (unless
// given) and a long call_timeout, so a call stuck on a hung learner stays
// stuck.
struct Cluster {
  std::string dir = TempDir();
  ExampleLearnerOptions options[3];
  std::unique_ptr<ExampleLearnerServer> learners[3];
  std::string addresses[3];
  std::unique_ptr<AggregatorServer> server;
  std::unique_ptr<pb::Learner::Stub> stub;

  explicit Cluster(StragglerConfig::LateAfter late_after = {
                       StragglerConfig::LateAfter::Mode::kOff, {}}) {
    std::vector<aggregator::LearnerEndpoint> endpoints;
    for (int i = 0; i < 3; ++i) {
      options[i].batch_size = 8;
      options[i].fault_file = dir + "/faults" + std::to_string(i);
      WriteFaults(options[i].fault_file, "");
      learners[i] = StartLearner(options[i]);
      addresses[i] = learners[i]->address;
      endpoints.push_back(Endpoint(std::string(1, 'a' + i), addresses[i]));
    }
    AggregatorConfig config = FastConfig(endpoints, 1);
    config.service.on_learner_failure = OnLearnerFailure::kShrink;
    config.service.call_timeout = milliseconds(60000);
    config.service.straggler.late_after = late_after;
    server = StartReadyAggregator(config);
    REQUIRE(Eventually([&] { return server->pool().ReadyCount() == 3; }));
    stub = LearnerStub(server->address());
    pb::StartTaskRequest task;
    (*task.mutable_task_info()->mutable_fields())["task_id"].set_string_value(
        "rejoin");
    pb::StartTaskReply started;
    REQUIRE(stub->StartTask(Deadline().get(), task, &started).ok());
  }
  ~Cluster() {
    // Ends the hung calls at once.
    for (auto& learner : learners) {
      if (learner != nullptr) learner->learner->Stop();
    }
  }

  // Learner i goes away and comes back at its address, a new process with
  // no task; returns once the pool has it ready again.
  void Restart(int i) {
    learners[i].reset();
    REQUIRE(Eventually([&] { return server->pool().ReadyCount() == 2; }));
    learners[i] = StartLearner(options[i], addresses[i]);
    REQUIRE(Eventually([&] { return server->pool().ReadyCount() == 3; },
                       milliseconds(10000)));
  }

  // Whether `id` is in the plans (no standing but "in").
  bool In(const std::string& id) {
    return server->learner_service().Standings().count(id) == 0;
  }
};

// A GetData on a thread of its own (the coordinator's loop), cancellable.
struct PendingGetData {
  grpc::ClientContext context;
  pb::DataDemand demand;
  grpc::Status status;
  std::atomic<bool> done{false};
  std::thread thread;

  explicit PendingGetData(pb::Learner::Stub& stub) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    thread = std::thread([this, &stub] {
      status = stub.GetData(&context, {}, &demand);
      done = true;
    });
  }
  ~PendingGetData() {
    context.TryCancel();
    thread.join();
  }
};

}  // namespace

TEST_CASE(
    "A learner that is back has the task replayed and is in the plans "
    "within 5 s while a GetData is stuck on a hung learner") {
  Cluster cluster;
  WriteFaults(cluster.options[0].fault_file,
              "delay_ms=600000 delay_on=GetData");
  // b goes away before the step: the GetData goes to a and c.
  cluster.learners[1].reset();
  REQUIRE(Eventually([&] { return cluster.server->pool().ReadyCount() == 2; }));
  const int64_t a_calls = cluster.learners[0]->learner->calls();
  PendingGetData stuck(*cluster.stub);
  // a has it, and holds it.
  REQUIRE(Eventually(
      [&] { return cluster.learners[0]->learner->calls() > a_calls; }));

  const auto back = Clock::now();
  cluster.learners[1] = StartLearner(cluster.options[1], cluster.addresses[1]);
  const bool rejoined = Eventually(
      [&] {
        return cluster.learners[1]->learner->task_open() && cluster.In("b");
      },
      milliseconds(5000));
  const double seconds = Seconds(Clock::now() - back);
  std::printf(
      "b back in the plans %.3f s after it listened again, GetData stuck on "
      "a\n",
      seconds);
  CHECK(rejoined);
  // All the while the GetData was stuck on a.
  CHECK_FALSE(stuck.done);

  // The next plan has b: once the stuck call is given up and a answers.
  stuck.context.TryCancel();
  REQUIRE(Eventually([&] { return stuck.done.load(); }));
  WriteFaults(cluster.options[0].fault_file, "");
  pb::DataDemand demand;
  REQUIRE(cluster.stub->GetData(Deadline().get(), {}, &demand).ok());
  const auto& members = demand.membership().members();
  CHECK(std::vector<std::string>(members.begin(), members.end()) ==
        std::vector<std::string>{"a", "b", "c"});
  pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()), "r-");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  REQUIRE(cluster.stub->Learn(Deadline().get(), batch, &reply).ok());
  CHECK(reply.task_id() == "rejoin");
}

TEST_CASE(
    "A learner's replay does not wait for another learner's replay that "
    "hangs") {
  Cluster cluster;
  // a and b both come back; a then hangs in the StartTask replayed to it.
  WriteFaults(cluster.options[0].fault_file,
              "delay_ms=600000 delay_on=StartTask");
  cluster.Restart(0);
  cluster.Restart(1);
  // The coordinator steps on meanwhile.
  std::vector<std::unique_ptr<PendingGetData>> calls;
  calls.push_back(std::make_unique<PendingGetData>(*cluster.stub));
  const bool rejoined = Eventually(
      [&] {
        return cluster.learners[1]->learner->task_open() && cluster.In("b");
      },
      milliseconds(5000));
  CHECK(rejoined);
  CHECK_FALSE(cluster.learners[0]->learner->task_open());
  CHECK_FALSE(cluster.In("a"));
  // The GetData did not wait for a's replay either: planned over b and c,
  // or c alone if it came before b's replay.
  REQUIRE(Eventually([&] { return calls[0]->done.load(); }));
  INFO(calls[0]->status.error_message());
  CHECK(calls[0]->status.ok());
  pb::DataDemand demand;
  REQUIRE(cluster.stub->GetData(Deadline().get(), {}, &demand).ok());
  CHECK(demand.membership().members_size() == 2);
}

// Issue 28: a learner out for being late (hung, as SIGSTOPped) is probed
// with GetResource off the call path, not tried again inside the calls.
TEST_CASE(
    "A hung learner out for being late costs no GetData a late_after wait, "
    "and is back in the plans within 2 s of being continued") {
  constexpr auto kLateAfter = milliseconds(500);
  Cluster cluster({StragglerConfig::LateAfter::Mode::kFixed, kLateAfter});
  // b stops answering anything, GetResource too.
  WriteFaults(cluster.options[1].fault_file, "delay_ms=600000");
  // The GetData that finds it late puts it out.
  {
    pb::DataDemand demand;
    cluster.stub->GetData(Deadline().get(), {}, &demand);
  }
  REQUIRE(Eventually([&] { return !cluster.In("b"); }));
  const auto out = Clock::now();

  // The coordinator steps on for 3 s while b stays hung: past its retries
  // (1 s, then 2 s), none waits late_after for it again.
  double slowest = 0;
  int steps = 0;
  while (Clock::now() - out < milliseconds(3000)) {
    const auto start = Clock::now();
    pb::DataDemand demand;
    const grpc::Status status =
        cluster.stub->GetData(Deadline().get(), {}, &demand);
    slowest = std::max(slowest, Seconds(Clock::now() - start));
    ++steps;
    INFO(status.error_message());
    REQUIRE(status.ok());
    CHECK(demand.membership().members_size() == 2);
    pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()),
                                   "h" + std::to_string(steps));
    batch.set_plan_id(demand.plan_id());
    pb::LearnReply reply;
    REQUIRE(cluster.stub->Learn(Deadline().get(), batch, &reply).ok());
    // The coordinator's pace, not a wait for anything.
    std::this_thread::sleep_for(milliseconds(50));
  }
  std::printf("b hung 3 s: %d GetData+Learn steps, slowest GetData %.3f s\n",
              steps, slowest);
  CHECK(slowest < Seconds(kLateAfter) / 2);
  CHECK_FALSE(cluster.In("b"));

  // Continued: its calls under way answer, later ones are not delayed.
  WriteFaults(cluster.options[1].fault_file, "");
  cluster.learners[1]->learner->Continue();
  const auto continued = Clock::now();
  const bool back = Eventually(
      [&] {
        return cluster.In("b") && cluster.server->pool().ReadyCount() == 3;
      },
      milliseconds(5000));
  const double seconds = Seconds(Clock::now() - continued);
  std::printf("b back in the plans %.3f s after it was continued\n", seconds);
  REQUIRE(back);
  CHECK(seconds < 2.0);
  pb::DataDemand demand;
  REQUIRE(cluster.stub->GetData(Deadline().get(), {}, &demand).ok());
  const auto& members = demand.membership().members();
  CHECK(std::vector<std::string>(members.begin(), members.end()) ==
        std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("A replay in flight is a call in flight, for drain and shutdown") {
  Cluster cluster;
  // a comes back and hangs in the StartTask replayed to it.
  WriteFaults(cluster.options[0].fault_file,
              "delay_ms=600000 delay_on=StartTask");
  cluster.Restart(0);
  REQUIRE(
      Eventually([&] { return cluster.learners[0]->learner->calls() > 0; }));
  SECTION("drain waits for it") {
    CHECK_FALSE(cluster.server->Drain(Clock::now() + milliseconds(300)));
    cluster.learners[0]->learner->Stop();  // its replay is answered
    CHECK(cluster.server->Drain(Clock::now() + milliseconds(5000)));
  }
  SECTION("shutdown cancels it") {
    const auto start = Clock::now();
    cluster.server.reset();
    const double seconds = Seconds(Clock::now() - start);
    std::printf("shutdown with a replay hung took %.3f s\n", seconds);
    // Not a second more (the pool's Stop with a call left on a channel).
    CHECK(seconds < 0.5);
  }
}
