#include "tools/bench/sighup_starter.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace aggregator {
namespace {

// A SIGHUP that was not blocked ends the process within this.
constexpr int kDeathWaitMs = 300;
// How long the probe waits for the mask.
constexpr std::chrono::seconds kProbeLimit(2);

double Ms(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// /proc/PID/schedstat: nanoseconds on a CPU, then waiting for one.
bool ReadSchedstat(pid_t pid, double* run_ns, double* wait_ns) {
  std::ifstream schedstat("/proc/" + std::to_string(pid) + "/schedstat");
  schedstat >> *run_ns >> *wait_ns;
  return static_cast<bool>(schedstat);
}

// /proc/PID/stat: minflt is the 10th field, the 8th after "(comm) ".
double MinorFaults(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  const size_t comm_end = text.rfind(')');
  if (comm_end == std::string::npos || comm_end + 2 > text.size()) return 0;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  for (int i = 0; i < 8 && fields >> field; ++i) {
  }
  return std::strtod(field.c_str(), nullptr);
}

// How long the calling thread has been runnable: on a CPU or waiting for one.
SteadyClock::duration RunnableTime() {
  std::ifstream schedstat("/proc/thread-self/schedstat");
  double run_ns = 0;
  double wait_ns = 0;
  schedstat >> run_ns >> wait_ns;
  return std::chrono::nanoseconds(static_cast<int64_t>(run_ns + wait_ns));
}

}  // namespace

absl::StatusOr<StartedDaemon> StartLikeSystemd(
    const std::vector<std::string>& argv) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGHUP);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  StartedDaemon started;
  const SteadyClock::duration runnable_before = RunnableTime();
  const SteadyClock::time_point call = SteadyClock::now();
  const int error =
      posix_spawn(&started.pid, args[0], &files, &attr, args.data(), environ);
  started.spawned = SteadyClock::now();
  started.exec =
      std::max(call, started.spawned - (RunnableTime() - runnable_before));
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (error != 0) {
    return absl::InternalError(absl::StrCat(
        "cannot start ", argv[0], ": posix_spawn: ", std::strerror(error)));
  }
  return started;
}

void SleepUntil(SteadyClock::time_point when) {
  // The default slack (50 us) would let short delays overshoot; per thread.
  prctl(PR_SET_TIMERSLACK, 1UL);
  // steady_clock is CLOCK_MONOTONIC in libstdc++.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      when.time_since_epoch())
                      .count();
  const timespec due{static_cast<time_t>(ns / 1000000000),
                     static_cast<long>(ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nullptr) ==
         EINTR) {
  }
}

double CpuMs(pid_t pid) {
  double run_ns = 0;
  double wait_ns = 0;
  return ReadSchedstat(pid, &run_ns, &wait_ns) ? run_ns / 1e6 : -1;
}

// Once the daemon waits in sigtimedwait, SigBlk shows the waited-for signals
// unblocked; its other threads (all started after main.cc's .preinit_array)
// keep them blocked. So: blocked when the main thread shows SIGHUP blocked or
// a second thread exists.
bool SighupBlocked(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[4096];
  const ssize_t size = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (size <= 0) return false;
  text[size] = '\0';
  const char* threads = std::strstr(text, "Threads:");
  if (threads != nullptr && std::strtol(threads + 8, nullptr, 10) > 1) {
    return true;
  }
  const char* line = std::strstr(text, "SigBlk:");
  if (line == nullptr) return false;
  const unsigned long long mask = std::strtoull(line + 7, nullptr, 16);
  return (mask >> (SIGHUP - 1)) & 1;
}

int KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

absl::StatusOr<SighupOutcome> SighupAfter(const std::vector<std::string>& argv,
                                          SteadyClock::duration delay,
                                          Waiting waiting) {
  absl::StatusOr<StartedDaemon> started = StartLikeSystemd(argv);
  if (!started.ok()) return started.status();
  if (waiting == Waiting::kSpin) {
    while (SteadyClock::now() - started->spawned < delay) {
    }
  } else {
    SleepUntil(started->exec + delay);
  }
  SighupOutcome outcome;
  outcome.return_ms = Ms(started->spawned - started->exec);
  outcome.late = started->spawned - started->exec > delay;
  outcome.cpu_ms = CpuMs(started->pid);
  kill(started->pid, SIGHUP);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, started->pid, 0));
  if (pidfd < 0) {
    KillAndReap(started->pid);
    return absl::InternalError(
        absl::StrCat("pidfd_open(", started->pid, "): ", std::strerror(errno)));
  }
  pollfd exited{pidfd, POLLIN, 0};
  const bool died = poll(&exited, 1, kDeathWaitMs) == 1;
  close(pidfd);
  const int status = KillAndReap(started->pid);
  outcome.killed = died && WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP;
  return outcome;
}

absl::StatusOr<TimeToBlock> ProbeTimeToBlock(
    const std::vector<std::string>& argv, Waiting waiting) {
  absl::StatusOr<StartedDaemon> started = StartLikeSystemd(argv);
  if (!started.ok()) return started.status();
  const pid_t pid = started->pid;
  const SteadyClock::time_point exec =
      waiting == Waiting::kSpin ? started->spawned : started->exec;
  TimeToBlock blocked;
  while (SteadyClock::now() - exec < kProbeLimit) {
    if (!SighupBlocked(pid)) {
      if (waiting == Waiting::kSleep) {
        SleepUntil(SteadyClock::now() + kProbeInterval);
      }
      continue;
    }
    blocked.ms = Ms(SteadyClock::now() - exec);
    double run_ns = 0;
    double wait_ns = 0;
    blocked.ok = ReadSchedstat(pid, &run_ns, &wait_ns);
    blocked.cpu_ms = run_ns / 1e6;
    blocked.wait_ms = wait_ns / 1e6;
    blocked.faults = MinorFaults(pid);
    break;
  }
  KillAndReap(pid);
  return blocked;
}

}  // namespace aggregator
