// LateAnswers on a FakeClock: the timer armed when one learner of a fan-out is
// left, what happens when it fires (the call cancelled, the learner flagged
// with a reason naming the rule, its metric set) and when the fan-out ends
// first; unflagging on a later answer; the auto rule learning from End.
// The fan-out's one_left hook is called as FanOut calls it; whether the timer
// has run is known by a sentinel timer on the same thread (callbacks run in
// time order), never by sleeping.
#include "lib/service/late_answers.h"

#include <prometheus/metric_family.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using LateAfter = StragglerConfig::LateAfter;

constexpr std::chrono::seconds kDeadline(15);

// A one-shot event a test thread waits on, with a deadline.
class Flag {
 public:
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    changed_.notify_all();
  }
  bool IsSet() {
    std::lock_guard<std::mutex> lock(mu_);
    return set_;
  }
  // True if set within kDeadline.
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, kDeadline, [this] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool set_ = false;
};

// Returns once the timer thread has run every timer due by `when` (which must
// be due now): a sentinel scheduled then runs after them.
void RunTimersUpTo(LateAnswers& late, Clock::TimePoint when) {
  Flag ran;
  late.timers().Schedule(when, [&ran] { ran.Set(); });
  REQUIRE(ran.Wait());
}

LateAfter Fixed(int ms) {
  LateAfter rule;
  rule.mode = LateAfter::Mode::kFixed;
  rule.fixed = milliseconds(ms);
  return rule;
}

std::vector<LearnerHandle> Learners() {
  std::vector<LearnerHandle> learners(3);
  learners[0].id = "a";
  learners[1].id = "b";
  learners[2].id = "c";
  for (auto& learner : learners) {
    learner.address = HostPort::Tcp("127.0.0.1", 1);
  }
  return learners;
}

std::vector<LateAnswers::Answer> AllOk(int ms) {
  return std::vector<LateAnswers::Answer>(3, {true, milliseconds(ms)});
}

// aggregator_learner_late{learner} (-1: no series) and its _total.
double Metric(const AggregatorMetrics& metrics, const std::string& name,
              const std::string& learner) {
  for (const auto& family : metrics.collectable()->Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "learner" && label.value == learner) {
          return name == "aggregator_learner_late" ? metric.gauge.value
                                                   : metric.counter.value;
        }
      }
    }
  }
  return -1;
}

TEST_CASE(
    "A learner still silent late_after once the others answered is found "
    "late: its call cancelled, flagged with a reason naming the rule, and "
    "unflagged when it answers a later call") {
  FakeClock clock;
  AggregatorMetrics metrics;
  LateAnswers late(&clock, &metrics);
  late.Collect({"a", "b", "c"});
  CHECK(Metric(metrics, "aggregator_learner_late", "c") == 0);

  auto watch =
      late.Begin("Learn", Fixed(250), OnLearnerFailure::kFail, Learners());
  Flag cancelled;
  late.Hook(watch)(2, [&cancelled] { cancelled.Set(); });
  // 1 ms early: not late yet.
  clock.Advance(milliseconds(249));
  RunTimersUpTo(late, clock.Now());
  CHECK_FALSE(cancelled.IsSet());
  CHECK(late.LateMs().empty());
  clock.Advance(milliseconds(1));
  REQUIRE(cancelled.Wait());
  CHECK(late.LateMs() == std::map<std::string, int64_t>{{"c", 250}});
  CHECK(Metric(metrics, "aggregator_learner_late", "c") == 1);
  CHECK(Metric(metrics, "aggregator_learner_late_total", "c") == 1);
  clock.Advance(milliseconds(100));
  CHECK(late.LateMs() == std::map<std::string, int64_t>{{"c", 350}});

  // The fan-out ends (c's call cancelled): End names the late learner.
  std::vector<LateAnswers::Answer> answers = AllOk(3);
  answers[2] = {false, milliseconds(350)};
  const auto found = late.End(*watch, answers);
  REQUIRE(found.has_value());
  CHECK(found->index == 2);
  CHECK(found->why ==
        "late: silent 250 ms after the other 2 learner(s) answered Learn "
        "(straggler.late_after 250ms)");
  CHECK(late.LateMs().count("c") == 1);

  // c answers the next call: no longer late.
  auto next =
      late.Begin("Learn", Fixed(250), OnLearnerFailure::kFail, Learners());
  CHECK_FALSE(late.End(*next, AllOk(2)).has_value());
  CHECK(late.LateMs().empty());
  CHECK(Metric(metrics, "aggregator_learner_late", "c") == 0);
  CHECK(Metric(metrics, "aggregator_learner_late_total", "c") == 1);
}

