// The process guard against real children: it costs nothing while its child
// runs, ends as the child ends, and leaves no descendant behind. Every wait
// has a deadline; the one fixed interval is the idle window being measured.
#include "lib/process/process_guard.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Eventually;
using testing::ExitsWithin;
using testing::kLongWait;

// The guard binary beside this test (its runfiles' working directory).
constexpr char kGuard[] = "tests/process/process_guard_main";

std::unique_ptr<Subprocess> StartGuarded(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.guard_program = kGuard;
  options.capture_output = false;
  auto process = Subprocess::Start(options);
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return std::move(*process);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// The pids /proc/<pid>/task/*/children lists: a process's children.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return children;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string list =
        ReadFile(tasks + "/" + entry->d_name + "/children");
    for (absl::string_view word :
         absl::StrSplit(list, ' ', absl::SkipWhitespace())) {
      pid_t child = 0;
      if (absl::SimpleAtoi(word, &child)) children.push_back(child);
    }
  }
  closedir(dir);
  return children;
}

// Every context switch of every thread of `pid` so far: how often it woke.
long Wakeups(pid_t pid) {
  long total = 0;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string status =
        ReadFile(tasks + "/" + entry->d_name + "/status");
    for (absl::string_view line : absl::StrSplit(status, '\n')) {
      if (absl::ConsumePrefix(&line, "voluntary_ctxt_switches:") ||
          absl::ConsumePrefix(&line, "nonvoluntary_ctxt_switches:")) {
        long count = 0;
        if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &count)) {
          total += count;
        }
      }
    }
  }
  closedir(dir);
  return total;
}

TEST_CASE("an idle guard makes no wake-ups while its child runs") {
  auto guard = StartGuarded("exec sleep 600");
  REQUIRE(
      Eventually([&] { return !ChildrenOf(guard->pid()).empty(); }, kLongWait));
  // Let the guard settle into its wait (it may still be closing fds).
  long last = Wakeups(guard->pid());
  REQUIRE(Eventually(
      [&] {
        std::this_thread::sleep_for(milliseconds(100));
        const long now = Wakeups(guard->pid());
        const bool settled = now == last;
        last = now;
        return settled;
      },
      kLongWait));
  const long settled = Wakeups(guard->pid());
  // A guard on a beat would wake at least twice in this window.
  std::this_thread::sleep_for(milliseconds(2500));
  CHECK(Wakeups(guard->pid()) == settled);
  guard->Stop(milliseconds(2000));
}

TEST_CASE("a guard ends as its child ends, with the child's status") {
  auto guard = StartGuarded("exec sleep 600");
  REQUIRE(
      Eventually([&] { return !ChildrenOf(guard->pid()).empty(); }, kLongWait));
  const pid_t child = ChildrenOf(guard->pid()).front();
  REQUIRE(kill(child, SIGTERM) == 0);
  absl::StatusOr<ExitStatus> status =
      guard->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(status.ok());
  CHECK(status->signal == SIGTERM);
}

TEST_CASE("a guard kills the descendants that outlive its child") {
  // The child leaves a grandchild that escaped into a session of its own.
  const std::string dir = testing::TempDir();
  auto guard = StartGuarded("setsid sleep 600 & echo $! > " + dir +
                            "/grandchild; exit 3");
  absl::StatusOr<ExitStatus> status =
      guard->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(status.ok());
  CHECK(status->exit_code == 3);
  pid_t grandchild = 0;
  REQUIRE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(ReadFile(dir + "/grandchild")), &grandchild));
  CHECK(ExitsWithin(grandchild, kLongWait));
}

}  // namespace
}  // namespace aggregator
