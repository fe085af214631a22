// aggregatord: flags in, RunDaemon out. Everything else lives in lib/.
#include <CLI/CLI.hpp>

#include "daemon/daemon_runner.h"
#include "lib/base/version.h"

int main(int argc, char** argv) {
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
