// Issue 17, item 3: a learner address that leads back to the aggregator (its
// own listen, or an A <-> B cycle) became READY, and one GetData recursed
// 7,304 times in 5 s (RSS 26 -> 936 MiB). Each loop is refused at once now.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "lib/learners/call_path.h"
#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;
using aggregator::AggregatorConfig;
using aggregator::AggregatorServer;
using aggregator::kCallPathKey;
using aggregator::kMaxTreeDepth;
using aggregator::LearnerSnapshot;
using aggregator::LearnerState;

namespace {

// This process's resident set, in bytes.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Reloads a running aggregator (started on `*config`) with `id` at `address`
// added to its learners.
void AddLearner(AggregatorServer& server, AggregatorConfig* config,
                const std::string& id, const std::string& address) {
  config->learners.push_back(Endpoint(id, address));
  REQUIRE(server.Reload(*config).ok());
}

std::string LastError(AggregatorServer& server, const std::string& id) {
  for (const LearnerSnapshot& status : server.pool().Status()) {
    if (status.id == id) return status.last_error;
  }
  return "";
}

// Sends `calls` GetData calls; each must fail with FAILED_PRECONDITION naming
// a call loop within a second. Returns the first failure's message.
std::string EachGetDataRefusedWithinASecond(const std::string& address,
                                            int calls) {
  auto stub = LearnerStub(address);
  std::string first;
  double slowest = 0;
  for (int i = 0; i < calls; ++i) {
    pb::DataDemand demand;
    const auto started = Clock::now();
    const grpc::Status status =
        stub->GetData(Deadline(milliseconds(5000)).get(), {}, &demand);
    const double seconds = Seconds(Clock::now() - started);
    INFO(status.error_message());
    REQUIRE(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    REQUIRE_THAT(status.error_message(), Catch::Contains("call loop"));
    REQUIRE(seconds < 1.0);
    slowest = std::max(slowest, seconds);
    if (first.empty()) first = status.error_message();
  }
  std::printf("%d GetData calls through %s refused, the slowest in %.1f ms\n",
              calls, address.c_str(), slowest * 1000);
  return first;
}

}  // namespace

TEST_CASE(
    "A learner address that is the aggregator itself is failed, not ready") {
  auto learner = StartLearner();
  AggregatorConfig config =
      FastConfig({Endpoint("learner0", learner->address)}, 1);
  auto server = StartReadyAggregator(config);
  const int64_t before = ResidentBytes();
  AddLearner(*server, &config, "self", server->address());
  REQUIRE(Eventually(
      [&] { return StateOf(*server, "self") == LearnerState::kFailed; },
      milliseconds(1000)));
  CHECK_THAT(LastError(*server, "self"),
             Catch::Contains("address is this aggregator"));
  // It is not counted, and calls go to the real learner alone.
  auto stub = LearnerStub(server->address());
  pb::Resource resource;
  REQUIRE(stub->GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.gpus() == 1);
  for (int i = 0; i < 50; ++i) {
    pb::DataDemand demand;
    REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
    CHECK(demand.batch_size() == 32);
  }
  // A hand-made call that claims to have passed through this aggregator is
  // refused at once (what the probe met).
  auto context = Deadline();
  context->AddMetadata(kCallPathKey, server->aggregator_id());
  pb::DataDemand demand;
  const grpc::Status looped = stub->GetData(context.get(), {}, &demand);
  CHECK(looped.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(looped.error_message(),
             Catch::Contains("call loop " + server->aggregator_id() + " -> " +
                             server->aggregator_id()));
  std::printf("self-loop: failed as a learner, RSS %+.1f MiB\n",
              (ResidentBytes() - before) / 1048576.0);
  CHECK(ResidentBytes() - before < (int64_t{64} << 20));
}

TEST_CASE("An A <-> B cycle of aggregators refuses each call within a second") {
  auto learner_a = StartLearner();
  auto learner_b = StartLearner();
  AggregatorConfig config_a =
      FastConfig({Endpoint("learner_a", learner_a->address)}, 1);
  AggregatorConfig config_b =
      FastConfig({Endpoint("learner_b", learner_b->address)}, 1);
  auto a = StartReadyAggregator(config_a);
  auto b = StartReadyAggregator(config_b);
  AddLearner(*a, &config_a, "b", b->address());
  AddLearner(*b, &config_b, "a", a->address());
  REQUIRE(Eventually([&] {
    return StateOf(*a, "b") == LearnerState::kReady &&
           StateOf(*b, "a") == LearnerState::kReady;
  }));
  const int64_t before = ResidentBytes();
  const std::string message = EachGetDataRefusedWithinASecond(a->address(), 50);
  // The cycle, named by both ids, in the order the call went round.
  CHECK_THAT(message,
             Catch::Contains(a->aggregator_id() + " -> " + b->aggregator_id() +
                             " -> " + a->aggregator_id()));
  EachGetDataRefusedWithinASecond(b->address(), 50);
  // No recursion, so nothing piles up.
  std::printf("A <-> B: RSS %+.1f MiB over 100 refused calls\n",
              (ResidentBytes() - before) / 1048576.0);
  CHECK(ResidentBytes() - before < (int64_t{64} << 20));
  // learner_a saw its probe and each GetData once: no call went round.
  CHECK(learner_a->learner->calls() <= 100);
}

TEST_CASE("A call that has passed through too many aggregators is refused") {
  auto learner = StartLearner();
  auto server =
      StartReadyAggregator(FastConfig({Endpoint("l", learner->address)}, 1));
  std::string path;
  for (size_t i = 0; i < kMaxTreeDepth; ++i) {
    path += (i == 0 ? "" : ",") + ("host/" + std::to_string(i));
  }
  auto context = Deadline();
  context->AddMetadata(kCallPathKey, path);
  pb::DataDemand demand;
  const grpc::Status status =
      LearnerStub(server->address())->GetData(context.get(), {}, &demand);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(),
             Catch::Contains("passed through 16 aggregators") &&
                 Catch::Contains("at most 16 deep"));
}
