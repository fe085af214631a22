// RunDaemon: aggregatord's life from parsed flags to exit code: load and
// validate the configuration, start the server, wait for signals, drain and
// stop. main() only parses flags into DaemonOptions and calls it.
#ifndef DAEMON_DAEMON_RUNNER_H_
#define DAEMON_DAEMON_RUNNER_H_

#include <chrono>
#include <string>

namespace aggregator {

struct DaemonOptions {
  // Empty: the embedded default configuration. A relative path is resolved
  // against $BUILD_WORKING_DIRECTORY when set (so `bazel run` takes paths as
  // typed).
  std::string config_path;
  std::string listen;     // overrides `listen` when not empty
  std::string log_level;  // overrides `log.level` when not empty
  bool check_only = false;
};

// Exit codes: 0 after a clean stop or a passing --check; 1 for an invalid
// configuration (the reasons on stderr, with file:line:column), 2 when the
// server cannot start.
int RunDaemon(const DaemonOptions& options);

}  // namespace aggregator

#endif  // DAEMON_DAEMON_RUNNER_H_
