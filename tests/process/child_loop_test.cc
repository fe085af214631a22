// ChildLoop against real child processes and pipes: deadlines on a fake and
// the steady clock, wake-ups from other threads, the frame budget, a child
// exiting, and the stop escalation of a child that ignores SIGTERM. Waits end
// on conditions (a ready fd, a wake-up); the steady deadlines only bound them.
#include "lib/process/child_loop.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/process/subprocess.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;
using testing::kLongWait;

std::unique_ptr<Subprocess> StartShell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(options);
  REQUIRE(process.ok());
  return *std::move(process);
}

// A child that ignores SIGTERM (and so do its own children), once it says so.
std::unique_ptr<Subprocess> StartTermIgnoring() {
  auto process =
      StartShell("trap '' TERM; echo ready; while :; do sleep 1; done");
  absl::StatusOr<std::string> line =
      process->ReadLine(Steady::now() + kLongWait);
  REQUIRE(line.ok());
  REQUIRE(*line == "ready");
  return process;
}

struct Pipe {
  Pipe() { REQUIRE(pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0); }
  ~Pipe() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2];
};

}  // namespace

TEST_CASE("A deadline on a fake clock is met when the clock is advanced") {
  FakeClock clock;
  ChildLoop loop(ChildLoop::Options{&clock});
  REQUIRE(loop.ok());
  const ChildLoop::TimePoint due = clock.Now() + std::chrono::seconds(30);
  loop.Begin();
  loop.WakeAt(due);
  loop.WakeAtReal(Steady::now() + kLongWait);  // bounds a failing test
  const uint64_t seen = loop.wake_seq();
  std::thread advance([&clock] { clock.Advance(std::chrono::seconds(30)); });
  const Steady::time_point start = Steady::now();
  CHECK(loop.Wait(seen) == 0);
  advance.join();
  CHECK(Steady::now() - start < kLongWait);
  CHECK(loop.Now() >= due);
}

TEST_CASE("A deadline on the steady clock ends the wait at its time") {
  ChildLoop loop(ChildLoop::Options{});
  const Steady::time_point due = Steady::now() + milliseconds(50);
  loop.Begin();
  loop.WakeAt(due);
  CHECK(loop.Wait(loop.wake_seq()) == 0);
  CHECK(Steady::now() >= due);
  CHECK(Steady::now() < due + kLongWait);
  // And in real time.
  const Steady::time_point real_due = Steady::now() + milliseconds(50);
  loop.Begin();
  loop.WakeAtReal(real_due);
  CHECK(loop.Wait(loop.wake_seq()) == 0);
  CHECK(Steady::now() >= real_due);
}

TEST_CASE("Wake from another thread ends a wait that has no deadline") {
  ChildLoop loop(ChildLoop::Options{});
  Pipe pipe;
  loop.Begin();
  const size_t index = loop.Watch(pipe.fds[0]);
  loop.WakeAtReal(Steady::now() + kLongWait);  // bounds a failing test
  const uint64_t seen = loop.wake_seq();
  std::thread waker([&loop] { loop.Wake(); });
  const Steady::time_point start = Steady::now();
  CHECK(loop.Wait(seen) == 0);
  waker.join();
  CHECK(Steady::now() - start < kLongWait);
  CHECK_FALSE(loop.ready(index));
  CHECK(loop.wake_seq() != seen);
}

TEST_CASE("A wake-up before the wait is not lost") {
  ChildLoop loop(ChildLoop::Options{});
  loop.Begin();
  loop.WakeAtReal(Steady::now() + kLongWait);
  const uint64_t seen = loop.wake_seq();
  loop.Wake();  // between looking at the work and waiting
  const Steady::time_point start = Steady::now();
  CHECK(loop.Wait(seen) == 0);
  CHECK(Steady::now() - start < kLongWait);
}

TEST_CASE("MarkReady skips the wait, even with a readable fd") {
  ChildLoop loop(ChildLoop::Options{});
  Pipe pipe;
  REQUIRE(write(pipe.fds[1], "x", 1) == 1);
  loop.Begin();
  const size_t index = loop.Watch(pipe.fds[0]);
  loop.WakeAtReal(Steady::now() + kLongWait);
  loop.MarkReady();
  const Steady::time_point start = Steady::now();
  CHECK(loop.Wait(loop.wake_seq()) == 0);
  CHECK(Steady::now() - start < kLongWait);
  CHECK_FALSE(loop.ready(index));
}

TEST_CASE("A child's output and its exit make their fds ready") {
  ChildLoop loop(ChildLoop::Options{});
  auto process = StartShell("echo hello; exec sleep 1000");
  loop.Begin();
  const size_t out = loop.Watch(process->stdout_fd());
  const size_t exit = loop.Watch(process->pidfd());
  loop.WakeAtReal(Steady::now() + kLongWait);
  REQUIRE(loop.Wait(loop.wake_seq()) == 0);
  CHECK(loop.ready(out));
  CHECK_FALSE(loop.ready(exit));

  auto exiting = StartShell("exit 3");
  loop.Begin();
  const size_t exited = loop.Watch(exiting->pidfd());
  loop.WakeAtReal(Steady::now() + kLongWait);
  REQUIRE(loop.Wait(loop.wake_seq()) == 0);
  REQUIRE(loop.ready(exited));
  std::optional<ExitStatus> status = exiting->Poll();
  REQUIRE(status.has_value());
  CHECK(status->exit_code == 3);
}

