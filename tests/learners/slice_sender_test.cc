// SliceSender against a fake learner on a real gRPC server (127.0.0.1:0): a
// share collected and sent as one Learn, or streamed as LearnStream messages
// with the head leading the first; empty shares; a learner's error; Cancel
// before and after the call started; and flow control: what a learner does
// not read stays queued. Every wait has a deadline.
#include "lib/learners/slice_sender.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/monitor.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using std::chrono::milliseconds;

constexpr std::chrono::seconds kDeadline(15);

using testing::Monitor;

// A learner that records what each Learn or LearnStream call brought. Its
// LearnStream reads nothing until Release() while `hold_reads` is set.
class FakeLearner : public pb::Learner::CallbackService {
 public:
  struct Received {
    std::string method;
    std::vector<pb::LearnRequest> messages;
  };

  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const pb::LearnRequest* request,
                                  pb::LearnReply* reply) override {
    grpc::Status status;
    monitor.Change([&] {
      calls.push_back({"Learn", {*request}});
      status = answer;
    });
    reply->set_task_id("answered Learn");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  grpc::ServerReadReactor<pb::LearnRequest>* LearnStream(
      grpc::CallbackServerContext*, pb::LearnReply* reply) override {
    return new Reader(this, reply);
  }

  void SetAnswer(grpc::Status status) {
    monitor.Change([&] { answer = std::move(status); });
  }
  void HoldReads() {
    monitor.Change([&] { hold_reads = true; });
  }
  // Lets held streams read.
  void Release() {
    std::vector<std::function<void()>> starts;
    monitor.Change([&] {
      hold_reads = false;
      starts.swap(held);
    });
    for (auto& start : starts) start();
  }

  Monitor monitor;
  grpc::Status answer;                      // by the monitor
  bool hold_reads = false;                  // by the monitor
  std::vector<Received> calls;              // ended calls, by the monitor
  std::vector<std::function<void()>> held;  // by the monitor
  int streams_open = 0;                     // by the monitor

 private:
  class Reader : public grpc::ServerReadReactor<pb::LearnRequest> {
   public:
    Reader(FakeLearner* learner, pb::LearnReply* reply)
        : learner_(learner), reply_(reply) {
      bool hold = false;
      learner_->monitor.Change([&] {
        ++learner_->streams_open;
        hold = learner_->hold_reads;
        if (hold) learner_->held.push_back([this] { StartRead(&message_); });
      });
      if (!hold) StartRead(&message_);
    }
    void OnReadDone(bool ok) override {
      if (ok) {
        received_.push_back(message_);
        StartRead(&message_);
        return;
      }
      grpc::Status status;
      learner_->monitor.Change([&] {
        learner_->calls.push_back({"LearnStream", received_});
        status = learner_->answer;
      });
      reply_->set_task_id("answered LearnStream");
      Finish(status);
    }
    void OnDone() override { delete this; }

   private:
    FakeLearner* const learner_;
    pb::LearnReply* const reply_;
    pb::LearnRequest message_;
    std::vector<pb::LearnRequest> received_;
  };
};

// The fake learner served on 127.0.0.1:0, and a handle to it as the pool
// would give one.
struct Served {
  Served() {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&learner);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    handle.id = "l0";
    handle.address = HostPort::Tcp("127.0.0.1", port);
    handle.generic = std::make_shared<grpc::GenericStub>(grpc::CreateChannel(
        handle.address.ToString(), grpc::InsecureChannelCredentials()));
  }
  ~Served() { server->Shutdown(std::chrono::system_clock::now() + kDeadline); }
  FakeLearner learner;
  std::unique_ptr<grpc::Server> server;
  LearnerHandle handle;
};

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// LearnRequest field 1 records: one sample per `data`.
std::string SampleRecords(const std::vector<std::string>& data) {
  pb::LearnRequest samples;
  for (const std::string& d : data) samples.add_samples()->set_data(d);
  return samples.SerializeAsString();
}

// The head: plan_id and membership.
std::string Head() {
  pb::LearnRequest head;
  head.set_plan_id("plan-7");
  head.mutable_membership()->set_generation(3);
  head.mutable_membership()->add_members("l0");
  return head.SerializeAsString();
}

