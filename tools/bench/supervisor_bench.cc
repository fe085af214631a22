// Measures the supervisor's hot path: the round trip of a trivial method
// (Send + Recv of "echo") and RecvAll of three, for process and thread
// children, and prints median and p99 latencies in µs.
//
//   bazel run -c opt //tools:supervisor_bench -- [--iterations=20000]
//       [--warmup=2000] [--spin_us=50]
//
// Process children are this binary re-executed with --worker.
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "lib/supervisor/supervisor.h"
#include "lib/supervisor/worker_runtime.h"

namespace aggregator {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kTimeout(10);

std::unique_ptr<WorkerObject> MakeEcho() {
  auto object = std::make_unique<WorkerObject>();
  (void)object->AddMethod(
      "echo", [](const WorkerArgs& args) -> absl::StatusOr<WorkerValue> {
        if (args.values_size() == 0) return NullValue();
        return args.values(0);
      });
  return object;
}

struct Options {
  int iterations = 20000;
  int warmup = 2000;
  int spin_us = 50;
};

struct Row {
  std::string children;
  std::string operation;
  double median_us;
  double p99_us;
  double mean_us;
};

Row Summarize(std::string children, std::string operation,
              std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double s : samples) sum += s;
  return Row{std::move(children), std::move(operation),
             samples[samples.size() / 2], samples[samples.size() * 99 / 100],
             sum / samples.size()};
}

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// Runs both measurements against three children; false (with a message on
// stderr) if anything fails.
bool Measure(bool processes, const std::string& self, const Options& options,
             std::vector<Row>& rows) {
  SupervisorOptions supervisor_options;
  supervisor_options.spin = std::chrono::microseconds(options.spin_us);
  Supervisor supervisor(supervisor_options);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int> id =
        processes
            ? supervisor.Register(ProcessChildSpec{{self, "--worker"}, {}, ""})
            : supervisor.Register(ThreadChildSpec{
                  []() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
                    return MakeEcho();
                  },
                  "echo"});
    if (!id.ok()) {
      fprintf(stderr, "%s\n", id.status().ToString().c_str());
      return false;
    }
  }
  absl::Status status = supervisor.StartLink();
  for (int i = 0; i < 3 && status.ok(); ++i) {
    status = supervisor.WaitRunning(i, kTimeout);
  }
  if (!status.ok()) {
    fprintf(stderr, "%s\n", status.ToString().c_str());
    return false;
  }
  const std::string kind = processes ? "process" : "thread";

  SendPayload payload;
  payload.method = "echo";
  payload.args = MakeArgs({NumberValue(1)});
  std::vector<double> samples;
  samples.reserve(options.iterations);
  for (int i = 0; i < options.warmup + options.iterations; ++i) {
    payload.req_id.clear();
    const Clock::time_point start = Clock::now();
    status = supervisor.Send(payload);
    absl::StatusOr<RecvPayload> result =
        status.ok() ? supervisor.Recv(false, kTimeout)
                    : absl::StatusOr<RecvPayload>(status);
    const Clock::time_point end = Clock::now();
    if (!result.ok()) {
      fprintf(stderr, "%s\n", result.status().ToString().c_str());
      return false;
    }
    if (i >= options.warmup) samples.push_back(Micros(end - start));
  }
  rows.push_back(Summarize(kind, "Send+Recv", std::move(samples)));

  std::vector<SendPayload> payloads(3);
  for (int i = 0; i < 3; ++i) {
    payloads[i].proc_id = i;
    payloads[i].method = "echo";
    payloads[i].args = MakeArgs({NumberValue(i)});
  }
  samples.clear();
  for (int i = 0; i < options.warmup + options.iterations; ++i) {
    const Clock::time_point start = Clock::now();
    for (SendPayload& p : payloads) {
      p.req_id.clear();
      if (status.ok()) status = supervisor.Send(p);
    }
    absl::StatusOr<std::vector<RecvPayload>> results =
        status.ok() ? supervisor.RecvAll(payloads, false, nullptr, kTimeout)
                    : absl::StatusOr<std::vector<RecvPayload>>(status);
    const Clock::time_point end = Clock::now();
    if (!results.ok()) {
      fprintf(stderr, "%s\n", results.status().ToString().c_str());
      return false;
    }
    if (i >= options.warmup) samples.push_back(Micros(end - start));
  }
  rows.push_back(Summarize(kind, "3x Send+RecvAll", std::move(samples)));
  status = supervisor.Shutdown();
  if (!status.ok()) {
    fprintf(stderr, "%s\n", status.ToString().c_str());
    return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--worker") {
      return RunWorkerProcess(
          []() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
            return MakeEcho();
          });
    }
    bool ok = false;
    if (absl::StartsWith(arg, "--iterations=")) {
      ok = absl::SimpleAtoi(arg.substr(13), &options.iterations) &&
           options.iterations > 0;
    } else if (absl::StartsWith(arg, "--warmup=")) {
      ok = absl::SimpleAtoi(arg.substr(9), &options.warmup) &&
           options.warmup >= 0;
    } else if (absl::StartsWith(arg, "--spin_us=")) {
      ok = absl::SimpleAtoi(arg.substr(10), &options.spin_us) &&
           options.spin_us >= 0;
    }
    if (!ok) {
      fprintf(stderr,
              "usage: supervisor_bench [--iterations=N] [--warmup=N] "
              "[--spin_us=N]\n");
      return 64;
    }
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[n] = '\0';

  std::vector<Row> rows;
  if (!Measure(true, self, options, rows)) return 1;
  if (!Measure(false, self, options, rows)) return 1;
  printf("%d iterations after %d warm-up, spin %d us\n", options.iterations,
         options.warmup, options.spin_us);
  printf("%-9s %-17s %12s %12s %12s\n", "children", "operation", "median us",
         "p99 us", "mean us");
  for (const Row& row : rows) {
    printf("%-9s %-17s %12.1f %12.1f %12.1f\n", row.children.c_str(),
           row.operation.c_str(), row.median_us, row.p99_us, row.mean_us);
  }
  return 0;
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
