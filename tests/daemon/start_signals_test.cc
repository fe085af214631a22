// Issue 26 item 17: a signal that arrives while aggregatord's shared libraries
// initialise (gRPC's, protobuf's, abseil's...) stays pending and is handled
// once the daemon takes signals, instead of ending it with no log line. The
// signal is raised from inside that window by a preloaded library
// (raise_at_load.c): a signal sent from here could as well arrive before
// ld.so has relocated, which no code in the executable can cover
// (tools/bench/sighup_window measures that window; the last two cases here
// check it and how it is measured). A loader-audit module blocks the signals
// before even that (daemon/signals_audit.c): the cases in the middle check
// that it does, that aggregatord loads it, and the fallback without it.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/daemon_signals.h"
#include "tests/testing/process_helpers.h"
#include "tools/bench/sighup_starter.h"

using namespace aggregator::testing;

namespace {

constexpr char kDaemon[] = "daemon/aggregatord";
constexpr char kRaiser[] = "tests/daemon/libraise_at_load.so";
// Built beside the binary, where its DT_AUDIT names it.
constexpr char kAuditModule[] = "daemon/libaggregatord_signals.so";
constexpr char kAuditModuleName[] = "libaggregatord_signals.so";

// What sighup_window runs: no learners, the Learner API on a free port.
std::vector<std::string> QuietDaemon() {
  const std::string config =
      WriteFile(TempDir() + "/aggregator.yaml",
                "min_learners: 0\nmetrics: {listen: \"\"}\n"
                "admin: {listen: \"\"}\n");
  return {kDaemon, "--config", config, "--listen", "127.0.0.1:0"};
}

// How long this thread has been runnable, on a CPU or waiting for one, ms
// (/proc/thread-self/schedstat): a busy wait is runnable throughout however
// little of the CPU others' load leaves it; a sleep is not.
double RunnableMs() {
  std::ifstream schedstat("/proc/thread-self/schedstat");
  double run_ns = 0;
  double wait_ns = 0;
  schedstat >> run_ns >> wait_ns;
  REQUIRE(schedstat);
  return (run_ns + wait_ns) / 1e6;
}

// `path` with every symbolic link resolved.
std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  INFO(path);
  REQUIRE(realpath(path.c_str(), resolved) != nullptr);
  return resolved;
}

// Starts aggregatord (`binary`) with `signal_name` (HUP or TERM) raised at
// load.
std::unique_ptr<aggregator::Subprocess> StartRaising(
    const char* signal_name, const std::string& binary = kDaemon) {
  const std::string config =
      WriteFile(TempDir() + "/aggregator.yaml",
                "min_learners: 0\nmetrics: {listen: \"\"}\n"
                "admin: {listen: \"\"}\n");
  aggregator::SubprocessOptions options;
  options.argv = {binary, "--config", config, "--listen", "127.0.0.1:0"};
  options.env = {{"LD_PRELOAD", RealPath(kRaiser)},
                 {"RAISE_AT_LOAD", signal_name},
                 // Sanitizer builds: the preloaded library comes first.
                 {"ASAN_OPTIONS", "verify_asan_link_order=0"}};
  auto daemon = aggregator::Subprocess::Start(options);
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return std::move(*daemon);
}

// Reads stderr to EOF, then reaps; the log and how it ended.
std::string LogToExit(aggregator::Subprocess& daemon,
                      aggregator::ExitStatus* exit) {
  const std::string log = ReadAll(daemon, /*from_stderr=*/true);
  auto ended = daemon.Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(ended.ok());
  *exit = *ended;
  return log;
}

// Runs `argv` with `env` to its exit; its stdout, and stderr in `*err`.
std::string Run(std::vector<std::string> argv,
                std::vector<std::pair<std::string, std::string>> env,
                std::string* err) {
  aggregator::SubprocessOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  auto process = aggregator::Subprocess::Start(options);
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  const std::string out = ReadAll(**process, /*from_stderr=*/false);
  *err = ReadAll(**process, /*from_stderr=*/true);
  auto ended = (*process)->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(ended.ok());
  INFO(*err);
  CHECK(ended->ok());
  return out;
}

// The blocked signals of a /proc/PID/status text (its SigBlk line).
uint64_t BlockedSignals(const std::string& status) {
  const size_t at = status.find("SigBlk:");
  INFO(status);
  REQUIRE(at != std::string::npos);
  return std::stoull(status.substr(at + 7), nullptr, 16);
}

