// WorkerManager against real children (/bin/sh scripts) on a fake clock:
// templating, program resolution, restart policies, backoff and intensity,
// min_uptime, stop timeouts, process groups, reaping, output capture and
// scaling. Every wait has a deadline; nothing sleeps to sync. Time-dependent
// behaviour is checked by advancing the fake clock and calling Sync.
#include "lib/workers/worker_manager.h"

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using Catch::Matchers::Contains;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous bound for anything that should happen at once on a loaded machine.
constexpr seconds kLongWait(10);

// The captured log, waited on with kLongWait.
class Logs {
 public:
  std::string WaitFor(const std::string& prefix, size_t skip = 0) {
    return testing::CapturedLogs().WaitFor(prefix, skip,
                                           Steady::now() + kLongWait);
  }
  size_t Count(const std::string& prefix) {
    return testing::CapturedLogs().Count(prefix);
  }
};

void WriteExecutable(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
  }
  REQUIRE(chmod(path.c_str(), 0755) == 0);
}

// Children of this process that are zombies (exited, not reaped).
std::vector<pid_t> ZombieChildren() {
  std::vector<pid_t> zombies;
  DIR* proc = opendir("/proc");
  REQUIRE(proc != nullptr);
  while (struct dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid() && state == 'Z') zombies.push_back(pid);
  }
  closedir(proc);
  return zombies;
}

// The pid in a "[w-0] <word> <pid>" log line.
pid_t PidInLine(const std::string& line) {
  int pid = 0;
  const size_t space = line.rfind(' ');
  REQUIRE(space != std::string::npos);
  REQUIRE(absl::SimpleAtoi(line.substr(space + 1), &pid));
  return pid;
}

WorkerSpec Shell(const std::string& name, const std::string& script) {
  WorkerSpec spec;
  spec.name = name;
  spec.command = {"/bin/sh", "-c", script};
  spec.backoff = {milliseconds(1000), 2.0, 0.0, milliseconds(30000)};
  spec.min_uptime = milliseconds(1000);
  spec.stop_timeout = milliseconds(5000);
  return spec;
}

// A worker that prints "ready" and then exits with `code` on SIGUSR1 (its
// `sleep` child goes with its process group).
WorkerSpec OnUsr1Exit(const std::string& name, int code) {
  return Shell(name, absl::StrCat("trap 'exit ", code,
                                  "' USR1; echo ready; sleep 1000 & wait"));
}

// A manager on a fake clock (or the real one) and a way to wait for its state.
class Harness {
 public:
  explicit Harness(bool fake_clock = true,
                   std::vector<std::string> program_dirs = {}) {
    testing::CapturedLogs();
    WorkerManagerOptions options;
    options.clock = fake_clock ? &clock_ : nullptr;
    options.program_dirs = std::move(program_dirs);
    options.on_change = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      ++changes_;
      changed_.notify_all();
    };
    manager_ = std::make_unique<WorkerManager>(std::move(options));
  }
  ~Harness() { manager_->Shutdown(Steady::now() + kLongWait); }

  WorkerManager& manager() { return *manager_; }
  FakeClock& clock() { return clock_; }
  int changes() {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_;
  }
  // Waits until on_change has been called more than `seen` times.
  bool WaitForChangesAfter(int seen) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_until(lock, Steady::now() + kLongWait,
                               [&] { return changes_ > seen; });
  }

  void Apply(std::vector<WorkerSpec> specs) {
    const absl::Status status = manager_->Apply(std::move(specs));
    INFO(status.ToString());
    REQUIRE(status.ok());
  }

  // Moves the fake clock and waits until the manager has acted on it.
  void Advance(milliseconds delta) {
    clock_.Advance(delta);
    Sync();
  }
  void Sync() { REQUIRE(manager_->Sync(Steady::now() + kLongWait).ok()); }

  // Waits until `done` holds for Status(); false at the deadline.
  bool WaitFor(
      const std::function<bool(const std::vector<WorkerSnapshot>&)>& done) {
    const Steady::time_point deadline = Steady::now() + kLongWait;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      const int seen = changes_;
      lock.unlock();
      if (done(manager_->Status())) return true;
      lock.lock();
      if (!changed_.wait_until(lock, deadline,
                               [&] { return changes_ != seen; })) {
        return false;
      }
    }
  }
  // Waits until replica `index` of `name` is in `state` (with `restarts`
  // restarts, unless -1) and returns its status.
  WorkerSnapshot WaitForState(const std::string& name, int index,
                              WorkerState state, int restarts = -1) {
    WorkerSnapshot found;
    const bool reached = WaitFor([&](const auto& all) {
      for (const WorkerSnapshot& status : all) {
        if (status.name == name && status.index == index &&
            status.state == state &&
            (restarts < 0 || status.restarts == restarts)) {
          found = status;
          return true;
        }
      }
      return false;
    });
    INFO(name << "-" << index << " never reached " << WorkerStateName(state)
              << " with restarts " << restarts << "; status: " << Describe());
    REQUIRE(reached);
    return found;
  }
  // The current status of one replica (which must exist).
  WorkerSnapshot Get(const std::string& name, int index) {
    for (const WorkerSnapshot& status : manager_->Status()) {
      if (status.name == name && status.index == index) return status;
    }
    FAIL("no replica " << name << "-" << index << "; status: " << Describe());
    return {};
  }
  std::string Describe() {
    std::string text;
    for (const WorkerSnapshot& status : manager_->Status()) {
      absl::StrAppend(&text, status.name, "-", status.index, " ",
                      WorkerStateName(status.state), " pid ", status.pid,
                      " restarts ", status.restarts, " (", status.last_error,
                      "); ");
    }
    return text;
  }

 private:
  FakeClock clock_;  // outlives manager_
  std::mutex mu_;
  std::condition_variable changed_;
  int changes_ = 0;
  std::unique_ptr<WorkerManager> manager_;
};

