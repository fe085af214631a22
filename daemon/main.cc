// aggregatord: flags in, RunDaemon out. Everything else lives in lib/.
#include <CLI/CLI.hpp>
#include <cstring>

#include "daemon/daemon_runner.h"
#include "lib/base/version.h"
#include "lib/process/process_guard.h"

// Before main(), as early as this binary's code runs: a SIGHUP or SIGTERM
// that arrives during start-up waits for the signal loop instead of taking
// the default action (which ends the process).
__attribute__((constructor)) static void BlockSignalsAtLoad() {
  aggregator::BlockDaemonSignals();
}

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
