#include "lib/process/process_guard.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/process/adopted.h"
#include "lib/process/subprocess.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;

// What PR_SET_PDEATHSIG sends the guard when its parent dies: a signal nobody
// sends a process group.
int ParentDiedSignal() { return SIGRTMIN + 2; }
// How long the guard gives the tree's SIGKILLs to land.
constexpr std::chrono::seconds kKillDeadline(10);

struct GuardArgs {
  int report_fd = -1;
  std::vector<int> keep_fds;
  std::vector<std::string> argv;
};

bool ParseArgs(int argc, char** argv, GuardArgs* out) {
  int i = 2;  // argv[1] is the flag
  for (; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    int fd = -1;
    if (arg == "--") {
      ++i;
      break;
    }
    absl::string_view value = arg;
    if (absl::ConsumePrefix(&value, "--report-fd=") &&
        absl::SimpleAtoi(value, &fd)) {
      out->report_fd = fd;
    } else if (value = arg; absl::ConsumePrefix(&value, "--keep-fd=") &&
                            absl::SimpleAtoi(value, &fd)) {
      out->keep_fds.push_back(fd);
    } else {
      return false;
    }
  }
  for (; i < argc; ++i) out->argv.push_back(argv[i]);
  return !out->argv.empty();
}

// Tells the starting supervisor why the child could not start.
void Report(int fd, const absl::Status& status) {
  if (fd < 0) return;
  const std::string text =
      absl::StrCat(static_cast<int>(status.code()), ":", status.message());
  (void)!write(fd, text.data(), text.size());
}

// Ends the guard as the child ended: its exit code, or its signal.
int ExitLike(const ExitStatus& status) {
  if (status.signal == 0) return status.exit_code;
  // No core file for the guard of a child that dumped one.
  const rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(status.signal, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, status.signal);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  raise(status.signal);
  return 128 + status.signal;  // a signal that does not end a process
}

}  // namespace

int RunProcessGuard(int argc, char** argv) {
  GuardArgs args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s %s [--report-fd=N] [--keep-fd=N]... -- PROGRAM "
                 "[ARG]...\n",
                 argv[0], kProcessGuardFlag);
    return 2;
  }
  const pid_t parent = getppid();
  // Every signal is taken synchronously below; the child gets a clean mask.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  (void)BecomeChildSubreaper();
  prctl(PR_SET_PDEATHSIG, ParentDiedSignal());
  const bool orphaned = getppid() != parent;  // it died before prctl

  SubprocessOptions options;
  options.argv = args.argv;
  options.new_process_group = false;  // the guard's group is the worker's
  options.die_with_parent = true;
  options.capture_output = false;  // the supervisor captures the guard's
  for (int fd : args.keep_fds) options.fds.emplace_back(fd, fd);
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(options);
  if (!child.ok()) {
    Report(args.report_fd, child.status());
    return 127;
  }
  if (args.report_fd >= 0) close(args.report_fd);  // started: nothing to say
  for (int fd : args.keep_fds) close(fd);

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  sigaddset(&wanted, ParentDiedSignal());
  // An idle guard sleeps here until a child of its changes state or its
  // parent dies: no periodic wake-ups, so hundreds of guards cost no CPU.
  // Both signals have been blocked since before the child started, so one
  // that comes before this wait stays pending and ends it at once.
  bool parent_died = orphaned;
  std::optional<ExitStatus> status;
  while (!parent_died) {
    siginfo_t info;
    const int signo = sigwaitinfo(&wanted, &info);
    if (signo == ParentDiedSignal()) parent_died = true;
    status = (*child)->Poll();
    if (status.has_value()) break;
    // Descendants that ended while the child runs.
    ReapExitedAdopted(AdoptedScope::kAllChildren);
  }
  if (!status.has_value()) {
    // The supervisor is gone: nobody will stop this tree but us.
    (*child)->Kill();
    status =
        (*child)->Wait(Steady::now() + kKillDeadline).value_or(ExitStatus{});
  }
  KillAdopted(Steady::now() + kKillDeadline, AdoptedScope::kAllChildren);
  return ExitLike(*status);
}

}  // namespace aggregator