// How many times replica 0 of `name` has been started.
size_t Starts(const std::string& name) {
  return Logs{}.Count(absl::StrCat("worker ", name, "-0 started"));
}

TEST_CASE("A replica's process sees its expanded argv, env and cwd") {
  Harness harness;
  const std::string dir = testing::TempDir();
  WorkerSpec spec =
      Shell("tmpl", "echo \"args $0 $1 env $RANK $ADDR pwd $PWD\"");
  spec.command.push_back("{name}");  // $0
  spec.command.push_back("{port}");  // $1
  spec.env = {{"RANK", "{index}"}, {"ADDR", "127.0.0.1:{port}"}};
  spec.cwd = dir;
  spec.port_base = 30000;
  spec.replicas = 2;
  spec.restart = RestartPolicy::kNever;
  harness.Apply({spec});
  CHECK(
      Logs{}.WaitFor("[tmpl-1] args") ==
      absl::StrCat("[tmpl-1] args tmpl 30001 env 1 127.0.0.1:30001 pwd ", dir));
  CHECK(
      Logs{}.WaitFor("[tmpl-0] args") ==
      absl::StrCat("[tmpl-0] args tmpl 30000 env 0 127.0.0.1:30000 pwd ", dir));
}

TEST_CASE("Worker output is sanitised and rate-limited, with a count") {
  Harness harness;
  WorkerSpec forge = Shell("forge", "printf 'a\\000b\\rcritical forged\\n'");
  forge.restart = RestartPolicy::kNever;
  // 3000 lines at once: the burst (1000) passes, the rest is counted.
  WorkerSpec chatty = Shell("chatty",
                            "i=0; while [ $i -lt 3000 ]; do echo \"n $i\"; "
                            "i=$((i+1)); done");
  chatty.restart = RestartPolicy::kNever;
  harness.Apply({forge, chatty});
  CHECK(Logs{}.WaitFor("[forge-0] ") ==
        "[forge-0] a\\x00b\\x0dcritical forged");
  const std::string dropped = Logs{}.WaitFor("[chatty-0] (");
  CHECK_THAT(dropped, Contains("lines dropped: output over 200 lines/s"));
  const size_t logged = Logs{}.Count("[chatty-0] n ");
  CHECK(logged >= 1000);
  CHECK(logged < 1100);  // the burst, and what the rate let through meanwhile
}

