// Admission as one lease: what a call takes on admission (its place in flight,
// its batch's bytes, its record in the served metrics) comes back when the
// lease ends, on every path, and draining waits for the leases held. Calls
// made in-process on unbound server contexts: no server, no port.
#include "lib/service/admission_lease.h"

#include <grpcpp/test/default_reactor_test_peer.h>
#include <grpcpp/test/server_context_test_spouse.h>
#include <prometheus/metric_family.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "proto/learner_names.h"

namespace {

using aggregator::Admission;
using aggregator::AdmissionLease;
using aggregator::AggregatorMetrics;

// aggregator_requests_total{rpc, code}: how many calls were recorded served.
double Served(const AggregatorMetrics& metrics, const std::string& rpc,
              const std::string& code) {
  for (const auto& family : metrics.collectable()->Collect()) {
    if (family.name != "aggregator_requests_total") continue;
    for (const auto& metric : family.metric) {
      std::string rpc_label;
      std::string code_label;
      for (const auto& label : metric.label) {
        if (label.name == "rpc") rpc_label = label.value;
        if (label.name == "code") code_label = label.value;
      }
      if (rpc_label == rpc && code_label == code) return metric.counter.value;
    }
  }
  return 0;
}

std::chrono::steady_clock::time_point Now() {
  return std::chrono::steady_clock::now();
}

}  // namespace

TEST_CASE("A lease counts its call in flight until it ends") {
  Admission admission("", nullptr);
  grpc::CallbackServerContext context;
  grpc::Status refused;
  std::unique_ptr<AdmissionLease> lease =
      admission.Admit(&context, "Learn", &refused);
  REQUIRE(lease != nullptr);
  CHECK(refused.ok());
  CHECK(lease->method() == std::string("Learn"));
  CHECK(lease->call_path().empty());
  CHECK(admission.in_flight() == 1);
  CHECK_FALSE(admission.WaitIdle(Now()));
  lease.reset();
  CHECK(admission.in_flight() == 0);
  CHECK(admission.WaitIdle(Now()));
}

TEST_CASE("A lease's bytes count against max_inflight_bytes until freed") {
  Admission admission("", nullptr);
  grpc::CallbackServerContext first_context;
  grpc::CallbackServerContext second_context;
  grpc::Status refused;
  auto first = admission.Admit(&first_context, "Learn", &refused);
  auto second = admission.Admit(&second_context, "LearnStream", &refused);
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  REQUIRE(first->Reserve(100, 150).ok());
  CHECK(admission.inflight_bytes() == 100);
  const absl::Status over = second->Reserve(60, 150);
  CHECK(over.code() == absl::StatusCode::kResourceExhausted);
  CHECK(over.message() ==
        "LearnStream: a batch of 60 bytes would exceed max_inflight_bytes "
        "(150 bytes; 100 in flight now): retry later, or send smaller "
        "batches");
  // A stream's messages grow its one lease.
  REQUIRE(second->Reserve(30, 150).ok());
  REQUIRE(second->Reserve(20, 150).ok());
  CHECK(second->reserved_bytes() == 50);
  CHECK(admission.inflight_bytes() == 150);
  first->FreeBytes();
  CHECK(admission.inflight_bytes() == 50);
  CHECK(admission.in_flight() == 2);  // freed bytes, still in flight
  second.reset();
  CHECK(admission.inflight_bytes() == 0);
  CHECK(admission.in_flight() == 1);
}

TEST_CASE("Finish records the outcome, answers the call and counts it out") {
  AggregatorMetrics metrics;
  Admission admission("", &metrics);
  grpc::CallbackServerContext context;
  grpc::testing::DefaultReactorTestPeer peer(&context);
  auto lease = admission.AdmitUnary(&context, peer.reactor(), "GetData");
  REQUIRE(lease != nullptr);
  REQUIRE(lease->Reserve(10, 100).ok());
  lease->Finish(peer.reactor(),
                grpc::Status(grpc::StatusCode::NOT_FOUND, "no such plan"));
  REQUIRE(peer.test_status_set());
  CHECK(peer.test_status().error_code() == grpc::StatusCode::NOT_FOUND);
  // Counted out at once, before the lease itself goes.
  CHECK(admission.in_flight() == 0);
  CHECK(admission.inflight_bytes() == 0);
  CHECK(Served(metrics, "GetData", "NOT_FOUND") == 1);
  lease.reset();
  CHECK(admission.in_flight() == 0);
  CHECK(Served(metrics, "GetData", "NOT_FOUND") == 1);  // once
}

// Once a unary call is answered, gRPC may end it on another thread, the
// server's Wait return and the service (with its Admission) be destroyed,
// while the thread that answered is still in Finish, on its way to counting
// the call out. The aggregator_server_test crash under TSan (issue 26 item
// 7's case): that late count wrote into freed, reused memory.
TEST_CASE("A lease counts its call out safely after its Admission is gone") {
  auto admission = std::make_unique<Admission>("", nullptr);
  grpc::CallbackServerContext context;
  int64_t in_flight_when_answered = -1;
  grpc::testing::DefaultReactorTestPeer peer(&context, [&](grpc::Status) {
    // Answered first, counted out after (what WaitIdle waits for).
    in_flight_when_answered = admission->in_flight();
    admission.reset();  // the service goes as soon as the call is over
  });
  auto lease = admission->AdmitUnary(&context, peer.reactor(), "GetData");
  REQUIRE(lease != nullptr);
  lease->Finish(peer.reactor(), grpc::Status::OK);
  CHECK(in_flight_when_answered == 1);
  CHECK(admission == nullptr);
  lease.reset();

  // The same for a stream's lease, counted out when it ends.
  admission = std::make_unique<Admission>("", nullptr);
  grpc::Status refused;
  auto stream = admission->Admit(&context, "LearnStream", &refused);
  REQUIRE(stream != nullptr);
  stream->Served(grpc::Status::OK);
  admission.reset();
  stream.reset();
}