std::vector<std::string> Data(const pb::LearnRequest& request) {
  std::vector<std::string> data;
  for (const auto& sample : request.samples()) data.push_back(sample.data());
  return data;
}

pb::LearnReply Reply(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  pb::LearnReply reply;
  REQUIRE(reply.ParseFromString(bytes));
  return reply;
}

// One share sent to the served learner: the Call, the sender and what its
// hooks saw.
struct Share {
  Share(Served& served, bool streamed, FakeClock* clock) {
    call.learner = served.handle;
    call.learner.resource.set_learn_stream(streamed);
    call.context = NewLearnerContext(
        nullptr, std::chrono::system_clock::now() + kDeadline, "");
    sender = std::make_unique<SliceSender>(
        &call, Head(),
        SliceSender::Hooks{[this] { hooks.Change([this] { ++sent; }); },
                           [this] { hooks.Change([this] { done = true; }); },
                           clock});
  }
  ~Share() {
    // The sender must outlive a started call.
    if (sender->started()) REQUIRE(AwaitDone());
  }
  bool AwaitDone() {
    return hooks.Await([this] { return done; });
  }
  int Sent() {
    return hooks.Read<int>([this] { return sent; });
  }
  // Adds a piece of samples `data`; returns its size.
  size_t Add(const std::vector<std::string>& data) {
    const std::string records = SampleRecords(data);
    sender->Add(Buffer(records), records.size());
    return records.size();
  }

  SliceSender::Call call;
  std::unique_ptr<SliceSender> sender;
  Monitor hooks;
  int sent = 0;       // by `hooks`
  bool done = false;  // by `hooks`
};

// The learner's calls once `count` have ended.
std::vector<FakeLearner::Received> Calls(Served& served, size_t count) {
  REQUIRE(served.learner.monitor.Await(
      [&] { return served.learner.calls.size() >= count; }));
  return served.learner.monitor.Read<std::vector<FakeLearner::Received>>(
      [&] { return served.learner.calls; });
}

TEST_CASE(
    "To a learner without LearnStream the pieces are kept and sent as one "
    "Learn at Close, the head after the samples") {
  Served served;
  FakeClock clock;
  Share share(served, /*streamed=*/false, &clock);
  CHECK_FALSE(share.sender->streamed());
  const size_t first = share.Add({"a", "b"});
  const size_t second = share.Add({"c"});
  CHECK_FALSE(share.sender->started());
  CHECK(share.sender->queued_bytes() == first + second);
  clock.Advance(milliseconds(5));
  const Clock::TimePoint closed = clock.Now();
  share.sender->Close();
  CHECK(share.sender->started());
  CHECK(share.sender->queued_bytes() == 0);
  REQUIRE(share.AwaitDone());
  CHECK(share.call.status.ok());
  CHECK(share.call.started == closed);
  CHECK(share.call.finished == closed);
  CHECK(Reply(share.call.reply).task_id() == "answered Learn");
  const auto calls = Calls(served, 1);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].method == "Learn");
  REQUIRE(calls[0].messages.size() == 1);
  const pb::LearnRequest& request = calls[0].messages[0];
  CHECK(Data(request) == std::vector<std::string>{"a", "b", "c"});
  CHECK(request.plan_id() == "plan-7");
  CHECK(request.membership().generation() == 3);
  CHECK(share.Sent() == 0);
}

TEST_CASE(
    "To a learner with LearnStream each piece goes on at once as a message, "
    "the head leading the first; its time starts when the share is whole") {
  Served served;
  FakeClock clock;
  Share share(served, /*streamed=*/true, &clock);
  CHECK(share.sender->streamed());
  share.Add({"a", "b"});
  CHECK(share.sender->started());
  share.Add({"c"});
  share.Add({"d"});
  // Each piece is taken by the connection without waiting for Close.
  REQUIRE(share.hooks.Await([&] { return share.sent == 3; }));
  CHECK(share.sender->queued_bytes() == 0);
  clock.Advance(milliseconds(7));
  const Clock::TimePoint whole = clock.Now();
  share.sender->Close();
  REQUIRE(share.AwaitDone());
  CHECK(share.call.status.ok());
  CHECK(share.call.started == whole);
  CHECK(Reply(share.call.reply).task_id() == "answered LearnStream");
  const auto calls = Calls(served, 1);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].method == "LearnStream");
  REQUIRE(calls[0].messages.size() == 3);
  CHECK(Data(calls[0].messages[0]) == std::vector<std::string>{"a", "b"});
  CHECK(calls[0].messages[0].plan_id() == "plan-7");
  CHECK(calls[0].messages[0].membership().generation() == 3);
  CHECK(Data(calls[0].messages[1]) == std::vector<std::string>{"c"});
  CHECK(calls[0].messages[1].plan_id().empty());
  CHECK_FALSE(calls[0].messages[1].has_membership());
  CHECK(Data(calls[0].messages[2]) == std::vector<std::string>{"d"});
}