TEST_CASE("A worker program is found in the runfiles directory") {
  const std::string runfiles = testing::TempDir();
  REQUIRE(mkdir((runfiles + "/wm_test_bin").c_str(), 0755) == 0);
  WriteExecutable(runfiles + "/wm_test_bin/hello",
                  "#!/bin/sh\necho \"hello from $0\"\n");
  Harness harness(/*fake_clock=*/true, {runfiles});
  WorkerSpec spec;
  spec.name = "rf";
  spec.command = {"wm_test_bin/hello"};
  spec.restart = RestartPolicy::kNever;
  harness.Apply({spec});
  CHECK(Logs{}.WaitFor("[rf-0] hello from") ==
        "[rf-0] hello from " + runfiles + "/wm_test_bin/hello");

  // Not there either: a failed start naming both places, counted as one.
  spec.name = "rf-missing";
  spec.command = {"wm_test_bin/missing"};
  spec.restart = RestartPolicy::kOnFailure;
  spec.max_restarts = 0;
  harness.Apply({spec});
  const WorkerSnapshot status =
      harness.WaitForState("rf-missing", 0, WorkerState::kFailed, 0);
  CHECK_THAT(status.last_error,
             Contains("cannot start: cannot find the program "
                      "'wm_test_bin/missing' in the working directory ") &&
                 Contains(" or in the runfiles directory " + runfiles) &&
                 Contains("max_restarts 0"));
  CHECK(status.pid == 0);
}

TEST_CASE("A crash loop restarts after growing delays, then fails") {
  Harness harness;
  WorkerSpec spec = Shell("crash", "echo crashing; exit 3");
  spec.backoff = {milliseconds(1000), 2.0, 0.0, milliseconds(5000)};
  spec.max_restarts = 4;
  spec.restart_window = milliseconds(60000);
  harness.Apply({spec});
  CHECK(Starts("crash") == 1);
  harness.WaitForState("crash", 0, WorkerState::kBackoff, 1);

  // initial, x2, x2, then capped at max.
  const std::vector<milliseconds> delays = {
      milliseconds(1000), milliseconds(2000), milliseconds(4000),
      milliseconds(5000)};
  for (size_t i = 0; i < delays.size(); ++i) {
    INFO("restart " << i + 1 << " after " << delays[i].count() << "ms");
    harness.Advance(delays[i] - milliseconds(1));
    CHECK(Starts("crash") == i + 1);
    CHECK(harness.Get("crash", 0).state == WorkerState::kBackoff);
    harness.Advance(milliseconds(1));
    CHECK(Starts("crash") == i + 2);
    if (i + 1 < delays.size()) {
      harness.WaitForState("crash", 0, WorkerState::kBackoff, i + 2);
    }
  }
  // The fifth exit would be the fifth restart within the window.
  const WorkerSnapshot failed =
      harness.WaitForState("crash", 0, WorkerState::kFailed, 4);
  CHECK(failed.pid == 0);
  CHECK_THAT(failed.last_error,
             Contains("exit code 3 after 0s, sooner than min_uptime 1s") &&
                 Contains("not restarted: it would be restart 5 within 1m "
                          "(max_restarts 4)"));
  harness.Advance(milliseconds(3600 * 1000));
  CHECK(Starts("crash") == 5);
  CHECK(harness.Get("crash", 0).state == WorkerState::kFailed);
  CHECK(ZombieChildren().empty());
}

TEST_CASE("Restarts older than restart_window do not count") {
  Harness harness;
  WorkerSpec spec = OnUsr1Exit("window", 3);
  spec.max_restarts = 1;
  spec.restart_window = milliseconds(10000);
  harness.Apply({spec});
  auto exit_after = [&](milliseconds uptime, int ready_count) {
    REQUIRE(!Logs{}.WaitFor("[window-0] ready", ready_count - 1).empty());
    harness.Advance(uptime);
    const pid_t pid = harness.Get("window", 0).pid;
    REQUIRE(pid > 0);
    REQUIRE(kill(pid, SIGUSR1) == 0);
  };
  exit_after(milliseconds(20000), 1);
  harness.WaitForState("window", 0, WorkerState::kBackoff, 1);
  // A start that ran min_uptime resets the backoff: 1s again.
  harness.Advance(milliseconds(1000));
  exit_after(milliseconds(20000), 2);
  // The first restart was 21s ago, outside the 10s window: allowed.
  harness.WaitForState("window", 0, WorkerState::kBackoff, 2);
  harness.Advance(milliseconds(1000));
  exit_after(milliseconds(0), 3);
  // The second restart was 0s ago: a third would exceed max_restarts 1.
  const WorkerSnapshot failed =
      harness.WaitForState("window", 0, WorkerState::kFailed, 2);
  CHECK_THAT(failed.last_error,
             Contains("exit code 3 after 0s, sooner than min_uptime 1s"));
}

