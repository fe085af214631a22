// Reloader: reloads in request order, one at a time, off the caller's thread.
#include "lib/server/reloader.h"

#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/mutex.h"

namespace aggregator {
namespace {

using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

// A configuration "file" and a reload that reads it, applies it, and can be
// held at its start.
class FakeDaemon {
 public:
  void Write(const std::string& text) {
    MutexLock lock(&mu_);
    file_ = text;
  }
  void Hold() {
    MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    MutexLock lock(&mu_);
    held_ = false;
  }
  // Waits until `count` reloads have started.
  bool AwaitStarted(int count) {
    MutexLock lock(&mu_);
    auto started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return started_ >= count;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&started), absl::Seconds(10));
  }
  absl::StatusOr<ReloadResult> Reload() {
    MutexLock lock(&mu_);
    const std::string read = file_;  // read at the start, as a file is
    ++started_;
    auto released = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_; };
    mu_.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(10));
    applied_.push_back(read);
    return ReloadResult{static_cast<int64_t>(applied_.size()) + 1, read};
  }
  std::vector<std::string> applied() {
    MutexLock lock(&mu_);
    return applied_;
  }

 private:
  Mutex mu_;
  std::string file_ ABSL_GUARDED_BY(mu_) = "v1";
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> applied_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("A reload asked for later applies later: the newest file runs") {
  // Regression: a SIGHUP reading a slow file, then an admin Reload of a newer
  // file: the newer one was applied, then the older one overwrote it.
  FakeDaemon daemon;
  Reloader reloader([&] { return daemon.Reload(); });
  daemon.Hold();
  reloader.RequestAsync();  // SIGHUP: reads v1, then is slow
  REQUIRE(daemon.AwaitStarted(1));
  daemon.Write("v2");
  auto admin = std::async(std::launch::async, [&] {
    return reloader.Request(Steady::now() + seconds(10));
  });
  daemon.Release();
  absl::StatusOr<ReloadResult> reply = admin.get();
  REQUIRE(reply.ok());
  CHECK(reply->summary == "v2");  // the reply says what was applied
  CHECK(daemon.applied() == std::vector<std::string>{"v1", "v2"});
}

TEST_CASE("Requests made during a reload are served by one more reload") {
  FakeDaemon daemon;
  Reloader reloader([&] { return daemon.Reload(); });
  daemon.Hold();
  reloader.RequestAsync();
  REQUIRE(daemon.AwaitStarted(1));
  daemon.Write("v3");
  std::vector<std::future<absl::StatusOr<ReloadResult>>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] {
      return reloader.Request(Steady::now() + seconds(10));
    }));
  }
  reloader.RequestAsync();
  const auto queued_by = Steady::now() + seconds(10);
  while (reloader.QueuedRequests() < 3 && Steady::now() < queued_by) {
    std::this_thread::yield();
  }
  REQUIRE(reloader.QueuedRequests() == 3);
  daemon.Release();
  for (auto& reply : waiting) {
    absl::StatusOr<ReloadResult> result = reply.get();
    REQUIRE(result.ok());
    CHECK(result->summary == "v3");
  }
  CHECK(daemon.applied() == std::vector<std::string>{"v1", "v3"});
  CHECK(daemon.applied().back() == "v3");
}

TEST_CASE("A request gives up at its deadline; stopping answers UNAVAILABLE") {
  FakeDaemon daemon;
  Reloader reloader([&] { return daemon.Reload(); });
  daemon.Hold();
  auto late = reloader.Request(Steady::now() + std::chrono::milliseconds(50));
  CHECK(late.status().code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(daemon.AwaitStarted(1));
  auto queued = std::async(std::launch::async, [&] {
    return reloader.Request(Steady::now() + seconds(10));
  });
  daemon.Release();
  reloader.Stop();
  const absl::StatusCode code = queued.get().status().code();
  // Served by a reload that started before the stop, or refused by it.
  CHECK((code == absl::StatusCode::kOk ||
         code == absl::StatusCode::kUnavailable));
  CHECK(reloader.Request(Steady::now() + seconds(1)).status().code() ==
        absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace aggregator
