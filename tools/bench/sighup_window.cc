// sighup_window: how long after exec a SIGHUP still ends aggregatord (issue
// 26 item 17): the daemon (no learners, no listener but the Learner API on a
// free loopback port) is started --runs times per delay, as systemd starts it
// (every signal unblocked, at its default action), and sent SIGHUP that long
// after posix_spawn returned (the exec has happened); the table counts the
// starts it killed (one survives when SIGHUP is blocked and stays pending; it
// is then SIGKILLed).
//
//   bazel run //tools:sighup_window -- [--runs N] [--daemon PATH]...
//       [--delays 0,1,2,5,...] [--probe]
// With --daemon given more than once, the binaries are started in turn at
// every delay (one column each), so they are compared under the same load.
// Prints the load average beside the table: the window grows with the load,
// as ld.so's loading and relocating and the libraries' initialisers wait for
// the CPU. --probe times each start until SigBlk in /proc shows SIGHUP
// blocked instead (TimeToBlock: a sound reading only since the mask is set in
// .preinit_array, before any thread exists; glibc's pthread_create blocks
// every signal for a moment).
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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
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

// The probe: how long after exec the daemon had SIGHUP blocked. Polls SigBlk
// in /proc/PID/status: before main.cc's .preinit_array no thread exists (the
// only other thing that blocks it, for a moment, is pthread_create), so the
// first reading with SIGHUP blocked comes after .preinit_array ran (late by
// one reading, some microseconds). With it, from /proc/PID/schedstat, the CPU
// time the daemon had used by then and the time it had waited for a CPU, and
// from /proc/PID/stat its page faults: the window is the first (the kernel's
// exec, ld.so's loading and relocating) stretched by the second (the load).
// Those three are read just after the reading that saw SIGHUP blocked, while
// the daemon runs on: upper bounds.
struct Blocked {
  bool ok = false;
  double ms = 0;
  double cpu_ms = 0;
  double wait_ms = 0;
  double faults = 0;
};

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
  const char* line = std::strstr(text, "SigBlk:");
  if (line == nullptr) return false;
  const unsigned long long mask = std::strtoull(line + 7, nullptr, 16);
  return (mask >> (SIGHUP - 1)) & 1;
}