TEST_CASE("The backoff grows over failed starts and resets after a good one") {
  Harness harness;
  WorkerSpec spec = OnUsr1Exit("reset", 3);
  spec.backoff = {milliseconds(1000), 3.0, 0.0, milliseconds(60000)};
  harness.Apply({spec});
  auto restart_after = [&](milliseconds delay, size_t starts) {
    harness.Advance(delay - milliseconds(1));
    CHECK(Starts("reset") == starts - 1);
    harness.Advance(milliseconds(1));
    CHECK(Starts("reset") == starts);
  };
  // Two failed starts: 1s, then 3s.
  REQUIRE(!Logs{}.WaitFor("[reset-0] ready", 0).empty());
  REQUIRE(kill(harness.Get("reset", 0).pid, SIGUSR1) == 0);
  harness.WaitForState("reset", 0, WorkerState::kBackoff, 1);
  restart_after(milliseconds(1000), 2);
  REQUIRE(!Logs{}.WaitFor("[reset-0] ready", 1).empty());
  REQUIRE(kill(harness.Get("reset", 0).pid, SIGUSR1) == 0);
  harness.WaitForState("reset", 0, WorkerState::kBackoff, 2);
  restart_after(milliseconds(3000), 3);
  // This one runs min_uptime: RUNNING exactly then, and the next delay is 1s.
  REQUIRE(!Logs{}.WaitFor("[reset-0] ready", 2).empty());
  harness.Advance(milliseconds(999));
  CHECK(harness.Get("reset", 0).state == WorkerState::kStarting);
  harness.Advance(milliseconds(1));
  CHECK(harness.Get("reset", 0).state == WorkerState::kRunning);
  REQUIRE(kill(harness.Get("reset", 0).pid, SIGUSR1) == 0);
  const WorkerSnapshot status =
      harness.WaitForState("reset", 0, WorkerState::kBackoff, 3);
  CHECK(status.last_error == "exit code 3 after 1s");
  restart_after(milliseconds(1000), 4);
}

TEST_CASE(
    "restart: never leaves a failed exit FAILED and a clean one STOPPED") {
  Harness harness;
  WorkerSpec failing = Shell("never-fail", "exit 3");
  failing.restart = RestartPolicy::kNever;
  WorkerSpec clean = OnUsr1Exit("never-clean", 0);
  clean.restart = RestartPolicy::kNever;
  harness.Apply({failing, clean});
  const WorkerSnapshot failed =
      harness.WaitForState("never-fail", 0, WorkerState::kFailed, 0);
  CHECK(failed.last_error == "exit code 3 after 0s, sooner than min_uptime 1s");

  REQUIRE(!Logs{}.WaitFor("[never-clean-0] ready").empty());
  harness.Advance(milliseconds(1000));
  REQUIRE(kill(harness.Get("never-clean", 0).pid, SIGUSR1) == 0);
  const WorkerSnapshot stopped =
      harness.WaitForState("never-clean", 0, WorkerState::kStopped, 0);
  CHECK(stopped.pid == 0);
  CHECK(stopped.last_error.empty());

  harness.Advance(milliseconds(3600 * 1000));
  CHECK(Starts("never-fail") == 1);
  CHECK(Starts("never-clean") == 1);
}

