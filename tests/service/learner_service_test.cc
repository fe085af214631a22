// The aggregator end to end: real example learners and a real aggregator server
// on loopback, driven through the Learner API as a coordinator would.
#include <catch2/catch.hpp>
#include <future>
#include <limits>

#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;
using aggregator::LearnerEndpoint;
using aggregator::LearnerState;

namespace {

struct Cluster {
  explicit Cluster(int learners, int min_learners = -1,
                   aggregator::ExampleLearnerOptions options = {}) {
    std::vector<LearnerEndpoint> endpoints;
    for (int i = 0; i < learners; ++i) {
      servers.push_back(StartLearner(options));
      endpoints.push_back(
          Endpoint("learner" + std::to_string(i), servers.back()->address));
    }
    config = FastConfig(endpoints, min_learners < 0 ? learners : min_learners);
  }
  void Start() {
    aggregator = StartReadyAggregator(config);
    stub = LearnerStub(aggregator->address());
  }

  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  aggregator::AggregatorConfig config;
  std::unique_ptr<aggregator::AggregatorServer> aggregator;
  std::unique_ptr<pb::Learner::Stub> stub;
};

std::vector<std::string> StringList(const google::protobuf::Value& value) {
  std::vector<std::string> out;
  for (const auto& v : value.list_value().values())
    out.push_back(v.string_value());
  return out;
}

pb::DataDemand GetData(pb::Learner::Stub& stub) {
  pb::DataDemand demand;
  auto context = Deadline();
  const grpc::Status status =
      stub.GetData(context.get(), pb::GetDataRequest(), &demand);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return demand;
}

grpc::Status Learn(pb::Learner::Stub& stub, const pb::LearnRequest& request,
                   pb::LearnReply* reply,
                   milliseconds timeout = milliseconds(5000)) {
  auto context = Deadline(timeout);
  return stub.Learn(context.get(), request, reply);
}

}  // namespace

