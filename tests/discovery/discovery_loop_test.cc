// The discovery loop (lib/discovery/discovery_loop.h) with sources the test
// scripts (the loop is under test; the sources are its peers) and a fake
// clock: stable order, errors that keep the last learners, failure reports
// once per episode, reloads, stop.
#include "lib/discovery/discovery_loop.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "tests/testing/log_capture.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

// What a scripted source answers and what it was asked.
struct Script {
  Mutex mu;
  absl::StatusOr<std::vector<HostPort>> answer ABSL_GUARDED_BY(mu) =
      std::vector<HostPort>{};
  bool throw_next ABSL_GUARDED_BY(mu) = false;
  bool hang ABSL_GUARDED_BY(mu) = false;  // until stopped
  absl::Status report_answer ABSL_GUARDED_BY(mu);
  std::vector<std::vector<HostPort>> reports ABSL_GUARDED_BY(mu);
  int fetches ABSL_GUARDED_BY(mu) = 0;

  void Answer(absl::StatusOr<std::vector<HostPort>> next) {
    MutexLock lock(&mu);
    answer = std::move(next);
  }
  std::vector<std::vector<HostPort>> Reports() {
    MutexLock lock(&mu);
    return reports;
  }
};

class ScriptedSource : public LearnerSource {
 public:
  explicit ScriptedSource(Script* script) : script_(script) {}

  absl::StatusOr<std::vector<HostPort>> Fetch(
      const RequestLimits& limits) override {
    bool hang = false;
    {
      MutexLock lock(&script_->mu);
      ++script_->fetches;
      hang = script_->hang;
      if (script_->throw_next) {
        script_->throw_next = false;
        throw std::runtime_error("scripted failure");
      }
    }
    while (hang && !limits.stopped()) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (hang) return absl::CancelledError("stopped");
    MutexLock lock(&script_->mu);
    return script_->answer;
  }
  absl::Status ReportFailed(const std::vector<HostPort>& learners,
                            const RequestLimits&) override {
    MutexLock lock(&script_->mu);
    script_->reports.push_back(learners);
    return script_->report_answer;
  }

 private:
  Script* const script_;
};

HostPort L(const char* host) { return HostPort::Tcp(host, 22300); }

DnsSourceConfig Dns(const char* name, milliseconds refresh = seconds(1)) {
  DnsSourceConfig dns;
  dns.name = name;
  dns.port = 22300;
  dns.refresh = refresh;
  return dns;
}

OrchestratorSourceConfig Orchestrator(milliseconds report_after) {
  OrchestratorSourceConfig orchestrator;
  orchestrator.url = "http://orchestrator.test";
  orchestrator.pod_namespace = "ns";
  orchestrator.name = "aggregator";
  orchestrator.refresh = seconds(1);
  orchestrator.report_failed_after = report_after;
  return orchestrator;
}

// Within kLongWait: the loop's threads share a loaded machine.
template <typename Condition>
bool Eventually(Condition condition) {
  return testing::Eventually(condition, testing::kLongWait);
}

// A loop over scripted sources (one Script per source name) on a fake clock.
struct Fixture {
  FakeClock clock;
  std::map<std::string, Script> scripts;
  Mutex mu;
  std::set<std::string> failed ABSL_GUARDED_BY(mu);
  std::atomic<int> changes{0};
  // How many of the next calls of each hook throw.
  std::atomic<int> make_source_throws{0};
  std::atomic<int> failed_learners_throws{0};
  std::atomic<int> on_change_throws{0};
  std::unique_ptr<DiscoveryLoop> loop;

  // Throws when `count` says so, counting down.
  static void MaybeThrow(std::atomic<int>& count, const char* hook) {
    if (count.load() > 0) {
      --count;
      throw std::runtime_error(std::string(hook) + " failed");
    }
  }

  Fixture() {
    DiscoveryHooks hooks;
    hooks.clock = &clock;
    hooks.on_change = [this] {
      ++changes;
      MaybeThrow(on_change_throws, "on_change");
    };
    hooks.failed_learners = [this] {
      MaybeThrow(failed_learners_throws, "failed_learners");
      MutexLock lock(&mu);
      return failed;
    };
    hooks.make_source = [this](const LearnerSourceConfig& config) {
      MaybeThrow(make_source_throws, "make_source");
      const std::string key = LearnerSourceKey(config);
      return std::make_unique<ScriptedSource>(&scripts[key]);
    };
    // Scripts exist before their sources ask for them (std::map nodes stay).
    for (const char* key :
         {"dns a.test:22300", "dns b.test:22300",
          "orchestrator http://orchestrator.test ns/aggregator"}) {
      scripts[key];
    }
    loop = std::make_unique<DiscoveryLoop>(std::move(hooks));
  }