TEST_CASE("restart: on-failure restarts failures, not a clean exit") {
  Harness harness;
  WorkerSpec clean = OnUsr1Exit("onf-clean", 0);
  WorkerSpec early = OnUsr1Exit("onf-early", 0);
  WorkerSpec killed = OnUsr1Exit("onf-killed", 0);
  harness.Apply({clean, early, killed});
  for (const char* name : {"onf-clean", "onf-early", "onf-killed"}) {
    REQUIRE(!Logs{}.WaitFor(absl::StrCat("[", name, "-0] ready")).empty());
  }
  // exit 0 sooner than min_uptime is a failed start: restarted.
  REQUIRE(kill(harness.Get("onf-early", 0).pid, SIGUSR1) == 0);
  CHECK(harness.WaitForState("onf-early", 0, WorkerState::kBackoff, 1)
            .last_error == "exit code 0 after 0s, sooner than min_uptime 1s");

  harness.Advance(milliseconds(5000));
  // exit 0 after min_uptime: stopped for good.
  REQUIRE(kill(harness.Get("onf-clean", 0).pid, SIGUSR1) == 0);
  const WorkerSnapshot stopped =
      harness.WaitForState("onf-clean", 0, WorkerState::kStopped, 0);
  CHECK(stopped.pid == 0);
  // A signal is a failure whatever the uptime.
  REQUIRE(kill(harness.Get("onf-killed", 0).pid, SIGKILL) == 0);
  CHECK(harness.WaitForState("onf-killed", 0, WorkerState::kBackoff, 1)
            .last_error == "killed by SIGKILL after 5s");
  harness.Advance(milliseconds(1000));
  CHECK(Starts("onf-killed") == 2);
  CHECK(Starts("onf-clean") == 1);
}

TEST_CASE("restart: always restarts a clean exit too") {
  Harness harness;
  harness.Apply({[] {
    WorkerSpec spec = OnUsr1Exit("always", 0);
    spec.restart = RestartPolicy::kAlways;
    return spec;
  }()});
  REQUIRE(!Logs{}.WaitFor("[always-0] ready").empty());
  harness.Advance(milliseconds(2000));
  CHECK(harness.Get("always", 0).state == WorkerState::kRunning);
  REQUIRE(kill(harness.Get("always", 0).pid, SIGUSR1) == 0);
  const WorkerSnapshot status =
      harness.WaitForState("always", 0, WorkerState::kBackoff, 1);
  CHECK(status.last_error.empty());
  harness.Advance(milliseconds(1000));
  CHECK(Starts("always") == 2);
  REQUIRE(!Logs{}.WaitFor("[always-0] ready", 1).empty());
  CHECK(harness.Get("always", 0).state == WorkerState::kStarting);
}

TEST_CASE("Stdout and stderr lines reach the log with the replica's name") {
  Harness harness;
  WorkerSpec spec = Shell(
      "out", "echo first; echo 'on stderr' >&2; echo second; printf 'tail'");
  spec.restart = RestartPolicy::kNever;
  harness.Apply({spec});
  CHECK(Logs{}.WaitFor("[out-0] first") == "[out-0] first");
  CHECK(Logs{}.WaitFor("[out-0] on stderr") == "[out-0] on stderr");
  CHECK(Logs{}.WaitFor("[out-0] second") == "[out-0] second");
  // A last line without a newline is logged when the stream ends.
  CHECK(Logs{}.WaitFor("[out-0] tail") == "[out-0] tail");
  harness.WaitForState("out", 0, WorkerState::kFailed);
}

TEST_CASE("A worker ignoring SIGTERM is killed after stop_timeout") {
  Harness harness;
  WorkerSpec spec = Shell(
      "stubborn", "trap '' TERM; sleep 1000 & echo \"grandchild $!\"; wait");
  spec.stop_timeout = milliseconds(5000);
  harness.Apply({spec});
  const pid_t grandchild =
      PidInLine(Logs{}.WaitFor("[stubborn-0] grandchild "));
  const pid_t pid = harness.Get("stubborn", 0).pid;
  REQUIRE(pid > 0);

  harness.Apply({});  // removes it: SIGTERM, ignored
  harness.Advance(milliseconds(4999));
  const WorkerSnapshot stopping = harness.Get("stubborn", 0);
  CHECK(stopping.state == WorkerState::kStopped);
  CHECK(stopping.pid == pid);
  CHECK_FALSE(testing::ExitsWithin(pid, milliseconds(100)));
  harness.Advance(milliseconds(1));
  CHECK(testing::ExitsWithin(pid, kLongWait));
  CHECK(testing::ExitsWithin(grandchild, kLongWait));
  CHECK(harness.WaitFor([](const auto& all) { return all.empty(); }));
  CHECK(Logs{}.Count("worker stubborn-0 (pid " + std::to_string(pid) +
                     ") did not stop within 5s") == 1);
  CHECK(ZombieChildren().empty());
}

