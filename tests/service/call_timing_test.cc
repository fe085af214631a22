// The timing a caller may ask for, through a real gRPC server on a loopback
// port 0: given back in the trailing metadata only when asked, in the
// documented form, every moment read from the clock it was handed (a
// FakeClock here, so the figures are exact).
#include "lib/service/call_timing.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using std::chrono::microseconds;
using Calls = LearnerCalls<pb::GetResourceRequest, pb::Resource>;

// Answers GetResource as the service would: the handler arrived at `arrived`,
// its learner calls are `calls`, merged at `merged`; replied on `clock`.
class TimedService : public pb::Learner::CallbackService {
 public:
  TimedService(FakeClock* clock, Clock::TimePoint arrived, Calls* calls,
               Clock::TimePoint merged)
      : clock_(clock), arrived_(arrived), calls_(calls), merged_(merged) {}

  grpc::ServerUnaryReactor* GetResource(grpc::CallbackServerContext* context,
                                        const pb::GetResourceRequest*,
                                        pb::Resource*) override {
    if (TimingWanted(*context)) {
      AddTiming(context, arrived_, *calls_, merged_, *clock_);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  FakeClock* const clock_;
  const Clock::TimePoint arrived_;
  Calls* const calls_;
  const Clock::TimePoint merged_;
};

// A server for `service` on 127.0.0.1:0 and a stub to it.
struct Served {
  explicit Served(grpc::Service* service) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port > 0);
    stub = pb::Learner::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~Served() {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  }
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::Learner::Stub> stub;
};

// The call's x-aggregator-timing trailer, or nullopt; `ask` sets the key.
std::optional<std::string> Timing(pb::Learner::Stub& stub, bool ask) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(15));
  if (ask) context.AddMetadata(kTimingKey, "");
  pb::GetResourceRequest request;
  pb::Resource reply;
  const grpc::Status status = stub.GetResource(&context, request, &reply);
  REQUIRE(status.ok());
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto found = trailers.find(kTimingKey);
  if (found == trailers.end()) return std::nullopt;
  return std::string(found->second.data(), found->second.size());
}

int64_t Nanos(Clock::TimePoint t) { return MonotonicNanos(t); }

TEST_CASE(
    "A caller that asks gets arrived, each learner call in learner order, "
    "merged and replied, read from the clock it was handed") {
  FakeClock clock;
  const Clock::TimePoint arrived = clock.Now();
  Calls calls(2);
  calls[0].learner.id = "learner0";
  calls[0].started = arrived + microseconds(10);
  calls[0].finished = arrived + microseconds(300);
  calls[1].learner.id = "learner1";
  calls[1].started = arrived + microseconds(12);
  calls[1].finished = arrived + microseconds(250);
  const Clock::TimePoint merged = arrived + microseconds(320);
  clock.Advance(microseconds(400));
  TimedService service(&clock, arrived, &calls, merged);
  Served served(&service);

  const std::optional<std::string> timing = Timing(*served.stub, true);
  REQUIRE(timing.has_value());
  CHECK(*timing ==
        absl::StrCat("arrived=", Nanos(arrived), ",learner0=",
                     Nanos(calls[0].started), "-", Nanos(calls[0].finished),
                     ",learner1=", Nanos(calls[1].started), "-",
                     Nanos(calls[1].finished), ",merged=", Nanos(merged),
                     ",replied=", Nanos(arrived + microseconds(400))));
  // Costs nothing when not asked for: no trailer at all.
  CHECK_FALSE(Timing(*served.stub, false).has_value());
}

TEST_CASE(
    "A call with no learner call has neither learner entries nor merged") {
  FakeClock clock;
  const Clock::TimePoint arrived = clock.Now();
  Calls none;
  clock.Advance(microseconds(7));
  TimedService service(&clock, arrived, &none, arrived + microseconds(3));
  Served served(&service);
  CHECK(Timing(*served.stub, true) ==
        absl::StrCat("arrived=", Nanos(arrived),
                     ",replied=", Nanos(arrived + microseconds(7))));
}

TEST_CASE("MonotonicNanos is steady_clock's count of nanoseconds") {
  const auto now = std::chrono::steady_clock::now();
  CHECK(MonotonicNanos(now) ==
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            now.time_since_epoch())
            .count());
  CHECK(MonotonicNanos(std::chrono::steady_clock::time_point(
            std::chrono::seconds(2))) == 2000000000);
}

}  // namespace
}  // namespace aggregator
