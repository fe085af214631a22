// Section 7 of tools/bench: worker guards at rest (issue 26 item 3). Each
// replica of a worker runs under a guard process (aggregatord re-executed);
// an idle guard must make no periodic wake-ups, and many replicas must not
// hold up the listeners. For each replica count: spawn → "listening" line,
// spawn → every replica listening, the guards' CPU over an idle window, PSS
// per guard, and the load average beside them.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {
namespace {

// The fields of /proc/PID/stat after the command's closing parenthesis
// (field 3, the state, is [0]); empty once the process is gone.
std::vector<std::string> StatFields(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream rest(line.substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

// The processes whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::vector<std::string> fields = StatFields(pid);
    int ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  return children;
}

// utime + stime in clock ticks, or -1 once the process is gone.
int64_t CpuTicks(pid_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return -1;
  }
  return utime + stime;
}

// Proportional set size in KiB (/proc/PID/smaps_rollup), or -1.
int64_t PssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  for (std::string line; std::getline(in, line);) {
    int64_t kib = 0;
    if (line.rfind("Pss:", 0) == 0 &&
        absl::SimpleAtoi(line.substr(4, line.rfind(' ') - 4), &kib)) {
      return kib;
    }
  }
  return -1;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

// The first of `count` consecutive loopback ports that can be bound now.
absl::StatusOr<int> FreePortRange(int count) {
  for (int base = 30000; base + count <= 60000; base += count + 16) {
    bool all = true;
    for (int port = base; all && port < base + count; ++port) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(port);
      all = fd >= 0 &&
            bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      if (fd >= 0) close(fd);
    }
    if (all) return base;
  }
  return absl::UnavailableError(
      absl::StrCat("no ", count, " consecutive free loopback ports"));
}

}  // namespace

Section Bench::IdleGuards() {
  const int window_s = options_.guard_window_s;
  Section section{"7", absl::StrCat("Worker guards at rest (issue 26 item 3): ",
                                    "example_learner replicas, guards' CPU "
                                    "over ",
                                    window_s, " s idle")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    const long hz = sysconf(_SC_CLK_TCK);
    for (const int replicas : options_.guard_replicas) {
      Progress(absl::StrCat("section 7: ", replicas, " replica(s)"));
      absl::StatusOr<int> port_base = FreePortRange(replicas);
      if (!port_base.ok()) return port_base.status();
      const std::string yaml = absl::StrCat(
          "listen: \"127.0.0.1:0\"\n"
          "admin: {listen: \"\"}\n"
          "metrics: {listen: \"\"}\n"
          "min_learners: 0\n"
          "log: {level: info}\n"
          "workers:\n"
          "  - name: w\n"
          "    command: [\"",
          options_.learner,
          "\", --listen, \"127.0.0.1:{port}\"]\n"
          "    replicas: ",
          replicas, "\n    port_base: ", *port_base, "\n    learner: true\n");
      absl::StatusOr<std::string> config =
          dir_.Write(absl::StrCat("guards", replicas, ".yaml"), yaml);
      if (!config.ok()) return config.status();
      absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
          DaemonProcess::Spawn(options_.daemon, *config, env_);
      if (!daemon.ok()) return daemon.status();
      // Guarded starts load the daemon's binary, 8 a round: minutes for
      // hundreds on a loaded machine.
      const Clock::time_point deadline =
          Clock::now() + kStartDeadline + std::chrono::seconds(replicas);
      absl::StatusOr<DaemonProcess::Listening> listening =
          (*daemon)->WaitListening(deadline);
      if (!listening.ok()) return listening.status();
      Clock::time_point last = listening->arrived;
      for (int i = 0; i < replicas; ++i) {
        absl::StatusOr<DaemonProcess::Line> line = (*daemon)->WaitForLine(
            absl::StrCat("[w-", i, "] example_learner listening on"), deadline);
        if (!line.ok()) return line.status();
        last = std::max(last, line->arrived);
      }
      const std::vector<pid_t> guards = ChildrenOf((*daemon)->pid());
      std::map<pid_t, int64_t> before;
      for (pid_t guard : guards) before[guard] = CpuTicks(guard);
      const std::string load_before = LoadAverage();
      std::this_thread::sleep_for(std::chrono::seconds(window_s));
      int64_t ticks = 0;
      int64_t most = 0;
      std::vector<double> pss_mib;
      for (pid_t guard : guards) {
        const int64_t after = CpuTicks(guard);
        if (after < 0 || before[guard] < 0) continue;
        ticks += after - before[guard];
        most = std::max(most, after - before[guard]);
        if (const int64_t kib = PssKiB(guard); kib >= 0) {
          pss_mib.push_back(kib / 1024.0);
        }
      }
      const std::string load = LoadAverage();
      const Summary pss = Summarize(pss_mib);
      const std::string load_text =
          absl::StrCat("load ", load_before, " → ", load);

      const std::string name = absl::StrCat(replicas, " replica(s): ");
      Row listen_row{name + "spawn → \"listening\" line"};
      listen_row.value = ToMs(listening->arrived - (*daemon)->spawned());
      listen_row.unit = "ms";
      listen_row.comparison = absl::StrCat(
          "every replica listening after ",
          FormatNumber(ToMs(last - (*daemon)->spawned())), " ms; ", load_text);
      section.rows.push_back(std::move(listen_row));

      Row cpu_row{absl::StrCat("  guards' CPU, ", guards.size(), " guard(s), ",
                               window_s, " s idle")};
      cpu_row.value = ticks;
      cpu_row.unit = "ticks";
      cpu_row.comparison =
          absl::StrCat(FormatNumber(100.0 * ticks / hz / window_s),
                       " % of a core in all; most of one guard ", most, " (",
                       hz, " ticks/s)");
      cpu_row.target = "0 (no periodic wake-ups)";
      cpu_row.verdict = AtMost(ticks, 0);
      cpu_row.details = {{"guards", guards.size()},     {"ticks", ticks},
                         {"max_ticks_one_guard", most}, {"hz", hz},
                         {"load_before", load_before},  {"load_after", load}};
      section.rows.push_back(std::move(cpu_row));

      Row pss_row{"  PSS per guard"};
      pss_row.value = pss.median;
      pss_row.unit = "MiB";
      pss_row.comparison = absl::StrCat("median; min ", FormatNumber(pss.min),
                                        ", max ", FormatNumber(pss.max));
      pss_row.details = {{"mib", ToJson(pss)}};
      section.rows.push_back(std::move(pss_row));

      absl::StatusOr<std::chrono::nanoseconds> exit = (*daemon)->Terminate(
          Clock::now() + kExitDeadline + std::chrono::seconds(replicas / 10));
      if (!exit.ok()) return exit.status();
    }
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
