// How sighup_window and start_signals_test start aggregatord and time a
// SIGHUP after its exec (issue 26 item 17), without taking the CPU the daemon
// needs to get there.
//
// The starter must not busy-wait. glibc's posix_spawn returns when the child
// has exec'd: the child's execve wakes the starter (CLONE_VFORK), often on the
// child's own CPU, where the woken starter preempts it. A starter that then
// spins (for the delay, or polling /proc) keeps that CPU until the next
// scheduler tick (4 ms at HZ=250) or two, with the daemon runnable behind it
// and the other CPU idle. ftrace of 30 starts of the old spinning sweep (load
// 12, starter and daemon at nice -20 in their own autogroup): 11 had the
// starter woken on the daemon's CPU, exec to the mask 8.47 ms median (max
// 10.99) in those, 3.5-8.0 ms of it runnable behind the starter, against
// 4.53 ms in the others. That was the sweep's tail of starts killed 8-12 ms
// after exec (tools/bench/BENCH.md); systemd does not spin after a start.
#ifndef TOOLS_BENCH_SIGHUP_STARTER_H_
#define TOOLS_BENCH_SIGHUP_STARTER_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

using SteadyClock = std::chrono::steady_clock;

// A started daemon, with every signal unblocked and SIGHUP and SIGTERM at
// their default action (as systemd starts it), in its own process group,
// stdout and stderr to /dev/null.
struct StartedDaemon {
  pid_t pid = -1;
  // When the daemon's execve let posix_spawn return (CLONE_VFORK): the time
  // posix_spawn returned, less how long this thread was runnable in the call
  // (on a CPU or waiting for one, /proc/thread-self/schedstat), i.e. the
  // start of the call plus the time the thread slept in it: never after the
  // exec. Against ftrace's record of that wake-up (30 starts, load 10.6):
  // 0.07-0.22 ms before it. A time stamp taken after posix_spawn returns is
  // late by however long the woken starter waits for a CPU (up to 5.8 ms
  // there), one taken before it early by however long the child waits for
  // one before its execve (up to 257 ms).
  SteadyClock::time_point exec;
  // When posix_spawn returned (the exec had happened by then).
  SteadyClock::time_point spawned;
};

absl::StatusOr<StartedDaemon> StartLikeSystemd(
    const std::vector<std::string>& argv);

// Sleeps until `when` (an absolute clock_nanosleep, with this thread's timer
// slack at 1 ns so it wakes within microseconds): the wait uses no CPU.
void SleepUntil(SteadyClock::time_point when);

// The CPU time `pid` has used (/proc/PID/schedstat), ms; -1 when unreadable.
double CpuMs(pid_t pid);

// Whether /proc/PID/status shows the daemon past blocking SIGHUP.
bool SighupBlocked(pid_t pid);

// SIGKILLs and reaps `pid`; its wait status.
int KillAndReap(pid_t pid);

// How the starter waits. kSpin is how sighup_window waited before
// 2026-12-07: busy, timed from posix_spawn's return; kept to show the
// difference (sighup_window --spin).
enum class Waiting { kSleep, kSpin };

// One start of the sweep: SIGHUP sent `delay` after exec.
struct SighupOutcome {
  bool killed = false;   // ended by that SIGHUP (WTERMSIG == SIGHUP)
  double cpu_ms = 0;     // the daemon's CPU time just before the SIGHUP
  double return_ms = 0;  // how long after the exec posix_spawn returned
  // posix_spawn returned after the delay had passed: the SIGHUP went then.
  bool late = false;
};
absl::StatusOr<SighupOutcome> SighupAfter(const std::vector<std::string>& argv,
                                          SteadyClock::duration delay,
                                          Waiting waiting = Waiting::kSleep);

// One start of the probe: how long after exec the daemon had SIGHUP blocked,
// read from /proc every kProbeInterval (sleeping in between, for the reason
// above), so up to one interval late. With it, from /proc/PID/schedstat, the
// CPU time the daemon had used and the time it had waited for a CPU, and its
// minor page faults, all read just after: upper bounds.
inline constexpr std::chrono::microseconds kProbeInterval(100);
struct TimeToBlock {
  bool ok = false;  // false: not blocked within 2 s
  double ms = 0;
  double cpu_ms = 0;
  double wait_ms = 0;
  double faults = 0;
};
absl::StatusOr<TimeToBlock> ProbeTimeToBlock(
    const std::vector<std::string>& argv, Waiting waiting = Waiting::kSleep);

}  // namespace aggregator

#endif  // TOOLS_BENCH_SIGHUP_STARTER_H_
