// aggregatord: flags in, RunDaemon out. Everything else lives in lib/.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstring>

#include "daemon/daemon_runner.h"
#include "lib/base/version.h"
#include "lib/process/process_guard.h"

// The fallback for the loader-audit module (daemon/signals_audit.c), which
// blocks the same signals (daemon/daemon_signals.h) before ld.so loads or
// relocates anything. ld.so goes on without that module when it is missing
// from beside the binary (one "cannot be loaded as audit interface ...
// ignored" line on stderr), in a secure-exec start (setuid or file
// capabilities: ld.so does not trust $ORIGIN there, and says nothing) and in
// the sanitizer builds (linked without it: daemon/BUILD). Then this is as
// early as the binary's code runs: a SIGHUP or SIGTERM during start-up stays
// pending for the signal loop instead of taking the default action (which ends
// the process with no log line). ld.so calls the executable's .preinit_array
// once it has relocated, before any library's initialiser; a constructor here
// ran only after them all (gRPC's, protobuf's, abseil's...: issue 26 item 17).
// The raw system call, which needs no library state: not even libc's
// initialiser has run yet.
namespace {

void BlockSignalsBeforeInitialisers(int, char**, char**) {
  uint64_t mask = 0;  // the kernel's sigset_t: one bit per signal
  for (int signo : aggregator::kDaemonSignals) {
    mask |= uint64_t{1} << (signo - 1);
  }
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &mask, nullptr, sizeof(mask));
}

__attribute__((section(".preinit_array"), used)) void (*block_signals_early)(
    int, char**, char**) = &BlockSignalsBeforeInitialisers;

}  // namespace

int main(int argc, char** argv) {
  // The daemon starts its workers through itself, as their process guard.
  if (argc > 1 && std::strcmp(argv[1], aggregator::kProcessGuardFlag) == 0) {
    return aggregator::RunProcessGuard(argc, argv);
  }
  aggregator::DaemonOptions options;
  CLI::App app{
      "aggregatord: serves the Learner API to a coordinator and fans each call "
      "out to many learners."};
  app.set_version_flag("--version", aggregator::kVersion);
  app.add_option("-c,--config", options.config_path,
                 "aggregator.yaml to run (default: the embedded default)")
      ->envname("AGGREGATOR_CONFIG");
  app.add_option("--listen", options.listen,
                 "address to serve on, overriding the file's `listen`");
  app.add_option("--log-level", options.log_level,
                 "trace, debug, info, warn, error, critical or off "
                 "(overrides `log.level`)");
  app.add_flag("--check", options.check_only,
               "validate the configuration and exit (0 when valid)");
  CLI11_PARSE(app, argc, argv);
  return aggregator::RunDaemon(options);
}