Blocked TimeToBlock(const std::vector<std::string>& argv) {
  const Started started = Spawn(argv);
  Blocked blocked;
  while (Clock::now() - started.exec < std::chrono::seconds(2)) {
    if (!SighupBlocked(started.pid)) continue;
    blocked.ms =
        std::chrono::duration<double, std::milli>(Clock::now() - started.exec)
            .count();
    std::ifstream schedstat("/proc/" + std::to_string(started.pid) +
                            "/schedstat");
    double cpu_ns = 0;
    double wait_ns = 0;
    schedstat >> cpu_ns >> wait_ns;
    blocked.cpu_ms = cpu_ns / 1e6;
    blocked.wait_ms = wait_ns / 1e6;
    blocked.ok = static_cast<bool>(schedstat);
    // /proc/PID/stat: minflt is the 10th field, the 8th after "(comm) ".
    std::ifstream stat("/proc/" + std::to_string(started.pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    for (int i = 0; i < 8 && fields >> field; ++i) {
    }
    blocked.faults = std::strtod(field.c_str(), nullptr);
    break;
  }
  Reap(started.pid);
  return blocked;
}

// The q-quantile of `values` (sorted here).
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * (values.size() - 1) + 0.5)];
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
  std::vector<std::string> daemons;
  std::string delays_text = "0,1,2,5,10,20,30,50,75,100,150";
  CLI::App app{"sighup_window: how long after exec a SIGHUP ends aggregatord"};
  app.add_option("--runs", runs, "starts per delay");
  app.add_option("--daemon", daemons,
                 "aggregatord to measure (default: runfiles); repeat it to "
                 "compare binaries");
  app.add_option("--delays", delays_text,
                 "sweep delays in ms, comma-separated");
  bool probe = false;
  app.add_flag("--probe", probe,
               "instead of the sweep, time each start until SIGHUP is blocked "
               "(/proc/PID/status), with its CPU time and wait for a CPU");
  CLI11_PARSE(app, argc, argv);

  const ToolPaths paths(argv[0], "sighup_window");
  if (daemons.empty()) daemons.push_back("");
  std::vector<std::string> binaries;
  for (const std::string& daemon : daemons) {
    auto binary = paths.Require(
        daemon.empty() ? paths.Locate("daemon/aggregatord") : UserPath(daemon),
        "aggregatord", "--daemon");
    if (!binary.ok()) {
      std::fprintf(stderr, "sighup_window: %s\n",
                   std::string(binary.status().message()).c_str());
      return 1;
    }
    binaries.push_back(*binary);
  }
  char dir_template[] = "/tmp/sighup_window.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string config = dir + "/aggregator.yaml";
  std::ofstream(config) << "min_learners: 0\nmetrics: {listen: \"\"}\n"
                           "admin: {listen: \"\"}\n";
  std::vector<std::vector<std::string>> commands;
  for (size_t i = 0; i < binaries.size(); ++i) {
    std::printf("daemon %zu: %s\n", i + 1, binaries[i].c_str());
    commands.push_back(
        {binaries[i], "--config", config, "--listen", "127.0.0.1:0"});
  }
  std::printf("load average (1, 5 min) before: %s\n\n", LoadAverage().c_str());
  if (probe) {
    std::vector<std::vector<Blocked>> times(commands.size());
    for (int i = 0; i < runs; ++i) {
      for (size_t d = 0; d < commands.size(); ++d) {
        times[d].push_back(TimeToBlock(commands[d]));
      }
    }
    std::printf(
        "exec -> SIGHUP blocked, ms, %d starts each (median [min, p90]);\n"
        "CPU time used and time waited for a CPU by then, ms, and page "
        "faults (median)\n",
        runs);
    for (size_t d = 0; d < commands.size(); ++d) {
      std::vector<double> ms;
      std::vector<double> cpu;
      std::vector<double> wait;
      std::vector<double> faults;
      int failed = 0;
      for (const Blocked& blocked : times[d]) {
        if (!blocked.ok) {
          ++failed;
          continue;
        }
        ms.push_back(blocked.ms);
        cpu.push_back(blocked.cpu_ms);
        wait.push_back(blocked.wait_ms);
        faults.push_back(blocked.faults);
      }
      std::printf(
          "daemon %zu: %6.2f [%5.2f, %6.2f]   cpu %5.2f   waited %6.2f   "
          "faults %5.0f%s\n",
          d + 1, Quantile(ms, 0.5), Quantile(ms, 0), Quantile(ms, 0.9),
          Quantile(cpu, 0.5), Quantile(wait, 0.5), Quantile(faults, 0.5),
          failed > 0 ? ("   (" + std::to_string(failed) +
                        " never blocked it within 2 s)")
                           .c_str()
                     : "");
    }
    std::printf("\nload average (1, 5 min) after: %s\n", LoadAverage().c_str());
    std::remove(config.c_str());
    rmdir(dir.c_str());
    return 0;
  }
  const int per_delay = runs;
  std::printf("SIGHUP sent at a delay after exec, %d starts each\n", per_delay);
  std::printf("%10s", "delay ms");
  for (size_t i = 0; i < commands.size(); ++i) {
    std::printf(" %7s%zu", "killed ", i + 1);
  }
  std::printf("\n");
  for (absl::string_view part : absl::StrSplit(delays_text, ',')) {
    int delay_ms = 0;
    if (!absl::SimpleAtoi(part, &delay_ms)) {
      std::fprintf(stderr, "sighup_window: bad delay '%s'\n",
                   std::string(part).c_str());
      return 1;
    }
    std::vector<int> killed(commands.size(), 0);
    for (int i = 0; i < per_delay; ++i) {
      for (size_t d = 0; d < commands.size(); ++d) {
        killed[d] +=
            KilledAt(commands[d], std::chrono::milliseconds(delay_ms)) ? 1 : 0;
      }
    }
    std::printf("%10d", delay_ms);
    for (int count : killed) std::printf(" %5d/%-2d", count, per_delay);
    std::printf("\n");
  }
  std::printf("\nload average (1, 5 min) after: %s\n", LoadAverage().c_str());
  std::remove(config.c_str());
  rmdir(dir.c_str());
  return 0;
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