TEST_CASE("DI-engine's scenario: 4 learners demanding 32 each") {
  Cluster cluster(4);
  cluster.Start();
  auto& stub = *cluster.stub;

  pb::Resource resource;
  REQUIRE(stub.GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.gpus() == 4);
  CHECK(resource.learners() == 4);

  pb::StartTaskRequest start;
  (*start.mutable_task_info()->mutable_fields())["task_id"].set_string_value(
      "t1");
  (*start.mutable_task_info()->mutable_fields())["buffer_id"].set_string_value(
      "b1");
  pb::StartTaskReply started;
  REQUIRE(stub.StartTask(Deadline().get(), start, &started).ok());
  for (auto& server : cluster.servers) CHECK(server->learner->task_open());

  const pb::DataDemand demand = GetData(stub);
  CHECK(demand.batch_size() == 128);
  CHECK(demand.task_id() == "t1");
  CHECK(demand.buffer_id() == "b1");
  CHECK_FALSE(demand.plan_id().empty());

  pb::LearnRequest batch = Batch(128, "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status learned = Learn(stub, batch, &reply);
  INFO(learned.error_message());
  REQUIRE(learned.ok());

  // Every learner trained on exactly its 32, in order.
  for (int i = 0; i < 4; ++i) {
    const auto received = cluster.servers[i]->learner->received();
    REQUIRE(received.size() == 1);
    CHECK(received[0] == Ids("s", 32 * i, 32 * (i + 1)));
  }
  const auto& info = reply.info().fields();
  const auto& priority_info = info.at("priority_info").struct_value().fields();
  CHECK(StringList(priority_info.at("replay_unique_id")) == Ids("s", 0, 128));
  const auto& priorities = priority_info.at("priority").list_value();
  REQUIRE(priorities.values_size() == 128);
  for (int i = 0; i < 128; ++i) {
    CHECK(priorities.values(i).number_value() ==
          aggregator::SamplePriority(batch.samples(i).data()));
  }
  // Homogeneous keys come from the first learner; scalars become per-learner
  // lists.
  CHECK(info.at("learner_step").number_value() == 1);
  CHECK(info.at("learner_done").bool_value() == false);
  CHECK(info.at("task_id").string_value() == "t1");
  CHECK(info.at("buffer_id").string_value() == "b1");
  const auto& received = info.at("received").list_value();
  REQUIRE(received.values_size() == 4);
  for (const auto& n : received.values()) CHECK(n.number_value() == 32);
  CHECK(reply.task_id() == "t1");
  CHECK(reply.buffer_id() == "b1");

  pb::CloseTaskReply closed;
  REQUIRE(stub.CloseTask(Deadline().get(), {}, &closed).ok());
  for (auto& server : cluster.servers)
    CHECK_FALSE(server->learner->task_open());
}

TEST_CASE(
    "An unreachable learner is failed after connect.timeout; the rest serve") {
  Cluster cluster(2, /*min_learners=*/2);
  const std::string dead = "127.0.0.1:" + std::to_string(ClosedPort());
  cluster.config.learners.push_back(Endpoint("ghost", dead));
  const auto started = Clock::now();
  cluster.Start();
  CHECK(StateOf(*cluster.aggregator, "ghost") != LearnerState::kReady);
  REQUIRE(Eventually([&] {
    return StateOf(*cluster.aggregator, "ghost") == LearnerState::kFailed;
  }));
  const double failed_after = Seconds(Clock::now() - started);
  CHECK(failed_after >= 0.5);  // connect.timeout
  CHECK(failed_after < 2.0);

  const pb::DataDemand demand = GetData(*cluster.stub);
  CHECK(demand.batch_size() == 64);
  pb::LearnReply reply;
  CHECK(Learn(*cluster.stub, Batch(64, "x"), &reply).ok());

  // Status names the failed learner and why.
  bool found = false;
  for (const auto& status : cluster.aggregator->pool().Status()) {
    if (status.id != "ghost") continue;
    found = true;
    CHECK(status.address.ToString() == dead);
    CHECK_THAT(status.last_error, Catch::Contains("connection failed"));
  }
  CHECK(found);
}

TEST_CASE("A learner's error reaches the coordinator promptly, naming it") {
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  servers.push_back(StartLearner());
  aggregator::ExampleLearnerOptions failing;
  failing.fail_on = "Learn";
  servers.push_back(StartLearner(failing));
  auto config = FastConfig({Endpoint("good", servers[0]->address),
                            Endpoint("bad", servers[1]->address)},
                           2);
  auto server = StartReadyAggregator(config);
  auto stub = LearnerStub(server->address());
  GetData(*stub);
  pb::LearnReply reply;
  const auto started = Clock::now();
  const grpc::Status status = Learn(*stub, Batch(64, "x"), &reply);
  CHECK(Seconds(Clock::now() - started) < 1.0);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(status.error_message(),
             Catch::Contains("bad (" + servers[1]->address + ")") &&
                 Catch::Contains("injected failure in Learn") &&
                 Catch::Contains("1 of 2"));
  // The daemon goes on serving.
  CHECK(GetData(*stub).batch_size() == 64);
}

TEST_CASE("StartTask names every learner that failed") {
  aggregator::ExampleLearnerOptions failing;
  failing.fail_on = "StartTask";
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  servers.push_back(StartLearner(failing));
  servers.push_back(StartLearner());
  servers.push_back(StartLearner(failing));
  auto server = StartReadyAggregator(FastConfig(
      {Endpoint("a", servers[0]->address), Endpoint("b", servers[1]->address),
       Endpoint("c", servers[2]->address)},
      3));
  auto stub = LearnerStub(server->address());
  pb::StartTaskReply reply;
  const grpc::Status status =
      stub->StartTask(Deadline().get(), pb::StartTaskRequest(), &reply);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(status.error_message(),
             Catch::Contains("2 of 3") && Catch::Contains("a (") &&
                 Catch::Contains("c (") && !Catch::Contains("b ("));
}

TEST_CASE("A hanging learner gives DEADLINE_EXCEEDED after call_timeout") {
  aggregator::ExampleLearnerOptions slow;
  slow.delay = milliseconds(10000);
  slow.delay_on = "GetData";
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  servers.push_back(StartLearner());
  servers.push_back(StartLearner(slow));
  auto config = FastConfig({Endpoint("quick", servers[0]->address),
                            Endpoint("stuck", servers[1]->address)},
                           2);
  config.service.call_timeout = milliseconds(300);
  auto server = StartReadyAggregator(config);
  auto stub = LearnerStub(server->address());

  pb::DataDemand demand;
  auto started = Clock::now();
  grpc::Status status =
      stub->GetData(Deadline().get(), pb::GetDataRequest(), &demand);
  double elapsed = Seconds(Clock::now() - started);
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK_THAT(status.error_message(), Catch::Contains("stuck ("));
  CHECK(elapsed >= 0.3);
  CHECK(elapsed < 1.5);

  SECTION("the coordinator's own, tighter deadline wins") {
    server->Shutdown(std::chrono::system_clock::now());
    config.service.call_timeout = milliseconds(10000);
    server = StartReadyAggregator(config);
    stub = LearnerStub(server->address());
    started = Clock::now();
    status = stub->GetData(Deadline(milliseconds(300)).get(),
                           pb::GetDataRequest(), &demand);
    elapsed = Seconds(Clock::now() - started);
    CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    CHECK(elapsed < 1.5);
  }
  for (auto& s : servers) s->learner->Stop();
}

TEST_CASE("A learner that omits a per-sample list fails the Learn, named") {
  // Regression: one learner without priority_info.priority gave 96
  // priorities for 128 replay ids, silently misaligned.
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  aggregator::ExampleLearnerOptions forgetful;
  forgetful.omit_priorities = true;
  servers.push_back(StartLearner());
  servers.push_back(StartLearner(forgetful));
  auto server = StartReadyAggregator(
      FastConfig({Endpoint("good", servers[0]->address),
                  Endpoint("forgetful", servers[1]->address)},
                 2));
  auto stub = LearnerStub(server->address());
  const pb::DataDemand demand = GetData(*stub);
  pb::LearnRequest batch = Batch(64, "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = Learn(*stub, batch, &reply);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(status.error_message(),
             Catch::Contains("'priority_info.priority'") &&
                 Catch::Contains("forgetful sent none for its 32 samples"));
  for (auto& s : servers) s->learner->Stop();
}

TEST_CASE("Concurrent coordinators each learn on their own plan") {
  // Regression: with a single "latest plan" two coordinators refused each
  // other's Learns as "not the latest plan".
  Cluster cluster(2);
  cluster.Start();
  constexpr int kCoordinators = 4;
  constexpr int kSteps = 20;
  std::vector<std::future<int>> runs;
  for (int c = 0; c < kCoordinators; ++c) {
    runs.push_back(std::async(std::launch::async, [&, c] {
      // No Catch2 assertion here: they belong to the main thread.
      auto stub = LearnerStub(cluster.aggregator->address());
      int ok = 0;
      for (int step = 0; step < kSteps; ++step) {
        pb::DataDemand demand;
        auto context = Deadline();
        if (!stub->GetData(context.get(), {}, &demand).ok()) continue;
        const std::string prefix =
            "c" + std::to_string(c) + "s" + std::to_string(step) + "-";
        pb::LearnRequest batch =
            Batch(static_cast<int>(demand.batch_size()), prefix);
        batch.set_plan_id(demand.plan_id());
        pb::LearnReply reply;
        if (!Learn(*stub, batch, &reply).ok()) continue;
        const auto& ids = reply.info()
                              .fields()
                              .at("priority_info")
                              .struct_value()
                              .fields()
                              .at("replay_unique_id")
                              .list_value();
        if (ids.values_size() == demand.batch_size() &&
            ids.values(0).string_value() == prefix + "0") {
          ++ok;
        }
      }
      return ok;
    }));
  }
  for (auto& run : runs) CHECK(run.get() == kSteps);
}

TEST_CASE("Learn is checked against the plan") {
  Cluster cluster(2);
  cluster.Start();
  auto& stub = *cluster.stub;
  pb::LearnReply reply;

  SECTION("before any GetData") {
    const grpc::Status status = Learn(stub, Batch(64, "x"), &reply);
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(status.error_message(), Catch::Contains("GetData first"));
  }
  SECTION("plans are kept by id, and each trains once") {
    const std::string old_plan = GetData(stub).plan_id();
    const std::string new_plan = GetData(stub).plan_id();
    pb::LearnRequest batch = Batch(64, "x");
    // Step t may learn after step t+1 was planned.
    batch.set_plan_id(old_plan);
    CHECK(Learn(stub, batch, &reply).ok());
    // A retry of a Learn that succeeded would train twice.
    grpc::Status status = Learn(stub, batch, &reply);
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(status.error_message(),
               Catch::Contains(old_plan) && Catch::Contains("already used"));
    batch.set_plan_id(new_plan);
    CHECK(Learn(stub, batch, &reply).ok());
    batch.set_plan_id("not-a-plan");
    status = Learn(stub, batch, &reply);
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(status.error_message(), Catch::Contains("unknown or expired"));
  }
  SECTION("more samples than any plan are refused while scanning") {
    GetData(stub);
    const grpc::Status status = Learn(stub, Batch(65, "x"), &reply);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("more than 64 samples"));
  }
  SECTION("with the wrong number of samples") {
    GetData(stub);
    const grpc::Status status = Learn(stub, Batch(63, "x"), &reply);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(),
               Catch::Contains("63") && Catch::Contains("64"));
    for (auto& server : cluster.servers) {
      CHECK(server->learner->received().empty());  // nothing was sent
    }
    // The plan was not used: it is still there for the right batch.
    CHECK(Learn(stub, Batch(64, "x"), &reply).ok());
  }
}