TEST_CASE("Shutdown kills at stop_timeout or the deadline, whichever first") {
  // The real clock: stop_timeout elapses on its own.
  Harness harness(/*fake_clock=*/false);
  WorkerSpec quick =
      Shell("quick-kill", "trap '' TERM; echo ready; sleep 1000 & wait");
  quick.stop_timeout = milliseconds(200);
  WorkerSpec slow =
      Shell("slow-kill", "trap '' TERM; echo ready; sleep 1000 & wait");
  slow.stop_timeout = milliseconds(3600 * 1000);
  harness.Apply({quick, slow});
  REQUIRE(!Logs{}.WaitFor("[quick-kill-0] ready").empty());
  REQUIRE(!Logs{}.WaitFor("[slow-kill-0] ready").empty());
  const pid_t quick_pid = harness.Get("quick-kill", 0).pid;
  const pid_t slow_pid = harness.Get("slow-kill", 0).pid;

  const Steady::time_point start = Steady::now();
  harness.manager().Shutdown(start + milliseconds(1500));
  const auto took = Steady::now() - start;
  CHECK(took >= milliseconds(1500));
  CHECK(took < milliseconds(1500) + seconds(5));
  CHECK(Logs{}.Count("worker quick-kill-0 (pid " + std::to_string(quick_pid) +
                     ") did not stop within 200ms") == 1);
  CHECK(Logs{}.Count("worker slow-kill-0 (pid " + std::to_string(slow_pid) +
                     "): shutdown deadline reached") == 1);
  CHECK(testing::ExitsWithin(quick_pid, milliseconds(0)));
  CHECK(testing::ExitsWithin(slow_pid, milliseconds(0)));
  for (const WorkerSnapshot& status : harness.manager().Status()) {
    CHECK(status.state == WorkerState::kStopped);
    CHECK(status.pid == 0);
  }
  CHECK(ZombieChildren().empty());
  // Idempotent, and no more workers afterwards.
  harness.manager().Shutdown(Steady::now());
  CHECK(harness.manager().Apply({quick}).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("Grandchildren die with their worker, on shutdown and on exit") {
  Harness harness;
  WorkerSpec stays =
      Shell("family", "sleep 1000 & echo \"grandchild $!\"; wait");
  WorkerSpec leaves =
      Shell("orphaner", "sleep 1000 & echo \"grandchild $!\"; exit 3");
  leaves.restart = RestartPolicy::kNever;
  harness.Apply({stays, leaves});
  const pid_t orphan = PidInLine(Logs{}.WaitFor("[orphaner-0] grandchild "));
  const pid_t grandchild = PidInLine(Logs{}.WaitFor("[family-0] grandchild "));
  // The leader exited: what is left of its group is killed.
  harness.WaitForState("orphaner", 0, WorkerState::kFailed);
  CHECK(testing::ExitsWithin(orphan, kLongWait));

  const pid_t pid = harness.Get("family", 0).pid;
  harness.manager().Shutdown(Steady::now() + kLongWait);
  CHECK(testing::ExitsWithin(pid, milliseconds(0)));
  CHECK(testing::ExitsWithin(grandchild, kLongWait));
  CHECK(ZombieChildren().empty());
}

TEST_CASE("Apply scales replicas, restarts changed specs, removes workers") {
  Harness harness;
  WorkerSpec spec = Shell("scale", "echo \"up $RANK\"; sleep 1000 & wait");
  spec.env = {{"RANK", "{index}"}};
  spec.port_base = 40000;
  spec.learner = true;
  WorkerSpec other = Shell("other", "sleep 1000 & wait");
  harness.Apply({spec, other});
  const pid_t first = harness.Get("scale", 0).pid;
  REQUIRE(first > 0);
  CHECK(harness.manager().LearnerEndpoints() ==
        std::vector<LearnerEndpoint>{
            {"scale-0", HostPort::Tcp("127.0.0.1", 40000)}});

  const int changes = harness.changes();
  spec.replicas = 3;
  harness.Apply({spec, other});
  CHECK(harness.manager().LearnerEndpoints() ==
        std::vector<LearnerEndpoint>{
            {"scale-0", HostPort::Tcp("127.0.0.1", 40000)},
            {"scale-1", HostPort::Tcp("127.0.0.1", 40001)},
            {"scale-2", HostPort::Tcp("127.0.0.1", 40002)}});
  // on_change runs on the manager thread after Apply has returned.
  CHECK(harness.WaitForChangesAfter(changes));
  CHECK(Logs{}.WaitFor("[scale-2] up 2") == "[scale-2] up 2");
  std::vector<WorkerSnapshot> status = harness.manager().Status();
  REQUIRE(status.size() == 4);
  CHECK(status[0].index == 0);
  CHECK(status[0].pid == first);  // untouched
  CHECK(status[1].index == 1);
  CHECK(status[2].index == 2);
  CHECK(status[3].name == "other");
  const pid_t second = status[1].pid;
  const pid_t third = status[2].pid;

  spec.replicas = 1;
  harness.Apply({spec, other});
  CHECK(testing::ExitsWithin(second, kLongWait));
  CHECK(testing::ExitsWithin(third, kLongWait));
  CHECK(harness.WaitFor([](const auto& all) { return all.size() == 2; }));
  CHECK(harness.Get("scale", 0).pid == first);
  CHECK(harness.manager().LearnerEndpoints().size() == 1);

  // Any other change restarts the replicas with fresh counts.
  spec.env = {{"RANK", "r{index}"}};
  harness.Apply({spec, other});
  CHECK(Logs{}.WaitFor("[scale-0] up r0") == "[scale-0] up r0");
  CHECK(testing::ExitsWithin(first, kLongWait));
  const WorkerSnapshot restarted =
      harness.WaitForState("scale", 0, WorkerState::kStarting, 0);
  CHECK(restarted.pid != first);
  CHECK(restarted.pid > 0);

  // Removing a worker stops it; the other keeps its process.
  const pid_t other_pid = harness.Get("other", 0).pid;
  harness.Apply({other});
  CHECK(testing::ExitsWithin(restarted.pid, kLongWait));
  CHECK(harness.WaitFor([](const auto& all) { return all.size() == 1; }));
  CHECK(harness.Get("other", 0).pid == other_pid);
  CHECK(harness.manager().LearnerEndpoints().empty());
  // The same specs again change nothing.
  harness.Apply({other});
  CHECK(harness.Get("other", 0).pid == other_pid);

  // replicas: 0 keeps the worker declared and runs nothing.
  other.replicas = 0;
  harness.Apply({other});
  CHECK(testing::ExitsWithin(other_pid, kLongWait));
  CHECK(harness.WaitFor([](const auto& all) { return all.empty(); }));
  CHECK(ZombieChildren().empty());
}

TEST_CASE("Apply returns before a worker of many replicas has started all") {
  // Starting is not free (a guarded start loads the daemon's binary): the
  // listeners, which open after Apply at start-up, must not wait for them.
  Harness h;
  WorkerSpec spec = Shell("many", "exec sleep 1000");
  spec.replicas = 200;
  h.Apply({spec});
  auto started = [](const std::vector<WorkerSnapshot>& all) {
    return std::count_if(all.begin(), all.end(),
                         [](const WorkerSnapshot& s) { return s.pid != 0; });
  };
  const std::vector<WorkerSnapshot> at_return = h.manager().Status();
  CHECK(at_return.size() == 200);
  CHECK(started(at_return) < 200);
  for (const WorkerSnapshot& status : at_return) {
    CHECK(status.state == WorkerState::kStarting);
  }
  // The rest follow on the manager's next rounds, without another command.
  const bool all_started =
      h.WaitFor([&](const auto& all) { return started(all) == 200; });
  INFO(h.Describe());
  CHECK(all_started);
}

TEST_CASE("Apply rejects specs the manager cannot run") {
  Harness harness;
  WorkerSpec spec = Shell("dup", "exit 0");
  CHECK(harness.manager().Apply({spec, spec}).message() ==
        "worker \"dup\" is given twice; names must be unique");
  WorkerSpec empty = spec;
  empty.command.clear();
  CHECK(harness.manager().Apply({empty}).message() ==
        "worker \"dup\": the command has no program");
  WorkerSpec no_port = spec;
  no_port.learner = true;
  CHECK(harness.manager().Apply({no_port}).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(harness.manager().Status().empty());
}

}  // namespace
}  // namespace aggregator