TEST_CASE("A stream's lease records its outcome once; its end counts it out") {
  AggregatorMetrics metrics;
  Admission admission("", &metrics);
  grpc::CallbackServerContext context;
  grpc::Status refused;
  auto lease = admission.Admit(&context, "LearnStream", &refused);
  REQUIRE(lease != nullptr);
  REQUIRE(lease->Reserve(10, 100).ok());
  lease->Served(grpc::Status::OK);
  lease->Served(grpc::Status(grpc::StatusCode::INTERNAL, "later"));
  CHECK(admission.inflight_bytes() == 0);
  CHECK(admission.in_flight() == 1);
  lease.reset();
  CHECK(admission.in_flight() == 0);
  CHECK(Served(metrics, "LearnStream", "OK") == 1);
  CHECK(Served(metrics, "LearnStream", "INTERNAL") == 0);
}

TEST_CASE(
    "A lease dropped without an answer gives everything back and "
    "answers its call") {
  AggregatorMetrics metrics;
  Admission admission("", &metrics);
  grpc::CallbackServerContext context;
  grpc::testing::DefaultReactorTestPeer peer(&context);
  {
    auto lease = admission.AdmitUnary(&context, peer.reactor(), "Learn");
    REQUIRE(lease != nullptr);
    REQUIRE(lease->Reserve(10, 100).ok());
    // An early return that forgets to finish the call.
  }
  CHECK(admission.in_flight() == 0);
  CHECK(admission.inflight_bytes() == 0);
  REQUIRE(peer.test_status_set());
  CHECK(peer.test_status().error_code() == grpc::StatusCode::INTERNAL);
  CHECK(peer.test_status().error_message() ==
        "Learn: the call ended without an answer");
  CHECK(Served(metrics, "Learn", "INTERNAL") == 1);
}

TEST_CASE("Draining refuses new calls and waits for the leases held") {
  AggregatorMetrics metrics;
  Admission admission("", &metrics);
  grpc::CallbackServerContext held_context;
  grpc::Status refused;
  auto held = admission.Admit(&held_context, "Learn", &refused);
  REQUIRE(held != nullptr);
  admission.StartDraining();

  grpc::CallbackServerContext late_context;
  grpc::testing::DefaultReactorTestPeer peer(&late_context);
  CHECK(admission.AdmitUnary(&late_context, peer.reactor(), "GetData") ==
        nullptr);
  REQUIRE(peer.test_status_set());
  CHECK(peer.test_status().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(peer.test_status().error_message() ==
        "GetData: aggregatord is shutting down");
  CHECK(Served(metrics, "GetData", "UNAVAILABLE") == 1);
  CHECK(admission.in_flight() == 1);

  CHECK_FALSE(admission.WaitIdle(Now()));
  // A waiter with time to spare is woken by the lease's end (the deadline is
  // only a bound: the test does not wait for it).
  bool idle = false;
  std::thread waiter(
      [&] { idle = admission.WaitIdle(Now() + std::chrono::seconds(60)); });
  held.reset();
  waiter.join();
  CHECK(idle);
}

TEST_CASE("A call that loops back is refused before it counts in") {
  AggregatorMetrics metrics;
  Admission admission("agg-a", &metrics);
  // The test spouse sets a caller's metadata on a ServerContext only.
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  spouse.AddClientMetadata(aggregator::kCallPathKey, "agg-b,agg-a");
  grpc::Status refused;
  CHECK(admission.Admit(&context, "Learn", &refused) == nullptr);
  CHECK(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(admission.in_flight() == 0);
  CHECK(Served(metrics, "Learn", "FAILED_PRECONDITION") == 1);
  // The caller can tell which aggregator answered.
  const auto initial = spouse.GetInitialMetadata();
  auto id = initial.find(aggregator::kAggregatorIdKey);
  REQUIRE(id != initial.end());
  CHECK(id->second == "agg-a");

  SECTION("a call from elsewhere carries the path on") {
    grpc::ServerContext other;
    grpc::testing::ServerContextTestSpouse other_spouse(&other);
    other_spouse.AddClientMetadata(aggregator::kCallPathKey, "agg-b");
    auto lease = admission.Admit(&other, "Learn", &refused);
    REQUIRE(lease != nullptr);
    CHECK(lease->call_path() == "agg-b,agg-a");
  }
}

TEST_CASE("Work the service starts itself holds a lease too, unrecorded") {
  AggregatorMetrics metrics;
  Admission admission("", &metrics);
  auto replay = admission.Hold();
  REQUIRE(replay != nullptr);
  CHECK(admission.in_flight() == 1);
  admission.StartDraining();
  CHECK(admission.Hold() == nullptr);  // none starts once draining
  CHECK_FALSE(admission.WaitIdle(Now()));
  replay.reset();
  CHECK(admission.WaitIdle(Now()));
  for (const auto& family : metrics.collectable()->Collect()) {
    if (family.name == "aggregator_requests_total") {
      CHECK(family.metric.empty());
    }
  }
}