TEST_CASE("With no learner ready every call fails at once with UNAVAILABLE") {
  const std::string dead = "127.0.0.1:" + std::to_string(ClosedPort());
  auto server = StartAggregator(FastConfig({Endpoint("ghost", dead)}, 1));
  CHECK_FALSE(server->ready());
  auto stub = LearnerStub(server->address());
  const auto started = Clock::now();
  pb::Resource resource;
  grpc::Status status = stub->GetResource(Deadline().get(), {}, &resource);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(),
             Catch::Contains("0 of 1") && Catch::Contains("ghost (" + dead));
  pb::DataDemand demand;
  status = stub->GetData(Deadline().get(), {}, &demand);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(Seconds(Clock::now() - started) < 1.0);
}

TEST_CASE(
    "A learner lost between GetData and Learn fails the Learn, naming it") {
  Cluster cluster(3);
  cluster.Start();
  GetData(*cluster.stub);
  const std::string lost_address = cluster.servers[1]->address;
  cluster.servers[1]->Shutdown();
  pb::LearnReply reply;
  const auto started = Clock::now();
  grpc::Status status = Learn(*cluster.stub, Batch(96, "x"), &reply);
  CHECK(Seconds(Clock::now() - started) < 2.5);
  CHECK_FALSE(status.ok());
  CHECK_THAT(status.error_message(),
             Catch::Contains("learner1 (" + lost_address));
  // Once the pool has seen it go, the plan itself is refused.
  REQUIRE(Eventually([&] {
    return StateOf(*cluster.aggregator, "learner1") != LearnerState::kReady;
  }));
  status = Learn(*cluster.stub, Batch(96, "x"), &reply);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(), Catch::Contains("learner1"));
}

