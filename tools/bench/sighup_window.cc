// sighup_window: how long after exec a SIGHUP still ends aggregatord (issue
// 26 item 17): the daemon (no learners, no listener but the Learner API on a
// free loopback port) is started --runs times per delay, as systemd starts it
// (every signal unblocked, at its default action), and sent SIGHUP that long
// after exec; the table counts the starts it killed (one survives when SIGHUP
// is blocked and stays pending; it is then SIGKILLed), with the CPU time the
// killed ones had had by then (a start killed with little CPU waited for one).
//
//   bazel run //tools:sighup_window -- [--runs N] [--daemon PATH]...
//       [--delays 0,1,2,5,...] [--probe] [--spin]
// With --daemon given more than once, the binaries are started in turn at
// every delay (one column each), so they are compared under the same load.
// Prints the load average beside the table: the window grows with the load,
// as the kernel's exec and ld.so's loading and relocating wait for the CPU.
// --probe times each start until /proc shows SIGHUP blocked instead (a sound
// reading since the mask is set before any thread exists: by the loader-audit
// module, daemon/signals_audit.c, or else in .preinit_array).
//
// Figures (BENCH.md), main's binary (.preinit_array) beside the loader-audit
// module's, load 2.9: --probe --runs 40, median 5.02 ms [3.23, p90 6.71, max
// 7.20] and 381 page faults -> 1.27 ms [0.78, 1.61, 1.72] and 36; --runs 30
// --delays 2,4,6,8,10,12,15 killed 29, 29, 5, 0, 0, 0, 0 -> 0, 0, 0, 1 (a start
// still waiting for a CPU: 0.46 ms of CPU by then), 0, 0, 0 of 30.
//
// Both wait by sleeping, and time from the exec itself (sighup_starter.h says
// how and why: until 2026-12-07 this tool spun while it waited, often on the
// daemon's CPU, and that was the tail of starts killed 8-12 ms after exec; and
// its time stamp, taken when posix_spawn returned, came late whenever the tool
// itself waited for a CPU). --spin waits as it did then, to compare.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tools/bench/sighup_starter.h"
#include "tools/bench/tool_paths.h"

namespace aggregator {
namespace {

// The q-quantile of `values` (sorted here).
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * (values.size() - 1) + 0.5)];
}

std::string Format(double ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", ms);
  return text;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sighup_window: %s\n",
               std::string(status.message()).c_str());
  return 1;
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
  bool spin = false;
  app.add_flag("--spin", spin,
               "wait as this tool did before 2026-12-07: busy, timed from "
               "posix_spawn's return (takes the daemon's CPU; to compare)");
  CLI11_PARSE(app, argc, argv);
  const Waiting waiting = spin ? Waiting::kSpin : Waiting::kSleep;

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
    std::vector<std::vector<TimeToBlock>> times(commands.size());
    for (int i = 0; i < runs; ++i) {
      for (size_t d = 0; d < commands.size(); ++d) {
        absl::StatusOr<TimeToBlock> time =
            ProbeTimeToBlock(commands[d], waiting);
        if (!time.ok()) return Fail(time.status());
        times[d].push_back(*time);
      }
    }
    std::printf(
        "exec -> SIGHUP blocked, ms, %d starts each (median [min, p90, max]);\n"
        "CPU time used and time waited for a CPU by then, ms, and page "
        "faults (median)\n",
        runs);
    for (size_t d = 0; d < commands.size(); ++d) {
      std::vector<double> ms;
      std::vector<double> cpu;
      std::vector<double> wait;
      std::vector<double> faults;
      int failed = 0;
      for (const TimeToBlock& blocked : times[d]) {
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
          "daemon %zu: %6.2f [%5.2f, %6.2f, %6.2f]   cpu %5.2f   waited %6.2f  "
          " "
          "faults %5.0f%s\n",
          d + 1, Quantile(ms, 0.5), Quantile(ms, 0), Quantile(ms, 0.9),
          Quantile(ms, 1), Quantile(cpu, 0.5), Quantile(wait, 0.5),
          Quantile(faults, 0.5),
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
  std::printf(
      "SIGHUP sent at a delay after exec, %d starts each: the starts it "
      "killed,\nand the median CPU time they had had by then, ms\n",
      per_delay);
  std::printf("%10s", "delay ms");
  for (size_t i = 0; i < commands.size(); ++i) {
    std::printf(" %8s%zu %8s", "killed", i + 1, "cpu");
  }
  std::printf("\n");
  std::vector<double> return_ms;
  int late = 0;
  for (absl::string_view part : absl::StrSplit(delays_text, ',')) {
    int delay_ms = 0;
    if (!absl::SimpleAtoi(part, &delay_ms)) {
      std::fprintf(stderr, "sighup_window: bad delay '%s'\n",
                   std::string(part).c_str());
      return 1;
    }
    std::vector<std::vector<double>> killed_cpu(commands.size());
    for (int i = 0; i < per_delay; ++i) {
      for (size_t d = 0; d < commands.size(); ++d) {
        absl::StatusOr<SighupOutcome> outcome = SighupAfter(
            commands[d], std::chrono::milliseconds(delay_ms), waiting);
        if (!outcome.ok()) return Fail(outcome.status());
        return_ms.push_back(outcome->return_ms);
        late += outcome->late ? 1 : 0;
        if (outcome->killed) killed_cpu[d].push_back(outcome->cpu_ms);
      }
    }
    std::printf("%10d", delay_ms);
    for (const std::vector<double>& cpu : killed_cpu) {
      std::printf(" %6zu/%-3d %8s", cpu.size(), per_delay,
                  cpu.empty() ? "-" : Format(Quantile(cpu, 0.5)).c_str());
    }
    std::printf("\n");
  }
  std::printf(
      "\nposix_spawn returned %.2f ms after the exec (median), %.2f at most; "
      "in %d starts\nafter the delay, and the SIGHUP went then\n",
      Quantile(return_ms, 0.5), Quantile(return_ms, 1), late);
  std::printf("\nload average (1, 5 min) after: %s\n", LoadAverage().c_str());
  std::remove(config.c_str());
  rmdir(dir.c_str());
  return 0;
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
