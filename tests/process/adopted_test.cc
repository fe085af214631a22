// Adopted children with real processes: this test is a child subreaper, so a
// grandchild whose parent (the test's child) exits becomes its child. Reaping
// the exited ones, killing the rest, the scopes by process group, and the
// children registered as the test's own (never adopted). The reparenting is
// done by the time the middle child can be waited for; every wait has a
// deadline.
#include "lib/process/adopted.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>

#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using testing::ExitsWithin;
using testing::kLongWait;

// Starts a grandchild (in a process group of its own when `own_group`) that
// waits until `release` (a pipe's read end, kept open by it) is closed by the
// test, then exits; its parent exits at once, so the grandchild is adopted.
// Returns the grandchild's pid, which it reports once in its group;
// `*release` is the write end.
pid_t Orphan(bool own_group, int* release) {
  int gate[2];
  int report[2];
  REQUIRE(pipe(gate) == 0);
  REQUIRE(pipe(report) == 0);
  const pid_t middle = fork();
  REQUIRE(middle >= 0);
  if (middle == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      // Reports itself once in its own group, so no scan sees it before.
      if (own_group) setsid();
      const pid_t self = getpid();
      (void)!write(report[1], &self, sizeof(self));
      close(report[1]);
      close(gate[1]);
      char byte;
      while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    _exit(grandchild > 0 ? 0 : 1);
  }
  close(gate[0]);
  close(report[1]);
  pid_t grandchild = -1;
  REQUIRE(read(report[0], &grandchild, sizeof(grandchild)) ==
          sizeof(grandchild));
  close(report[0]);
  int status = 0;
  // Once the middle child can be waited for, its children are ours.
  REQUIRE(waitpid(middle, &status, 0) == middle);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  *release = gate[1];
  return grandchild;
}

// Whether `pid` is a child of this process (exited or not, not yet reaped).
bool IsChild(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

TEST_CASE("An orphaned grandchild is adopted; once it exits it is reaped") {
  REQUIRE(BecomeChildSubreaper().ok());
  int release = -1;
  const pid_t orphan = Orphan(/*own_group=*/true, &release);
  CHECK(IsChild(orphan));
  // Running: nothing to reap.
  CHECK(ReapExitedAdopted(AdoptedScope::kAllChildren) == 0);
  close(release);
  REQUIRE(ExitsWithin(orphan, kLongWait));
  CHECK(ReapExitedAdopted(AdoptedScope::kOtherProcessGroups) == 1);
  CHECK_FALSE(IsChild(orphan));
  CHECK(ReapExitedAdopted(AdoptedScope::kAllChildren) == 0);
}

TEST_CASE(
    "KillAdopted kills and reaps the adopted; the daemon's scope spares those "
    "in its own process group") {
  REQUIRE(BecomeChildSubreaper().ok());
  int release_other = -1;
  int release_own = -1;
  const pid_t other_group = Orphan(/*own_group=*/true, &release_other);
  const pid_t own_group = Orphan(/*own_group=*/false, &release_own);
  CHECK(KillAdopted(Steady::now() + kLongWait,
                    AdoptedScope::kOtherProcessGroups) == 1);
  CHECK_FALSE(IsChild(other_group));
  CHECK(IsChild(own_group));
  CHECK(KillAdopted(Steady::now() + kLongWait, AdoptedScope::kAllChildren) ==
        1);
  CHECK_FALSE(IsChild(own_group));
  close(release_other);
  close(release_own);
}

TEST_CASE("A child registered as this process's own is never adopted") {
  REQUIRE(BecomeChildSubreaper().ok());
  const pid_t own = process_internal::ForkRegistered([] {
    const pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    return pid;
  });
  REQUIRE(own > 0);
  CHECK(KillAdopted(Steady::now() + kLongWait, AdoptedScope::kAllChildren) ==
        0);
  REQUIRE(kill(own, SIGKILL) == 0);
  REQUIRE(ExitsWithin(own, kLongWait));
  // Exited, but its owner reaps it.
  CHECK(ReapExitedAdopted(AdoptedScope::kAllChildren) == 0);
  CHECK(IsChild(own));
  int status = 0;
  CHECK(waitpid(own, &status, 0) == own);
  CHECK(WIFSIGNALED(status));
  process_internal::Unregister(own);
}

}  // namespace
}  // namespace aggregator
