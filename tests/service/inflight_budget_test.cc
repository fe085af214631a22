// InflightBudget: leases on a byte budget, refused past the limit with an
// error naming the figures, given back when they end; Extend on the same
// terms; the limit read at each call; many holders on many threads.
#include "lib/service/inflight_budget.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

namespace aggregator {
namespace {

TEST_CASE("A lease holds its bytes until it ends; up to the limit is within") {
  InflightBudget budget;
  CHECK(budget.in_flight() == 0);
  auto first = budget.Acquire("Learn", 60, 100);
  REQUIRE(first.ok());
  CHECK((*first)->bytes() == 60);
  CHECK(budget.in_flight() == 60);
  {
    // Exactly the rest of the limit is still within it.
    auto second = budget.Acquire("Learn", 40, 100);
    REQUIRE(second.ok());
    CHECK(budget.in_flight() == 100);
  }
  CHECK(budget.in_flight() == 60);
  first->reset();
  CHECK(budget.in_flight() == 0);
}

TEST_CASE(
    "A batch that would take the total past the limit is refused with "
    "RESOURCE_EXHAUSTED naming the request and the figures, and takes "
    "nothing") {
  InflightBudget budget;
  auto held = budget.Acquire("Learn", 50, 100);
  REQUIRE(held.ok());
  auto refused = budget.Acquire("LearnStream", 51, 100);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.status().message() ==
        "LearnStream: a batch of 51 bytes would exceed max_inflight_bytes "
        "(100 bytes; 50 in flight now): retry later, or send smaller batches");
  CHECK(budget.in_flight() == 50);
  // A batch larger than the whole limit is refused on an idle budget too.
  held->reset();
  auto too_big = budget.Acquire("Learn", 101, 100);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.status().message() ==
        "Learn: a batch of 101 bytes would exceed max_inflight_bytes (100 "
        "bytes; 0 in flight now): retry later, or send smaller batches");
  CHECK(budget.in_flight() == 0);
}

TEST_CASE("The limit is read at each call: a lowered one refuses the next") {
  InflightBudget budget;
  auto held = budget.Acquire("Learn", 80, 100);
  REQUIRE(held.ok());
  // A reload lowered the limit below what is held: the lease stays, the next
  // request is refused.
  CHECK_FALSE(budget.Acquire("Learn", 1, 50).ok());
  CHECK(budget.in_flight() == 80);
  // And raised it again.
  auto more = budget.Acquire("Learn", 100, 200);
  REQUIRE(more.ok());
  CHECK(budget.in_flight() == 180);
}

TEST_CASE(
    "Extend grows a lease on Acquire's terms, a refused Extend leaves lease "
    "and total as they were, and the lease gives all its bytes back") {
  InflightBudget budget;
  auto lease = budget.Acquire("LearnStream", 10, 100);
  REQUIRE(lease.ok());
  CHECK((*lease)->Extend("LearnStream", 30, 100).ok());
  CHECK((*lease)->bytes() == 40);
  CHECK(budget.in_flight() == 40);
  const absl::Status refused = (*lease)->Extend("LearnStream", 61, 100);
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message() ==
        "LearnStream: a batch of 61 bytes would exceed max_inflight_bytes "
        "(100 bytes; 40 in flight now): retry later, or send smaller batches");
  CHECK((*lease)->bytes() == 40);
  CHECK(budget.in_flight() == 40);
  CHECK((*lease)->Extend("LearnStream", 60, 100).ok());
  CHECK(budget.in_flight() == 100);
  lease->reset();
  CHECK(budget.in_flight() == 0);
}

TEST_CASE(
    "Leases taken and given back on many threads never take the total past "
    "the limit, and all come back") {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  constexpr int64_t kLimit = 250;
  InflightBudget budget;
  std::atomic<int> granted{0};
  std::atomic<int> refused{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        auto lease = budget.Acquire("Learn", 40 + t * 10, kLimit);
        if (!lease.ok()) {
          ++refused;
          continue;
        }
        ++granted;
        if (budget.in_flight() > kLimit) over = true;
        if ((*lease)->Extend("Learn", 5, kLimit).ok() &&
            budget.in_flight() > kLimit) {
          over = true;
        }
        // Released here, maybe on another thread's turn.
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK_FALSE(over);
  CHECK(granted + refused == kThreads * kRounds);
  CHECK(granted > 0);
  CHECK(budget.in_flight() == 0);
}

}  // namespace
}  // namespace aggregator