  Script& script(const std::string& key) { return scripts.at(key); }
  void SetFailed(std::set<std::string> ids) {
    MutexLock lock(&mu);
    failed = std::move(ids);
  }
  int64_t Refreshes(size_t source = 0) {
    auto status = loop->Status();
    return source < status.size() ? status[source].refreshes : -1;
  }
  // Moves the clock by one refresh and waits until the source has refreshed.
  void NextRefresh(size_t source = 0, milliseconds step = seconds(1)) {
    const int64_t before = Refreshes(source);
    clock.Advance(step);
    REQUIRE(Eventually([&] { return Refreshes(source) > before; }));
  }
};

TEST_CASE(
    "A source's learners keep their places across refreshes; new ones "
    "are appended") {
  Fixture f;
  Script& script = f.script("dns a.test:22300");
  script.Answer(std::vector<HostPort>{L("10.0.0.2"), L("10.0.0.1")});
  f.loop->Apply({Dns("a.test")});
  REQUIRE(Eventually([&] { return f.Refreshes() == 1; }));
  CHECK(f.loop->Members() ==
        std::vector<std::vector<HostPort>>{{L("10.0.0.2"), L("10.0.0.1")}});
  // on_change runs after the refresh is counted, outside the lock.
  CHECK(Eventually([&] { return f.changes == 1; }));

  script.Answer(
      std::vector<HostPort>{L("10.0.0.3"), L("10.0.0.1"), L("10.0.0.2")});
  f.NextRefresh();
  CHECK(f.loop->Members()[0] ==
        std::vector<HostPort>{L("10.0.0.2"), L("10.0.0.1"), L("10.0.0.3")});
  script.Answer(std::vector<HostPort>{L("10.0.0.4"), L("10.0.0.1")});
  f.NextRefresh();
  CHECK(f.loop->Members()[0] ==
        std::vector<HostPort>{L("10.0.0.1"), L("10.0.0.4")});
  CHECK(Eventually([&] { return f.changes == 3; }));
  // The same answer again changes nothing: once the second such refresh is
  // counted, the first has run its course, on_change included.
  f.NextRefresh();
  f.NextRefresh();
  CHECK(f.changes == 3);

  // A refresh is due `refresh` after the last one began, not earlier: one
  // that ran at 999 ms would have ended 1 ms before the clock's time now, and
  // the next would be due a second later.
  const int64_t before = f.Refreshes();
  f.clock.Advance(milliseconds(999));
  f.NextRefresh(0, milliseconds(1));
  const SourceSnapshot status = f.loop->Status()[0];
  CHECK(status.refreshes == before + 1);
  CHECK(status.since_last_refresh == std::chrono::nanoseconds(0));
}

TEST_CASE(
    "A failing source keeps its last learners; the failure is logged "
    "once per episode, counted and shown") {
  testing::CaptureSink& logs = testing::CapturedLogs();
  const size_t logged_before =
      logs.Count("learner source dns a.test:22300: refresh failed");
  Fixture f;
  Script& script = f.script("dns a.test:22300");
  script.Answer(std::vector<HostPort>{L("10.0.0.1"), L("10.0.0.2")});
  f.loop->Apply({Dns("a.test")});
  REQUIRE(Eventually([&] { return f.Refreshes() == 1; }));

  script.Answer(absl::UnavailableError("DNS server 127.0.0.1:9: refused"));
  for (int i = 0; i < 3; ++i) f.NextRefresh();
  {
    MutexLock lock(&script.mu);
    script.throw_next = true;  // an exception is an error like any other
  }
  f.NextRefresh();
  SourceSnapshot status = f.loop->Status()[0];
  CHECK(status.learners == std::vector<HostPort>{L("10.0.0.1"), L("10.0.0.2")});
  CHECK(status.refreshes == 5);
  CHECK(status.errors == 4);
  CHECK(status.last_error == "unexpected exception: scripted failure");
  CHECK(f.changes == 1);
  CHECK(logs.Count("learner source dns a.test:22300: refresh failed") ==
        logged_before + 1);

  script.Answer(std::vector<HostPort>{L("10.0.0.2")});
  f.NextRefresh();
  status = f.loop->Status()[0];
  CHECK(status.last_error.empty());
  CHECK(status.learners == std::vector<HostPort>{L("10.0.0.2")});
  CHECK(status.since_last_refresh == std::chrono::nanoseconds(0));
  CHECK(logs.Count(
            "learner source dns a.test:22300: refreshes succeed again") >= 1);
  // A second episode is logged again.
  script.Answer(absl::DeadlineExceededError("no answer"));
  f.NextRefresh();
  CHECK(logs.Count("learner source dns a.test:22300: refresh failed") ==
        logged_before + 2);
}

