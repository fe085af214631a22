// RunDaemon: aggregatord's life from parsed flags to exit code: load and
// validate the configuration, start the server and the metrics endpoint,
// take signals (SIGHUP reloads, SIGTERM/SIGINT drain and stop), talk to
// systemd. main() only parses flags into DaemonOptions and calls it.
#ifndef DAEMON_DAEMON_RUNNER_H_
#define DAEMON_DAEMON_RUNNER_H_

#include <signal.h>

#include <string>

#include "daemon/daemon_signals.h"

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

// The signals the daemon takes synchronously, in its signal loop
// (daemon_signals.h: the list the loader-audit module blocks too).
inline constexpr int kDaemonSignals[] = {AGGREGATORD_SIGNALS};

// Blocks kDaemonSignals in the calling thread, and so in every thread it
// starts. aggregatord blocks them before ld.so loads anything (its loader-audit
// module, daemon/signals_audit.c), else before any library's initialiser runs
// (daemon/main.cc, .preinit_array), and RunDaemon again, so a signal that
// arrives at start-up waits for the signal loop instead of killing the process.
void BlockDaemonSignals();

// Exit codes: 0 after a clean stop or a passing --check; 1 for an invalid
// configuration (the reasons on stderr, with file:line:column), 2 when the
// server cannot start.
int RunDaemon(const DaemonOptions& options);

}  // namespace aggregator

#endif  // DAEMON_DAEMON_RUNNER_H_