TEST_CASE("A round reads at most frames_per_round frames from a channel") {
  ChildLoop::Options options;
  options.frames_per_round = 4;
  ChildLoop loop(options);
  Pipe pipe;
  REQUIRE(write(pipe.fds[1], "0123456789", 10) == 10);
  // A one-byte "frame" from the pipe; none left: false.
  auto read_one = [&pipe](size_t) -> absl::StatusOr<bool> {
    char byte;
    const ssize_t n = read(pipe.fds[0], &byte, 1);
    if (n == 1) return true;
    if (n < 0 && errno == EAGAIN) return false;
    return absl::OutOfRangeError("end of the pipe");
  };
  absl::Status error;
  CHECK(loop.ReadFrames(read_one, &error) == 4);
  CHECK(loop.ReadFrames(read_one, &error) == 4);
  CHECK(loop.ReadFrames(read_one, &error) == 2);
  CHECK(error.ok());
  // A channel that fails after two frames: the error ends the round.
  size_t calls = 0;
  auto failing = [&calls](size_t) -> absl::StatusOr<bool> {
    if (++calls > 2) return absl::OutOfRangeError("end of the channel");
    return true;
  };
  CHECK(loop.ReadFrames(failing, &error) == 2);
  CHECK(absl::IsOutOfRange(error));
}

TEST_CASE(
    "A child ignoring SIGTERM is SIGKILLed when the clock reaches the "
    "grace") {
  FakeClock clock;
  ChildLoop loop(ChildLoop::Options{&clock});
  auto process = StartTermIgnoring();
  loop.BeginStop(*process, std::chrono::seconds(5));
  CHECK(process->stopping());
  CHECK_FALSE(loop.EnforceStop(*process));  // not due yet
  CHECK(process->running());                // SIGTERM ignored
  clock.Advance(std::chrono::seconds(5));
  CHECK(loop.EnforceStop(*process));
  CHECK_FALSE(loop.EnforceStop(*process));  // once
  absl::StatusOr<ExitStatus> status = process->Wait(Steady::now() + kLongWait);
  REQUIRE(status.ok());
  CHECK(status->signal == SIGKILL);
}

TEST_CASE("A round wakes when a stop's SIGKILL is due") {
  ChildLoop loop(ChildLoop::Options{});
  auto process = StartTermIgnoring();
  loop.BeginStop(*process, milliseconds(100));
  const Steady::time_point due = *process->kill_due();
  loop.Begin();
  const size_t exit = loop.Watch(process->pidfd());
  loop.WatchStop(*process);
  REQUIRE(loop.Wait(loop.wake_seq()) == 0);
  CHECK(Steady::now() >= due);
  CHECK(Steady::now() < due + kLongWait);
  CHECK_FALSE(loop.ready(exit));
  CHECK(loop.EnforceStop(*process));
  loop.Begin();
  const size_t killed = loop.Watch(process->pidfd());
  loop.WatchStop(*process);  // nothing due any more
  loop.WakeAtReal(Steady::now() + kLongWait);
  REQUIRE(loop.Wait(loop.wake_seq()) == 0);
  CHECK(loop.ready(killed));
  CHECK(process->Poll()->signal == SIGKILL);
}

TEST_CASE(
    "EscalateStops: SIGTERM to all still running, SIGKILL to those "
    "ignoring it") {
  auto obeying = StartShell("echo ready; exec sleep 1000");
  REQUIRE(obeying->ReadLine(Steady::now() + kLongWait).ok());
  auto ignoring = StartTermIgnoring();
  auto exited = StartShell("exit 0");
  REQUIRE(ChildLoop::WaitExited(exited->pidfd(), Steady::now() + kLongWait));
  std::vector<Subprocess*> processes = {obeying.get(), ignoring.get(),
                                        exited.get()};
  std::vector<int> pidfds = {obeying->pidfd(), ignoring->pidfd(),
                             exited->pidfd(), -1};
  std::vector<std::pair<size_t, int>> sent;
  const Steady::time_point now = Steady::now();
  ChildLoop::EscalateStops(pidfds, now, now + milliseconds(200), kLongWait,
                           [&](size_t i, int signo) {
                             sent.emplace_back(i, signo);
                             REQUIRE(i < processes.size());
                             if (signo == SIGTERM) {
                               processes[i]->BeginStop(now + milliseconds(200));
                             } else {
                               processes[i]->Kill();
                             }
                           });
  const std::vector<std::pair<size_t, int>> expected = {
      {0, SIGTERM}, {1, SIGTERM}, {1, SIGKILL}};
  CHECK(sent == expected);
  CHECK(obeying->Poll()->signal == SIGTERM);
  CHECK(ignoring->Poll()->signal == SIGKILL);
}

}  // namespace aggregator