TEST_CASE(
    "A learner failed for report_failed_after is reported once per "
    "failure episode; a failed report is sent again with backoff") {
  Fixture f;
  Script& script =
      f.script("orchestrator http://orchestrator.test ns/aggregator");
  const HostPort a = HostPort::Tcp("learner-0.ns", 22300);
  const HostPort b = HostPort::Tcp("learner-1.ns", 22300);
  script.Answer(std::vector<HostPort>{a, b});
  f.loop->Apply({Orchestrator(seconds(3))});
  REQUIRE(Eventually([&] { return f.Refreshes() == 1; }));

  // The episode starts at the first refresh that sees it failed.
  f.SetFailed({a.ToString(), "someone-else:1"});
  f.NextRefresh();  // t = 0 of the episode
  f.NextRefresh();
  f.NextRefresh();
  CHECK(script.Reports().empty());
  f.NextRefresh();  // 3 s failed
  CHECK(script.Reports() == std::vector<std::vector<HostPort>>{{a}});
  for (int i = 0; i < 4; ++i) f.NextRefresh();
  CHECK(script.Reports().size() == 1);  // once per episode
  CHECK(f.loop->Status()[0].reported == 1);

  // Ready again: the episode ends. Failed again: a new one, reported again;
  // the report fails twice and is sent again after 1 s, then 2 s.
  f.SetFailed({});
  f.NextRefresh();
  f.SetFailed({a.ToString(), b.ToString()});
  {
    MutexLock lock(&script.mu);
    script.report_answer = absl::UnavailableError("HTTP 500");
  }
  for (int i = 0; i < 4; ++i) f.NextRefresh();  // 3 s: due, and fails
  CHECK(script.Reports().size() == 2);
  f.NextRefresh();  // +1 s: sent again, fails again
  CHECK(script.Reports().size() == 3);
  f.NextRefresh();  // +1 s of the 2 s: not yet
  CHECK(script.Reports().size() == 3);
  {
    MutexLock lock(&script.mu);
    script.report_answer = absl::OkStatus();
  }
  f.NextRefresh();  // +2 s: sent, accepted
  f.NextRefresh();
  f.NextRefresh();
  const auto reports = script.Reports();
  REQUIRE(reports.size() == 4);
  CHECK(reports[3] == std::vector<HostPort>{a, b});
  const SourceSnapshot status = f.loop->Status()[0];
  CHECK(status.reported == 3);
  CHECK(status.report_errors == 2);

  // A learner that leaves the source ends its episode too.
  f.SetFailed({b.ToString()});
  script.Answer(std::vector<HostPort>{a});
  for (int i = 0; i < 5; ++i) f.NextRefresh();
  CHECK(script.Reports().size() == 4);
}