TEST_CASE("A learner restarted on the same address is reconnected") {
  Cluster cluster(2);
  cluster.Start();
  const pb::DataDemand before = GetData(*cluster.stub);
  const std::string address = cluster.servers[0]->address;
  cluster.servers[0]->Shutdown();
  REQUIRE(Eventually([&] {
    return StateOf(*cluster.aggregator, "learner0") != LearnerState::kReady;
  }));
  cluster.servers[0] = StartLearner({}, address);
  REQUIRE(cluster.aggregator->WaitUntilReady(Clock::now() +
                                             std::chrono::seconds(5)));

  // The old plan was made with the previous connection: refused, not mis-split.
  pb::LearnRequest stale = Batch(64, "x");
  stale.set_plan_id(before.plan_id());
  pb::LearnReply reply;
  grpc::Status status = Learn(*cluster.stub, stale, &reply);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(), Catch::Contains("reconnected"));

  const pb::DataDemand after = GetData(*cluster.stub);
  CHECK(after.batch_size() == 64);
  pb::LearnRequest batch = Batch(64, "y");
  batch.set_plan_id(after.plan_id());
  status = Learn(*cluster.stub, batch, &reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(cluster.servers[0]->learner->received().at(0) == Ids("y", 0, 32));
}

TEST_CASE("A tree of aggregators keeps the sample order end to end") {
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> leaves;
  std::vector<std::unique_ptr<aggregator::AggregatorServer>> middles;
  for (int m = 0; m < 2; ++m) {
    std::vector<LearnerEndpoint> endpoints;
    for (int l = 0; l < 2; ++l) {
      leaves.push_back(StartLearner());
      endpoints.push_back(
          Endpoint("leaf" + std::to_string(l), leaves.back()->address));
    }
    middles.push_back(StartReadyAggregator(FastConfig(endpoints, 2)));
  }
  auto top = StartReadyAggregator(
      FastConfig({Endpoint("middle0", middles[0]->address()),
                  Endpoint("middle1", middles[1]->address())},
                 2));
  auto stub = LearnerStub(top->address());

  pb::Resource resource;
  REQUIRE(stub->GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.gpus() == 4);
  CHECK(resource.learners() == 4);

  const pb::DataDemand demand = GetData(*stub);
  CHECK(demand.batch_size() == 128);
  pb::LearnRequest batch = Batch(128, "t");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = Learn(*stub, batch, &reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  for (int i = 0; i < 4; ++i) {
    CHECK(leaves[i]->learner->received().at(0) ==
          Ids("t", 32 * i, 32 * (i + 1)));
  }
  CHECK(StringList(reply.info()
                       .fields()
                       .at("priority_info")
                       .struct_value()
                       .fields()
                       .at("replay_unique_id")) == Ids("t", 0, 128));
}

TEST_CASE(
    "A learner that connects but does not answer GetResource is not ready") {
  aggregator::ExampleLearnerOptions refusing;
  refusing.fail_on = "GetResource";
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  servers.push_back(StartLearner());
  servers.push_back(StartLearner(refusing));
  auto server =
      StartReadyAggregator(FastConfig({Endpoint("fine", servers[0]->address),
                                       Endpoint("mute", servers[1]->address)},
                                      1));
  REQUIRE(Eventually(
      [&] { return StateOf(*server, "mute") == LearnerState::kFailed; }));
  for (const auto& status : server->pool().Status()) {
    if (status.id != "mute") continue;
    CHECK_THAT(
        status.last_error,
        Catch::Contains("GetResource failed: INTERNAL: injected failure"));
  }
  auto stub = LearnerStub(server->address());
  pb::Resource resource;
  REQUIRE(stub->GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.gpus() == 1);
  CHECK(resource.learners() == 1);
}

TEST_CASE("A Learn past max_inflight_bytes is refused at once, named") {
  // Learns are held by a slow learner; the budget fits one batch, not two.
  aggregator::ExampleLearnerOptions slow;
  slow.delay = milliseconds(1500);
  slow.delay_on = "Learn";
  Cluster cluster(1, 1, slow);
  cluster.config.service.max_inflight_bytes = 300 * 1024;
  cluster.Start();
  auto learn_one = [&](const std::string& prefix) {
    pb::DataDemand demand = GetData(*cluster.stub);
    pb::LearnRequest batch =
        Batch(static_cast<int>(demand.batch_size()), prefix, 200 * 1024 / 32);
    batch.set_plan_id(demand.plan_id());
    return batch;
  };
  const pb::LearnRequest first = learn_one("a");
  const pb::LearnRequest second = learn_one("b");
  const int64_t calls_before = cluster.servers[0]->learner->calls();
  auto held = std::async(std::launch::async, [&] {
    pb::LearnReply reply;
    return Learn(*LearnerStub(cluster.aggregator->address()), first, &reply)
        .error_code();
  });
  // Once the learner has the first Learn, the aggregator holds its lease.
  REQUIRE(Eventually(
      [&] { return cluster.servers[0]->learner->calls() > calls_before; }));
  const auto refused_at = Clock::now();
  pb::LearnReply reply;
  const grpc::Status refused = Learn(*cluster.stub, second, &reply);
  CHECK(Clock::now() - refused_at < milliseconds(1000));  // not after the hold
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(),
             Catch::Contains("would exceed max_inflight_bytes (307200 bytes"));
  CHECK(held.get() == grpc::StatusCode::OK);
  // The budget is back once the first Learn is done: the second plan, still
  // unused, trains.
  const grpc::Status later = Learn(*cluster.stub, second, &reply);
  INFO(later.error_message());
  CHECK(later.ok());
}