TEST_CASE(
    "A fan-out that ends before late_after cancels its timer: nobody is "
    "late, nothing is cancelled") {
  FakeClock clock;
  LateAnswers late(&clock, nullptr);
  auto watch =
      late.Begin("GetData", Fixed(100), OnLearnerFailure::kShrink, Learners());
  Flag cancelled;
  late.Hook(watch)(0, [&cancelled] { cancelled.Set(); });
  clock.Advance(milliseconds(99));
  CHECK_FALSE(late.End(*watch, AllOk(99)).has_value());
  clock.Advance(milliseconds(1000));
  RunTimersUpTo(late, clock.Now());
  CHECK_FALSE(cancelled.IsSet());
  CHECK(late.LateMs().empty());
}

TEST_CASE(
    "A learner found late on one call stays flagged while it fails the next, "
    "and is late since the others of its first late call answered") {
  FakeClock clock;
  LateAnswers late(&clock, nullptr);
  for (int round = 0; round < 2; ++round) {
    auto watch =
        late.Begin("Learn", Fixed(50), OnLearnerFailure::kShrink, Learners());
    Flag cancelled;
    late.Hook(watch)(1, [&cancelled] { cancelled.Set(); });
    clock.Advance(milliseconds(50));
    REQUIRE(cancelled.Wait());
    std::vector<LateAnswers::Answer> answers = AllOk(1);
    answers[1].ok = false;
    const auto found = late.End(*watch, answers);
    REQUIRE(found.has_value());
    CHECK(found->index == 1);
  }
  // The others of the first call answered 100 ms ago.
  CHECK(late.LateMs() == std::map<std::string, int64_t>{{"b", 100}});
}

TEST_CASE(
    "late_after off never arms a timer; auto arms none before every other "
    "learner has kMinSamples answers, then the floor, named as auto") {
  FakeClock clock;
  LateAnswers late(&clock, nullptr);
  LateAfter off;
  off.mode = LateAfter::Mode::kOff;
  {
    auto watch = late.Begin("Learn", off, OnLearnerFailure::kFail, Learners());
    Flag cancelled;
    late.Hook(watch)(2, [&cancelled] { cancelled.Set(); });
    clock.Advance(std::chrono::hours(1));
    RunTimersUpTo(late, clock.Now());
    CHECK_FALSE(cancelled.IsSet());
    CHECK_FALSE(late.End(*watch, AllOk(1)).has_value());
  }
  // One answer each so far (the call above): too few for auto.
  const LateAfter automatic;
  for (size_t call = 1; call < LateWatch::kMinSamples; ++call) {
    auto watch =
        late.Begin("Learn", automatic, OnLearnerFailure::kFail, Learners());
    Flag cancelled;
    late.Hook(watch)(2, [&cancelled] { cancelled.Set(); });
    clock.Advance(std::chrono::hours(1));
    RunTimersUpTo(late, clock.Now());
    CHECK_FALSE(cancelled.IsSet());
    // Each End teaches the rule the learners' times.
    CHECK_FALSE(late.End(*watch, AllOk(1)).has_value());
  }
  // kMinSamples answers of 1 ms each: late after the floor.
  auto watch =
      late.Begin("Learn", automatic, OnLearnerFailure::kFail, Learners());
  Flag cancelled;
  late.Hook(watch)(2, [&cancelled] { cancelled.Set(); });
  clock.Advance(LateWatch::kFloor - milliseconds(1));
  RunTimersUpTo(late, clock.Now());
  CHECK_FALSE(cancelled.IsSet());
  clock.Advance(milliseconds(1));
  REQUIRE(cancelled.Wait());
  std::vector<LateAnswers::Answer> answers = AllOk(1);
  answers[2].ok = false;
  const auto found = late.End(*watch, answers);
  REQUIRE(found.has_value());
  CHECK(found->why ==
        "late: silent 500 ms after the other 2 learner(s) answered Learn "
        "(straggler.late_after auto: 500 ms)");
}

}  // namespace
}  // namespace aggregator