TEST_CASE(
    "A source that cannot be built or a hook that throws fails that "
    "refresh, or is logged; the source's thread goes on") {
  testing::CaptureSink& logs = testing::CapturedLogs();
  Fixture f;
  Script& script =
      f.script("orchestrator http://orchestrator.test ns/aggregator");
  const HostPort a = HostPort::Tcp("learner-0.ns", 22300);
  const HostPort b = HostPort::Tcp("learner-1.ns", 22300);
  script.Answer(std::vector<HostPort>{a});
  f.make_source_throws = 1;
  f.loop->Apply({Orchestrator(seconds(3))});
  REQUIRE(Eventually([&] { return f.Refreshes() == 1; }));
  SourceSnapshot status = f.loop->Status()[0];
  CHECK(status.errors == 1);
  CHECK(status.last_error == "unexpected exception: make_source failed");
  CHECK(status.learners.empty());

  f.NextRefresh();  // built now
  status = f.loop->Status()[0];
  CHECK(status.errors == 1);
  CHECK(status.learners == std::vector<HostPort>{a});

  f.failed_learners_throws = 1;
  f.NextRefresh();
  status = f.loop->Status()[0];
  CHECK(status.errors == 2);
  CHECK(status.last_error == "unexpected exception: failed_learners failed");

  // on_change is the owner's: logged, and the refresh stands.
  const std::string line =
      "learner source orchestrator http://orchestrator.test ns/aggregator: "
      "on_change: unexpected exception: on_change failed";
  const size_t logged = logs.Count(line);
  f.on_change_throws = 1;
  script.Answer(std::vector<HostPort>{a, b});
  f.NextRefresh();
  REQUIRE(Eventually([&] { return logs.Count(line) == logged + 1; }));
  status = f.loop->Status()[0];
  CHECK(status.errors == 2);
  CHECK(status.last_error.empty());
  CHECK(status.learners == std::vector<HostPort>{a, b});
  // And it goes on.
  script.Answer(std::vector<HostPort>{b});
  f.NextRefresh();
  CHECK(f.loop->Members()[0] == std::vector<HostPort>{b});
}

TEST_CASE(
    "Apply keeps a source of the same key with its learners, starts new "
    "ones and drops removed ones") {
  Fixture f;
  f.script("dns a.test:22300").Answer(std::vector<HostPort>{L("10.0.0.1")});
  f.script("dns b.test:22300").Answer(std::vector<HostPort>{L("10.0.1.1")});
  f.loop->Apply({Dns("a.test")});
  REQUIRE(Eventually([&] { return f.Refreshes() == 1; }));
  REQUIRE(Eventually([&] { return f.changes == 1; }));
  const uint64_t a_instance = f.loop->Status()[0].instance;

  // a.test with another refresh is the same source; b.test is new.
  f.loop->Apply({Dns("b.test"), Dns("a.test", seconds(5))});
  REQUIRE(Eventually([&] { return f.Refreshes(0) == 1; }));
  REQUIRE(Eventually([&] { return f.changes == 2; }));
  CHECK(f.Refreshes(1) == 1);  // kept: not asked again yet
  CHECK(f.loop->Members() ==
        std::vector<std::vector<HostPort>>{{L("10.0.1.1")}, {L("10.0.0.1")}});
  CHECK(f.loop->Status()[1].target == "a.test:22300");
  CHECK(f.loop->Status()[1].key == "dns a.test:22300");
  CHECK(f.loop->Status()[1].instance == a_instance);
  CHECK(f.loop->Status()[0].instance != a_instance);
  // Its new refresh (5 s) applies from its last refresh on.
  f.NextRefresh(0);
  CHECK(f.Refreshes(1) == 1);
  const int changes = f.changes;
  f.loop->Apply({Dns("b.test")});
  CHECK(f.loop->Members() ==
        std::vector<std::vector<HostPort>>{{L("10.0.1.1")}});
  CHECK(f.changes == changes + 1);
  // Added again: another instance.
  f.loop->Apply({Dns("b.test"), Dns("a.test")});
  CHECK(f.loop->Status()[1].instance > a_instance);
  CHECK(f.loop->Status()[1].instance != f.loop->Status()[0].instance);
}

TEST_CASE("Stop cuts a request in flight and joins every thread") {
  Fixture f;
  Script& script = f.script("dns a.test:22300");
  {
    MutexLock lock(&script.mu);
    script.hang = true;
  }
  f.loop->Apply({Dns("a.test")});
  REQUIRE(Eventually([&] {
    MutexLock lock(&script.mu);
    return script.fetches == 1;
  }));
  const auto start = Steady::now();
  f.loop->Stop();
  CHECK(Steady::now() - start < seconds(5));
  CHECK(f.loop->Members().empty());
  f.loop->Apply({Dns("a.test")});  // stopped: nothing starts
  CHECK(f.loop->Status().empty());
}

TEST_CASE("StableMerge keeps the previous order and appends the new") {
  CHECK(StableMerge({}, {L("b"), L("a"), L("b")}) ==
        std::vector<HostPort>{L("b"), L("a")});
  CHECK(StableMerge({L("a"), L("b"), L("c")}, {L("d"), L("c"), L("a")}) ==
        std::vector<HostPort>{L("a"), L("c"), L("d")});
}

}  // namespace
}  // namespace aggregator