TEST_CASE(
    "Resource sums saturate; a learner reporting negative ones is unused") {
  // Regression: three learners of 1e9 gpus summed to -1294967295 (int32
  // overflow, undefined behaviour), and negative gpus were summed as given.
  aggregator::ExampleLearnerOptions huge;
  huge.gpus = 1000000000;
  aggregator::ExampleLearnerOptions negative;
  negative.gpus = -3;
  std::vector<std::unique_ptr<aggregator::ExampleLearnerServer>> servers;
  for (int i = 0; i < 3; ++i) servers.push_back(StartLearner(huge));
  servers.push_back(StartLearner(negative));
  auto server = StartReadyAggregator(FastConfig(
      {Endpoint("a", servers[0]->address), Endpoint("b", servers[1]->address),
       Endpoint("c", servers[2]->address),
       Endpoint("neg", servers[3]->address)},
      3));
  auto stub = LearnerStub(server->address());
  pb::Resource resource;
  REQUIRE(stub->GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.gpus() == std::numeric_limits<int32_t>::max());
  CHECK(resource.learners() == 3);
  std::string why;
  REQUIRE(aggregator::testing::Eventually([&] {
    for (const auto& learner : server->pool().Status()) {
      if (learner.id == "neg" && !learner.last_error.empty()) {
        why = learner.last_error;
        return learner.state != aggregator::LearnerState::kReady;
      }
    }
    return false;
  }));
  CHECK_THAT(why, Catch::Contains("GetResource reported negative resources "
                                  "(gpus -3, learners 1)"));
}

