// A thread child's channel with a real child thread: requests in order, a
// child blocked (or spinning) until one arrives, a stop that ends the serving
// loop and reaches the child's object, replies that wake the supervisor's
// loop, and the wait for the child's exit. Every wait has a deadline.
#include "lib/supervisor/thread_channel.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace aggregator::supervisor_internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr seconds kDeadline(15);

v1::WorkerRequest Request(const std::string& id) {
  v1::WorkerRequest request;
  request.set_req_id(id);
  request.set_method("step");
  return request;
}

// A child thread's PopRequest, whose outcome the test waits for.
struct Pop {
  explicit Pop(ThreadChannel& channel) {
    result = std::async(std::launch::async, [&channel] {
      v1::WorkerRequest request;
      const bool got = channel.PopRequest(&request);
      return got ? request.req_id() : std::string("(stopped)");
    });
  }
  // The popped request's id, "(stopped)", or "(no answer)" by the deadline.
  std::string Get(std::chrono::nanoseconds within = kDeadline) {
    if (result.wait_for(within) != std::future_status::ready) {
      return "(no answer)";
    }
    return result.get();
  }
  std::future<std::string> result;
};

TEST_CASE("Requests reach the child in the order they were pushed") {
  ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
  channel.PushRequest(Request("1"));
  channel.PushRequest(Request("2"));
  channel.PushRequest(Request("3"));
  for (const char* id : {"1", "2", "3"}) {
    v1::WorkerRequest request;
    REQUIRE(channel.PopRequest(&request));
    CHECK(request.req_id() == id);
  }
}

TEST_CASE(
    "A child waits for the next request, blocked or spinning, and gets it "
    "when it is pushed from another thread") {
  for (const auto spin :
       {milliseconds(0), milliseconds(200), milliseconds(5000)}) {
    INFO("spin " << spin.count() << " ms");
    ThreadChannel channel(std::make_shared<LoopWaker>(), spin);
    Pop pop(channel);
    // Nothing to take yet.
    CHECK(pop.result.wait_for(milliseconds(20)) == std::future_status::timeout);
    channel.PushRequest(Request("late"));
    CHECK(pop.Get() == "late");
  }
}

TEST_CASE(
    "RequestStop ends the serving loop: a waiting child returns false at "
    "once, even while spinning, and requests still queued are not served") {
  SECTION("blocked") {
    ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
    Pop pop(channel);
    channel.RequestStop();
    CHECK(pop.Get() == "(stopped)");
  }
  SECTION("spinning: the stop ends the spin long before it would end") {
    ThreadChannel channel(std::make_shared<LoopWaker>(), seconds(30));
    Pop pop(channel);
    channel.RequestStop();
    const auto start = std::chrono::steady_clock::now();
    CHECK(pop.Get(seconds(10)) == "(stopped)");
    CHECK(std::chrono::steady_clock::now() - start < seconds(10));
  }
  SECTION("queued") {
    ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
    channel.PushRequest(Request("never"));
    channel.RequestStop();
    v1::WorkerRequest request;
    CHECK_FALSE(channel.PopRequest(&request));
  }
}

TEST_CASE(
    "A stop reaches the child's object, whether it was set before or after "
    "the stop") {
  {
    ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
    auto object = std::make_shared<WorkerObject>();
    channel.SetObject(object);
    CHECK_FALSE(object->stop_requested());
    channel.RequestStop();
    CHECK(object->stop_requested());
  }
  {
    ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
    channel.RequestStop();
    auto object = std::make_shared<WorkerObject>();
    channel.SetObject(object);
    CHECK(object->stop_requested());
  }
}

TEST_CASE(
    "Replies wake the supervisor's loop and are taken in order, all at "
    "once") {
  auto waker = std::make_shared<LoopWaker>();
  REQUIRE(waker->fd() >= 0);
  ThreadChannel channel(waker, milliseconds(0));
  CHECK_FALSE(channel.has_replies());
  const uint64_t before = waker->seq();
  std::thread child([&channel] {
    for (const char* id : {"a", "b"}) {
      v1::WorkerReply reply;
      reply.set_req_id(id);
      channel.PushReply(std::move(reply));
    }
  });
  child.join();
  CHECK(waker->seq() - before == 2);
  CHECK(channel.has_replies());
  std::vector<v1::WorkerReply> replies;
  channel.TakeReplies(replies);
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].req_id() == "a");
  CHECK(replies[1].req_id() == "b");
  CHECK_FALSE(channel.has_replies());
  std::vector<v1::WorkerReply> none;
  channel.TakeReplies(none);
  CHECK(none.empty());
}

TEST_CASE(
    "WaitExited: false at its deadline while the child runs, true once it "
    "has exited") {
  ThreadChannel channel(std::make_shared<LoopWaker>(), milliseconds(0));
  CHECK_FALSE(channel.WaitExited(RealClock::now() + milliseconds(50)));
  CHECK_FALSE(channel.WaitExited(RealClock::now() - milliseconds(1)));
  std::thread child([&channel] { channel.MarkExited(); });
  CHECK(channel.WaitExited(RealClock::now() + kDeadline));
  child.join();
  CHECK(channel.WaitExited(RealClock::now()));
}

}  // namespace
}  // namespace aggregator::supervisor_internal
