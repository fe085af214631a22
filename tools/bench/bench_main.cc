// bench: measures aggregatord against issue 6's targets in one run, with the
// daemon and example learners as real processes on this machine.
//
//   bazel run -c opt //tools:bench -- [--quick] [--json PATH]
//       [--env KEY=VALUE]... [--preload LIB] [--compare-allocators]
//
// Sections: 1 small calls, 2 large batches, 3 fan-out, 4 supervisor (run by
// //tools:supervisor_bench when built), 5 start-up and shutdown; A (only with
// --compare-allocators) the linked tcmalloc against preloaded jemalloc and
// full tcmalloc. Prints a table on stdout, progress on stderr, and writes JSON.
// See tools/bench/BENCH.md for what each row means.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/tool_paths.h"

namespace aggregator::bench {
namespace {

// The bench's own directory (bazel-bin/tools/bench), where a sibling target's
// binary lands once built.
std::string OwnDirectory() {
  const std::string exe = SelfExecutable();
  return exe.substr(0, exe.rfind('/'));
}

// A flag taking positive numbers separated by commas.
CLI::Option* AddPositiveList(CLI::App& app, const std::string& name,
                             std::vector<int>& values,
                             const std::string& help) {
  return app.add_option(name, values, help)
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
}

absl::Status ResolveBinaries(const char* argv0, BenchOptions& options) {
  const ToolPaths paths(argv0, "bench");
  if (absl::Status s =
          ResolveDaemonAndLearner(paths, options.daemon, options.learner);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          paths.Resolve(options.minimal_relay, "tools/bench/minimal_relay",
                        "minimal_relay", "--minimal-relay");
      !s.ok()) {
    return s;
  }
  if (options.supervisor_bench.empty()) {
    options.supervisor_bench = paths.Locate("tools/bench/supervisor_bench");
    const std::string sibling = OwnDirectory() + "/supervisor_bench";
    if (options.supervisor_bench.empty() && Executable(sibling)) {
      options.supervisor_bench = sibling;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ChildEnv> ParseEnv(const BenchOptions& options) {
  ChildEnv env;
  std::vector<std::string> shown;
  for (const std::string& entry : options.env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env '", entry, "': expected KEY=VALUE"));
    }
    env.vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    shown.push_back(entry);
  }
  if (!options.preload.empty()) {
    if (access(options.preload.c_str(), R_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("--preload '", options.preload, "' is not readable"));
    }
    env.vars.emplace_back("LD_PRELOAD", options.preload);
    shown.push_back(absl::StrCat("LD_PRELOAD=", options.preload));
  }
  if (!shown.empty()) env.label = absl::StrJoin(shown, " ");
  return env;
}

nlohmann::json OptionsJson(const BenchOptions& o, const ChildEnv& env) {
  return {{"quick", o.quick},
          {"small_iterations", o.small_iterations},
          {"fanout_iterations", o.fanout_iterations},
          {"large_iterations", o.large_iterations},
          {"startup_cycles", o.startup_cycles},
          {"sizes_mib", o.sizes_mib},
          {"learner_counts", o.learner_counts},
          {"fanout_counts", o.fanout_counts},
          {"large_sample_bytes", o.large_sample_bytes},
          {"stream_message_bytes", o.stream_message_bytes},
          {"breakdown_iterations", o.breakdown_iterations},
          {"baseline_daemon", o.baseline_daemon},
          {"netns_rate", o.netns_rate},
          {"netns_iterations", o.netns_iterations},
          {"netns_sizes_mib", o.netns_sizes_mib},
          {"guard_replicas", o.guard_replicas},
          {"guard_window_s", o.guard_window_s},
          {"sections", o.sections},
          {"compare_allocators", o.compare_allocators},
          {"daemon", o.daemon},
          {"learner", o.learner},
          {"minimal_relay", o.minimal_relay},
          {"supervisor_bench", o.supervisor_bench},
          {"child_env", env.label},
          {"child_env_vars", env.vars}};
}

int Main(int argc, char** argv) {
  BenchOptions options;
  CLI::App app{
      "bench: measures aggregatord against issue 6 (small calls, large "
      "batches, fan-out, supervisor, start-up) with real processes"};
  app.add_flag("--quick", options.quick,
               "a short run (about 30 s): fewer iterations everywhere");
  auto* small = app.add_option("--iterations", options.small_iterations,
                               "timed small calls per method and target")
                    ->check(CLI::PositiveNumber);
  auto* fanout =
      app.add_option("--fanout-iterations", options.fanout_iterations,
                     "timed Learn calls per fan-out case")
          ->check(CLI::PositiveNumber);
  auto* large = app.add_option("--large-iterations", options.large_iterations,
                               "timed calls per large-batch case")
                    ->check(CLI::PositiveNumber);
  auto* cycles = app.add_option("--startup-cycles", options.startup_cycles,
                                "daemon start/stop cycles in section 5")
                     ->check(CLI::PositiveNumber);
  AddPositiveList(app, "--sizes-mib", options.sizes_mib,
                  "large batch sizes in MiB");
  auto* counts =
      AddPositiveList(app, "--learner-counts", options.learner_counts,
                      "learner counts for large batches (--quick: "
                      "4 only)");
  AddPositiveList(app, "--fanout-counts", options.fanout_counts,
                  "learner counts for fan-out");
  app.add_option("--sample-bytes", options.large_sample_bytes,
                 "bytes per sample in large batches")
      ->check(CLI::PositiveNumber);
  app.add_option(
      "--sections", options.sections,
      "which sections to run, e.g. 125 (default 123456; 7, worker guards "
      "at rest, only when asked)");
  app.add_option("--stream-message-bytes", options.stream_message_bytes,
                 "bytes of samples per LearnStream message (sections 2, 6)")
      ->check(CLI::PositiveNumber);
  auto* breakdown =
      app.add_option("--breakdown-iterations", options.breakdown_iterations,
                     "section 1: calls asking the daemon for its timestamps, "
                     "per method")
          ->check(CLI::PositiveNumber);
  app.add_option("--baseline-daemon", options.baseline_daemon,
                 "section 1: another aggregatord build timed beside this one "
                 "(e.g. main's), call by call");
  app.add_option("--netns-rate", options.netns_rate,
                 "section 6: each host's link (tc rate, e.g. 1gbit, 10gbit)");
  auto* netns_iterations =
      app.add_option("--netns-iterations", options.netns_iterations,
                     "section 6: timed calls per relay")
          ->check(CLI::PositiveNumber);
  AddPositiveList(app, "--netns-sizes-mib", options.netns_sizes_mib,
                  "section 6: batch sizes in MiB (default 64)");
  auto* guard_replicas = AddPositiveList(
      app, "--guard-replicas", options.guard_replicas,
      "section 7: worker replica counts (default 1,50,200; --quick: 1,10)");
  auto* guard_window =
      app.add_option("--guard-window-s", options.guard_window_s,
                     "section 7: seconds the idle guards' CPU is read over "
                     "(default 10; --quick: 2)")
          ->check(CLI::PositiveNumber);
  app.add_option("--netns-child-out", options.netns_child_out,
                 "(internal) run section 6 here and write it to this file")
      ->group("");
  app.add_flag("--compare-allocators", options.compare_allocators,
               "run only section A: as built (tcmalloc) against preloaded "
               "jemalloc and full tcmalloc, 64 and 256 MiB over 4 learners");
  app.add_option("--daemon", options.daemon,
                 "aggregatord binary (default: from the runfiles)");
  app.add_option("--learner", options.learner,
                 "example_learner binary (default: from the runfiles)");
  app.add_option("--minimal-relay", options.minimal_relay,
                 "minimal_relay binary, section 1's floor (default: from the "
                 "runfiles)");
  app.add_option("--supervisor-bench", options.supervisor_bench,
                 "supervisor_bench binary (default: built next to bench)");
  app.add_option("--env", options.env,
                 "KEY=VALUE for the daemon and learners (repeatable), e.g. "
                 "TCMALLOC_RELEASE_RATE=0");
  app.add_option("--preload", options.preload,
                 "LD_PRELOAD for the daemon and learners, e.g. "
                 "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2");
  app.add_option("--json", options.json_path,
                 "results file (default: bench-results.json in the directory "
                 "bazel run was called from, else the current one)");
  CLI11_PARSE(app, argc, argv);

  if (options.quick) {
    if (small->count() == 0) options.small_iterations = 200;
    if (fanout->count() == 0) options.fanout_iterations = 30;
    if (large->count() == 0) options.large_iterations = 1;
    if (cycles->count() == 0) options.startup_cycles = 2;
    // The targets' cases only: 64 MiB over 4 learners and 256 MiB RSS.
    if (counts->count() == 0) options.learner_counts = {4};
    if (breakdown->count() == 0) options.breakdown_iterations = 100;
    if (netns_iterations->count() == 0) options.netns_iterations = 1;
    if (guard_replicas->count() == 0) options.guard_replicas = {1, 10};
    if (guard_window->count() == 0) options.guard_window_s = 2;
  }
  if (options.compare_allocators) options.sections = "A";
  if (options.json_path.empty()) options.json_path = "bench-results.json";
  options.json_path = UserPath(options.json_path);
  options.daemon = UserPath(options.daemon);
  options.learner = UserPath(options.learner);
  options.minimal_relay = UserPath(options.minimal_relay);
  options.supervisor_bench = UserPath(options.supervisor_bench);
  options.preload = UserPath(options.preload);
  options.baseline_daemon = UserPath(options.baseline_daemon);

  if (absl::Status s = ResolveBinaries(argv[0], options); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto env = ParseEnv(options);
  if (!env.ok()) {
    std::fprintf(stderr, "bench: %s\n",
                 std::string(env.status().message()).c_str());
    return 2;
  }
  auto dir = TempDir::Create();
  if (!dir.ok()) {
    std::fprintf(stderr, "bench: %s\n", dir.status().ToString().c_str());
    return 2;
  }

  if (!options.netns_child_out.empty()) {
    // Section 6's child, in its network namespace: the section as JSON.
    Bench bench(options, *env, std::move(*dir));
    const Section section = bench.NetworkInNamespace();
    std::ofstream out(options.netns_child_out, std::ios::trunc);
    out << SectionJson(section).dump() << "\n";
    out.close();
    return out && !section.failed ? 0 : 1;
  }

  Report report;
  report.machine = ReadMachineInfo();
  report.options = OptionsJson(options, *env);
  Progress(absl::StrCat("daemon ", options.daemon, "; learner ",
                        options.learner, "; child env: ", env->label));
  const auto started = Clock::now();
  {
    Bench bench(options, *env, std::move(*dir));
    const std::string& s = options.sections;
    auto wants = [&](char id) { return s.find(id) != std::string::npos; };
    if (wants('1')) report.sections.push_back(bench.SmallCalls());
    if (wants('2')) report.sections.push_back(bench.LargeBatches());
    if (wants('3')) report.sections.push_back(bench.FanOut());
    if (wants('4')) report.sections.push_back(bench.Supervisor());
    if (wants('5')) report.sections.push_back(bench.StartUp());
    if (wants('6')) report.sections.push_back(bench.Network());
    if (wants('7')) report.sections.push_back(bench.IdleGuards());
    if (wants('A')) report.sections.push_back(bench.Allocators());
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - started).count();
  report.options["wall_seconds"] = seconds;

  std::string text = report.Text();
  absl::StrAppend(
      &text, "\nchild env: ",
      options.compare_allocators ? "per allocator (section A)" : env->label,
      "; ran ", FormatNumber(seconds), " s; results in ", options.json_path,
      "\n");
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);

  std::ofstream json(options.json_path, std::ios::trunc);
  json << report.Json().dump(2) << "\n";
  json.close();
  if (!json) {
    std::fprintf(stderr, "bench: cannot write %s\n", options.json_path.c_str());
    return 1;
  }
  const bool failed =
      std::any_of(report.sections.begin(), report.sections.end(),
                  [](const Section& section) { return section.failed; });
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace aggregator::bench

int main(int argc, char** argv) { return aggregator::bench::Main(argc, argv); }
