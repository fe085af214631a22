// sighup_window: how long after exec a SIGHUP still ends aggregatord (issue
// 26 item 17): the daemon (no learners, no listener but the Learner API on a
// free loopback port) is started --runs times per delay, as systemd starts it
// (every signal unblocked, at its default action), and sent SIGHUP that long
// after posix_spawn returned (the exec has happened); the table counts the
// starts it killed (one survives when SIGHUP is blocked and stays pending; it
// is then SIGKILLed).
//
//   bazel run //tools:sighup_window -- [--runs N] [--daemon PATH]
//       [--delays 0,1,2,5,...]
// Prints the load average beside the table: the window grows with the load,
// as ld.so's loading and relocating and the libraries' initialisers wait for
// the CPU. (SigBlk in /proc is no reading of it: glibc's pthread_create blocks
// every signal for a moment, so it shows SIGHUP blocked while it is not yet.)
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tools/bench/tool_paths.h"

extern char** environ;

namespace aggregator {
namespace {

using Clock = std::chrono::steady_clock;

// A SIGHUP that was not blocked ends the process within this.
constexpr int kDeathWaitMs = 300;

// A started daemon, with every signal unblocked and at its default action as
// systemd starts it; its output goes to /dev/null.
struct Started {
  pid_t pid = -1;
  Clock::time_point exec;  // posix_spawn returned: the exec has happened
};

Started Spawn(const std::vector<std::string>& argv) {
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
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  Started started;
  // glibc's posix_spawn returns once the child has exec'd (CLONE_VFORK).
  const int error =
      posix_spawn(&started.pid, args[0], &files, &attr, args.data(), environ);
  started.exec = Clock::now();
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (error != 0) {
    std::fprintf(stderr, "sighup_window: cannot start %s: %s\n", args[0],
                 std::strerror(error));
    std::exit(1);
  }
  return started;
}

// SIGKILLs and reaps it; its status.
int Reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// The sweep: whether a SIGHUP sent `delay` after exec ended the daemon.
bool KilledAt(const std::vector<std::string>& argv, Clock::duration delay) {
  const Started started = Spawn(argv);
  while (Clock::now() - started.exec < delay) {
  }  // spun: sleeping would overshoot short delays
  kill(started.pid, SIGHUP);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, started.pid, 0));
  pollfd exited{pidfd, POLLIN, 0};
  const bool died = poll(&exited, 1, kDeathWaitMs) == 1;
  close(pidfd);
  const int status = Reap(started.pid);
  return died && WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP;
}

std::string LoadAverage() {
  std::ifstream load("/proc/loadavg");
  std::string one;
  std::string five;
  load >> one >> five;
  return one + " " + five;
}

int Main(int argc, char** argv) {
  int runs = 10;
  std::string daemon;
  std::string delays_text = "0,1,2,5,10,20,30,50,75,100,150";
  CLI::App app{"sighup_window: how long after exec a SIGHUP ends aggregatord"};
  app.add_option("--runs", runs, "starts per delay");
  app.add_option("--daemon", daemon,
                 "aggregatord to measure (default: runfiles)");
  app.add_option("--delays", delays_text,
                 "sweep delays in ms, comma-separated");
  CLI11_PARSE(app, argc, argv);

  const ToolPaths paths(argv[0], "sighup_window");
  auto binary = paths.Require(
      daemon.empty() ? paths.Locate("daemon/aggregatord") : UserPath(daemon),
      "aggregatord", "--daemon");
  if (!binary.ok()) {
    std::fprintf(stderr, "sighup_window: %s\n",
                 std::string(binary.status().message()).c_str());
    return 1;
  }
  char dir_template[] = "/tmp/sighup_window.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string config = dir + "/aggregator.yaml";
  std::ofstream(config) << "min_learners: 0\nmetrics: {listen: \"\"}\n"
                           "admin: {listen: \"\"}\n";
  const std::vector<std::string> command = {*binary, "--config", config,
                                            "--listen", "127.0.0.1:0"};

  std::printf("daemon %s\nload average (1, 5 min) before: %s\n\n",
              binary->c_str(), LoadAverage().c_str());
  const int per_delay = runs;
  std::printf("SIGHUP sent at a delay after exec, %d starts each\n", per_delay);
  std::printf("%10s %8s\n", "delay ms", "killed");
  for (absl::string_view part : absl::StrSplit(delays_text, ',')) {
    int delay_ms = 0;
    if (!absl::SimpleAtoi(part, &delay_ms)) {
      std::fprintf(stderr, "sighup_window: bad delay '%s'\n",
                   std::string(part).c_str());
      return 1;
    }
    int killed = 0;
    for (int i = 0; i < per_delay; ++i) {
      killed += KilledAt(command, std::chrono::milliseconds(delay_ms)) ? 1 : 0;
    }
    std::printf("%10d %5d/%d\n", delay_ms, killed, per_delay);
  }
  std::printf("\nload average (1, 5 min) after: %s\n", LoadAverage().c_str());
  std::remove(config.c_str());
  rmdir(dir.c_str());
  return 0;
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