namespace {

// A learner whose every Learn answers `info`.
class FixedInfoLearner final : public pb::Learner::Service {
 public:
  explicit FixedInfoLearner(google::protobuf::Struct info)
      : info_(std::move(info)) {}
  grpc::Status GetResource(grpc::ServerContext*, const pb::GetResourceRequest*,
                           pb::Resource* reply) override {
    reply->set_gpus(1);
    return grpc::Status::OK;
  }
  grpc::Status GetData(grpc::ServerContext*, const pb::GetDataRequest*,
                       pb::DataDemand* reply) override {
    reply->set_batch_size(4);
    return grpc::Status::OK;
  }
  grpc::Status Learn(grpc::ServerContext*, const pb::LearnRequest*,
                     pb::LearnReply* reply) override {
    *reply->mutable_info() = info_;
    ++learns;
    return grpc::Status::OK;
  }
  std::atomic<int> learns{0};

 private:
  const google::protobuf::Struct info_;
};

struct FixedInfoServer {
  explicit FixedInfoServer(google::protobuf::Struct info)
      : learner(std::move(info)), server(ServeOnLoopback(&learner, &address)) {}
  ~FixedInfoServer() { server->Shutdown(std::chrono::system_clock::now()); }
  FixedInfoLearner learner;
  std::string address;  // before server, which sets it
  std::unique_ptr<grpc::Server> server;
};

// {"blob": `bytes` of text}
google::protobuf::Struct BlobInfo(size_t bytes) {
  google::protobuf::Struct info;
  (*info.mutable_fields())["blob"].set_string_value(std::string(bytes, 'x'));
  return info;
}

}  // namespace

