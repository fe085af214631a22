// RepeatLimiter on a fake clock: a burst per source per window, then one
// summary counting the lines left out, written once the window is over
// whether or not the source writes again.
#include "lib/ops/repeat_limiter.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/clock.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using std::chrono::seconds;

// The summaries written, in order; waits for them with a deadline.
class Summaries {
 public:
  RepeatLimiter::Summarize Sink() {
    return [this](const std::string& source, uint64_t suppressed) {
      std::lock_guard<std::mutex> lock(mu_);
      written_.emplace_back(source, suppressed);
      changed_.notify_all();
    };
  }
  // The first `count` summaries, once written (fewer at the deadline).
  std::vector<std::pair<std::string, uint64_t>> WaitFor(size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, seconds(10),
                      [&] { return written_.size() >= count; });
    return written_;
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu_);
    return written_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::pair<std::string, uint64_t>> written_;
};

int Admitted(RepeatLimiter& limiter, const std::string& source, int lines) {
  int admitted = 0;
  for (int i = 0; i < lines; ++i) admitted += limiter.Admit(source) ? 1 : 0;
  return admitted;
}

TEST_CASE("A source writes its burst per window, then one summary") {
  FakeClock clock;
  Summaries summaries;
  RepeatLimiter limiter({/*burst=*/5, seconds(10), &clock}, summaries.Sink());

  CHECK(Admitted(limiter, "ssl.cc:1", 5000) == 5);
  // Another source has a window of its own.
  CHECK(Admitted(limiter, "other.cc:2", 3) == 3);
  clock.Advance(seconds(9));
  CHECK(Admitted(limiter, "ssl.cc:1", 10) == 0);
  CHECK(summaries.Count() == 0);  // the window is not over

  // The window ends with no further line: the summary comes anyway.
  clock.Advance(seconds(1));
  CHECK(summaries.WaitFor(1) ==
        std::vector<std::pair<std::string, uint64_t>>{{"ssl.cc:1", 5005}});

  // A new window: a new burst.
  CHECK(Admitted(limiter, "ssl.cc:1", 7) == 5);
  clock.Advance(seconds(10));
  CHECK(summaries.WaitFor(2).back() ==
        std::pair<std::string, uint64_t>{"ssl.cc:1", 2});
  // A window with nothing left out ends without a summary.
  CHECK(Admitted(limiter, "ssl.cc:1", 5) == 5);
  clock.Advance(seconds(10));
  CHECK(Admitted(limiter, "ssl.cc:1", 1) == 1);
  CHECK(summaries.Count() == 2);
}

TEST_CASE("A summary still pending precedes the source's next line") {
  // No thread may have written it yet when the source writes again: Admit
  // writes it itself, before its line.
  FakeClock clock;
  std::vector<std::string> log;
  std::mutex log_mu;
  RepeatLimiter limiter(
      {/*burst=*/1, seconds(10), &clock},
      [&](const std::string& source, uint64_t suppressed) {
        std::lock_guard<std::mutex> lock(log_mu);
        log.push_back("summary " + source + " " + std::to_string(suppressed));
      });
  auto write = [&](const std::string& source) {
    if (!limiter.Admit(source)) return;
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back("line " + source);
  };
  write("a");
  write("a");
  write("a");
  clock.Advance(seconds(10));
  write("a");
  std::lock_guard<std::mutex> lock(log_mu);
  CHECK(log == std::vector<std::string>{"line a", "summary a 2", "line a"});
}

TEST_CASE("A limiter has a thread only once it has left a line out") {
  // gRPC's log limiter lives in every daemon: most never need its thread.
  FakeClock clock;
  Summaries summaries;
  const size_t before = testing::ThreadCount(getpid());
  RepeatLimiter limiter({/*burst=*/2, seconds(10), &clock}, summaries.Sink());
  CHECK(Admitted(limiter, "quiet.cc:1", 2) == 2);
  CHECK(testing::ThreadCount(getpid()) == before);
  CHECK(Admitted(limiter, "quiet.cc:1", 1) == 0);
  CHECK(testing::ThreadCount(getpid()) == before + 1);
}

TEST_CASE("Destroying the limiter writes the summaries still pending") {
  FakeClock clock;
  Summaries summaries;
  {
    RepeatLimiter limiter({/*burst=*/2, seconds(10), &clock}, summaries.Sink());
    CHECK(Admitted(limiter, "x.cc:9", 4) == 2);
  }
  CHECK(summaries.WaitFor(1) ==
        std::vector<std::pair<std::string, uint64_t>>{{"x.cc:9", 2}});
}

TEST_CASE("On the steady clock the summary comes once the window is over") {
  Summaries summaries;
  RepeatLimiter limiter({/*burst=*/1, std::chrono::milliseconds(50)},
                        summaries.Sink());
  const auto start = std::chrono::steady_clock::now();
  CHECK(Admitted(limiter, "s.cc:1", 3) == 1);
  CHECK(summaries.WaitFor(1) ==
        std::vector<std::pair<std::string, uint64_t>>{{"s.cc:1", 2}});
  CHECK(std::chrono::steady_clock::now() - start >=
        std::chrono::milliseconds(50));
}

}  // namespace
}  // namespace aggregator