// daemon_signals.h's list as the kernel's mask.
uint64_t DaemonSignalMask() {
  uint64_t mask = 0;
  for (int signo : {AGGREGATORD_SIGNALS}) mask |= uint64_t{1} << (signo - 1);
  return mask;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Waits for the one reload a SIGHUP raised at start-up makes, then stops the
// daemon and returns the rest of its log (it must exit cleanly).
std::string ReloadedThenStopped(aggregator::Subprocess& daemon) {
  const std::string reloaded =
      WaitForLine(daemon, "configuration reloaded (generation", true);
  CHECK_THAT(reloaded, Catch::Contains("generation 2"));
  REQUIRE(daemon.Signal(SIGTERM).ok());
  aggregator::ExitStatus exit;
  const std::string rest = LogToExit(daemon, &exit);
  INFO(rest);
  CHECK(exit.ok());
  return rest;
}

// Whether this test (and so aggregatord) is a sanitizer build, which links
// every library shared (third_party/system/static_link.bzl).
constexpr bool kSanitizerBuild =
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

}  // namespace

TEST_CASE(
    "ld.so loads few shared objects before aggregatord can block its "
    "signals") {
  if (kSanitizerBuild) {
    WARN("not checked: sanitizer builds link every library shared");
    return;
  }
  // Each one ld.so loads and relocates lengthens the time after exec in which
  // a SIGHUP ends the daemon: 77 with gRPC, protobuf, abseil and libsystemd
  // shared, under 20 with them static or gone.
  aggregator::SubprocessOptions options;
  options.argv = {kDaemon};
  options.env = {{"LD_TRACE_LOADED_OBJECTS", "1"}};  // what ldd does
  auto daemon = aggregator::Subprocess::Start(options);
  REQUIRE(daemon.ok());
  const std::string objects = ReadAll(**daemon, /*from_stderr=*/false);
  REQUIRE((*daemon)->Wait(std::chrono::steady_clock::now() + kLongWait).ok());
  INFO(objects);
  CHECK(Count(objects, "\n") - Count(objects, "linux-vdso") <= 20);
  for (const char* shared : {"libgrpc", "libprotobuf", "libabsl", "libsystemd",
                             "libcares", "libre2", "libupb"}) {
    CHECK_THAT(objects, !Catch::Contains(shared));
  }
}

TEST_CASE(
    "A SIGHUP raised while the libraries initialise reloads once the daemon "
    "runs") {
  auto daemon = StartRaising("HUP");
  // Before the fix it died here of SIGHUP: the reload line never came.
  const std::string rest = ReloadedThenStopped(*daemon);
  CHECK(Count(rest, "configuration reloaded") == 0);  // one reload, not two
}

TEST_CASE(
    "A SIGTERM raised while the libraries initialise stops the daemon "
    "cleanly once it runs") {
  auto daemon = StartRaising("TERM");
  aggregator::ExitStatus exit;
  const std::string log = LogToExit(*daemon, &exit);
  INFO(log);
  CHECK(exit.ToString() == "exit code 0");
  CHECK_THAT(log, Catch::Contains("aggregatord listening on") &&
                      Catch::Contains("received SIGTERM") &&
                      Catch::Contains("stopped"));
}

TEST_CASE(
    "The loader-audit module blocks the daemon's signals in any program it "
    "is loaded into") {
  // cat, which blocks nothing itself, shows its own mask: ld.so ran the
  // module's la_version before it loaded anything else, then unloaded it.
  std::string err;
  const uint64_t with_module =
      BlockedSignals(Run({"/bin/cat", "/proc/self/status"},
                         {{"LD_AUDIT", RealPath(kAuditModule)}}, &err));
  CHECK(with_module == DaemonSignalMask());
  CHECK(err.empty());  // nothing said: la_version returning 0 is no error
  const uint64_t without =
      BlockedSignals(Run({"/bin/cat", "/proc/self/status"}, {}, &err));
  CHECK((without & DaemonSignalMask()) == 0);
}