TEST_CASE("An empty share still makes its call, with the head alone") {
  Served served;
  for (const bool streamed : {false, true}) {
    INFO((streamed ? "streamed" : "unary"));
    Share share(served, streamed, nullptr);
    share.sender->Close();
    CHECK(share.sender->started());
    REQUIRE(share.AwaitDone());
    CHECK(share.call.status.ok());
  }
  const auto calls = Calls(served, 2);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].method == "Learn");
  CHECK(calls[1].method == "LearnStream");
  for (const auto& call : calls) {
    REQUIRE(call.messages.size() == 1);
    CHECK(call.messages[0].samples().empty());
    CHECK(call.messages[0].plan_id() == "plan-7");
  }
}

TEST_CASE("A learner's error is the call's status, either way") {
  Served served;
  served.learner.SetAnswer(
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no task started"));
  for (const bool streamed : {false, true}) {
    INFO((streamed ? "streamed" : "unary"));
    Share share(served, streamed, nullptr);
    share.Add({"a"});
    share.sender->Close();
    REQUIRE(share.AwaitDone());
    CHECK(share.call.status.error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(share.call.status.error_message() == "no task started");
  }
}

TEST_CASE(
    "Cancel: a call not started never starts; a started stream ends "
    "CANCELLED") {
  Served served;
  {
    Share share(served, /*streamed=*/false, nullptr);
    share.Add({"a"});
    share.sender->Cancel();
    CHECK(share.sender->queued_bytes() == 0);
    share.sender->Close();
    share.sender->Add(Buffer(SampleRecords({"b"})), 10);
    CHECK_FALSE(share.sender->started());
    CHECK(share.sender->queued_bytes() == 0);
  }
  {
    served.learner.HoldReads();
    Share share(served, /*streamed=*/true, nullptr);
    share.Add({"a"});
    REQUIRE(served.learner.monitor.Await(
        [&] { return served.learner.streams_open == 1; }));
    share.sender->Cancel();
    REQUIRE(share.AwaitDone());
    CHECK(share.call.status.error_code() == grpc::StatusCode::CANCELLED);
    served.learner.Release();
  }
}

TEST_CASE(
    "Flow control: what a streamed learner does not read stays queued, and "
    "goes once it reads") {
  constexpr int kPieces = 16;
  constexpr size_t kPieceBytes = 1 << 20;
  Served served;
  served.learner.HoldReads();
  Share share(served, /*streamed=*/true, nullptr);
  size_t added = 0;
  for (int i = 0; i < kPieces; ++i) {
    added += share.Add({std::string(kPieceBytes, 'a' + i)});
  }
  REQUIRE(served.learner.monitor.Await(
      [&] { return served.learner.streams_open == 1; }));
  // The connection takes no more than its flow-control windows and buffers
  // (3 of 8 pieces here, read at once or seconds later).
  const size_t queued = share.sender->queued_bytes();
  INFO("queued " << queued << " of " << added << " bytes, " << share.Sent()
                 << " pieces sent");
  CHECK(queued >= added / 2);
  CHECK(share.Sent() < kPieces);
  served.learner.Release();
  REQUIRE(share.hooks.Await([&] { return share.sent == kPieces; }));
  CHECK(share.sender->queued_bytes() == 0);
  share.sender->Close();
  REQUIRE(share.AwaitDone());
  CHECK(share.call.status.ok());
  const auto calls = Calls(served, 1);
  REQUIRE(calls[0].messages.size() == kPieces);
  CHECK(calls[0].messages[kPieces - 1].samples(0).data() ==
        std::string(kPieceBytes, 'a' + kPieces - 1));
}

}  // namespace
}  // namespace aggregator