// Issue 17, item 4: a merged reply over max_message_bytes failed with gRPC's
// "Sent message larger than max" naming nobody, counted as OK, not logged.
TEST_CASE(
    "A merged Learn reply over max_message_bytes is RESOURCE_EXHAUSTED, "
    "naming each learner's share, and the plan counts as used") {
  // Each learner's reply fits the limit; the two together do not.
  FixedInfoServer bulky0(BlobInfo(40 << 10));
  FixedInfoServer bulky1(BlobInfo(40 << 10));
  auto config = FastConfig(
      {Endpoint("bulky0", bulky0.address), Endpoint("bulky1", bulky1.address)},
      2);
  config.max_message_bytes = 64 << 10;
  auto server = StartReadyAggregator(config);
  auto stub = LearnerStub(server->address());
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  REQUIRE(demand.batch_size() == 8);
  pb::LearnRequest batch = Batch(8, "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = stub->Learn(Deadline().get(), batch, &reply);
  INFO(status.error_message());
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(status.error_message(),
             Catch::Contains("the merged reply is ") &&
                 Catch::Contains("over max_message_bytes (65536)") &&
                 Catch::Contains("bulky0 (" + bulky0.address + ") ") &&
                 Catch::Contains("bulky1 (" + bulky1.address + ") "));
  CHECK(bulky0.learner.learns == 1);
  CHECK(bulky1.learner.learns == 1);
  CHECK(RequestsCounted(*server, "Learn", "RESOURCE_EXHAUSTED") == 1);
  CHECK(RequestsCounted(*server, "Learn", "OK") == 0);
  // They trained: a retry must not train them again.
  const grpc::Status retry = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(retry.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(retry.error_message(), Catch::Contains("already used"));
  CHECK(bulky0.learner.learns == 1);
}

// Issue 17, item 9: a reply nested deeper than protobuf's parse limit was
// reported as "not a LearnReply", which sent people looking for a wrong type.
TEST_CASE("A Learn reply nested deeper than protobuf allows is named as such") {
  google::protobuf::Struct info;
  google::protobuf::Struct* level = &info;
  for (int i = 0; i < 60; ++i) {
    level = (*level->mutable_fields())["deeper"].mutable_struct_value();
  }
  FixedInfoServer deep(info);
  auto server =
      StartReadyAggregator(FastConfig({Endpoint("deep", deep.address)}, 1));
  auto stub = LearnerStub(server->address());
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  pb::LearnRequest batch = Batch(4, "s");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const grpc::Status status = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(status.error_message(),
             Catch::Contains("Learn: deep (" + deep.address +
                             ") sent a LearnReply nested deeper than "
                             "protobuf's limit of 100"));
}