TEST_CASE(
    "aggregatord loads its loader-audit module from beside the binary before "
    "any library") {
  if (kSanitizerBuild) {
    WARN("not checked: sanitizer builds link no loader-audit module");
    return;
  }
  // Started through the runfiles' symbolic link, as tests and `bazel run`
  // start it: $ORIGIN is the directory of the binary itself.
  const std::string beside =
      std::filesystem::path(RealPath(kDaemon)).parent_path().string() + "/" +
      kAuditModuleName;
  std::string debug;
  const std::string version =
      Run({kDaemon, "--version"}, {{"LD_DEBUG", "files"}}, &debug);
  INFO(debug);
  CHECK(!version.empty());
  CHECK_THAT(debug, !Catch::Contains("cannot be loaded as audit interface"));
  // Without DT_AUDIT (before issue 26 item 17's module) no such line.
  const size_t loaded = debug.find(
      "file=" + beside +
      " [1]; audit interface function la_version returned zero; ignored.");
  REQUIRE(loaded != std::string::npos);
  const size_t first_library = debug.find("needed by");
  REQUIRE(first_library != std::string::npos);
  CHECK(loaded < first_library);
}

TEST_CASE(
    "Without its loader-audit module aggregatord says so once, runs, and "
    "still blocks the signals before the libraries initialise") {
  if (kSanitizerBuild) {
    WARN("not checked: sanitizer builds link no loader-audit module");
    return;
  }
  // A copy of the binary alone, as an install that left the module out.
  const std::string alone = TempDir() + "/aggregatord";
  std::filesystem::copy_file(kDaemon, alone);
  std::string err;
  CHECK(!Run({alone, "--version"}, {}, &err).empty());
  CHECK(Count(err, "cannot be loaded as audit interface") == 1);
  CHECK_THAT(err, Catch::Contains(kAuditModuleName));
  // main.cc's .preinit_array, the fallback, blocks them then.
  auto daemon = StartRaising("HUP", alone);
  ReloadedThenStopped(*daemon);
}

TEST_CASE(
    "Timing a SIGHUP after exec, the starter leaves the CPU to the daemon") {
  // A starter that busy-waits preempts the daemon it has just started on the
  // daemon's own CPU in about a third of the starts (posix_spawn returns from
  // the daemon's execve) and keeps it for a scheduler tick or two: that, not
  // the daemon, made sighup_window's sweep see starts killed 8-12 ms after
  // exec (tools/bench/sighup_starter.h).
  const std::vector<std::string> daemon = QuietDaemon();
  const double before = RunnableMs();
  auto outcome =
      aggregator::SighupAfter(daemon, std::chrono::milliseconds(200));
  const double runnable = RunnableMs() - before;
  REQUIRE(outcome.ok());
  INFO("the starter was runnable for " << runnable
                                       << " ms of its 200 ms wait and the "
                                          "300 ms after the SIGHUP");
  CHECK(runnable < 100);
}

TEST_CASE(
    "A SIGHUP 10 ms after exec does not end the daemon, unless it was kept "
    "from a CPU") {
  // The bound (item 17): SIGHUP blocked within 10 ms of exec. What
  // comes first is the exec and ld.so's start up to the loader-audit module,
  // ~1 ms of CPU on a shared build machine (without the module, all of ld.so's
  // work: ~4 ms; tools/bench/BENCH.md). A busy machine
  // also makes it wait for a CPU, which no code in the daemon can shorten: a
  // start killed at 10 ms counts against the daemon only if it had had 10 ms
  // of CPU by then.
  if (kSanitizerBuild) {
    WARN(
        "not checked: sanitizer builds link every library shared, and the "
        "sanitizer's runtime starts up before the signals are blocked");
    return;
  }
  const std::vector<std::string> daemon = QuietDaemon();
  int killed = 0;
  int killed_with_cpu = 0;
  std::string cpu_of_killed;
  for (int i = 0; i < 30; ++i) {
    auto outcome =
        aggregator::SighupAfter(daemon, std::chrono::milliseconds(10));
    REQUIRE(outcome.ok());
    if (!outcome->killed) continue;
    ++killed;
    cpu_of_killed += std::to_string(outcome->cpu_ms) + " ";
    if (outcome->cpu_ms >= 10) ++killed_with_cpu;
  }
  INFO("killed " << killed << " of 30; their CPU time by the SIGHUP, ms: "
                 << cpu_of_killed);
  CHECK(killed_with_cpu == 0);
  if (killed > 0) WARN("starts killed while waiting for a CPU: " << killed);
}
