#include "lib/daemon_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "lib/aggregator_server.h"
#include "lib/config.h"
#include "lib/logging.h"
#include "lib/version.h"

namespace aggregator {
namespace {

constexpr char kEmbeddedSource[] = "<embedded default>";

std::string ResolveConfigPath(const std::string& path) {
  const char* working_directory = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path.front() == '/' || working_directory == nullptr) {
    return path;
  }
  return std::string(working_directory) + "/" + path;
}

absl::StatusOr<AggregatorConfig> LoadConfig(const DaemonOptions& options) {
  if (options.config_path.empty()) {
    return ParseConfig(DefaultConfigYaml(), kEmbeddedSource);
  }
  return LoadConfigFile(ResolveConfigPath(options.config_path));
}

// Waits for SIGTERM or SIGINT (blocked in every thread, taken here
// synchronously).
void WaitForStopSignal(const sigset_t& signals) {
  while (true) {
    const timespec period{1, 0};
    siginfo_t info;
    const int signo = sigtimedwait(&signals, &info, &period);
    if (signo == SIGTERM || signo == SIGINT) {
      spdlog::info("received {}: stopping",
                   signo == SIGTERM ? "SIGTERM" : "SIGINT");
      return;
    }
    if (signo == SIGHUP) {
      spdlog::warn(
          "received SIGHUP: configuration reload is not supported by "
          "this aggregatord yet; restart it to apply a new configuration");
    }
  }
}

}  // namespace

int RunDaemon(const DaemonOptions& options) {
  // Before any thread starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<AggregatorConfig> config = LoadConfig(options);
  if (!config.ok()) {
    std::fprintf(stderr, "aggregatord: invalid configuration:\n%s\n",
                 std::string(config.status().message()).c_str());
    return 1;
  }
  if (!options.listen.empty()) config->listen = options.listen;
  if (!options.log_level.empty()) config->log_level = options.log_level;
  if (absl::Status logging = ConfigureLogging(config->log_level);
      !logging.ok()) {
    std::fprintf(stderr, "aggregatord: %s\n",
                 std::string(logging.message()).c_str());
    return 1;
  }
  if (options.check_only) {
    std::printf("configuration '%s' OK\n", config->source.c_str());
    return 0;
  }

  spdlog::info("aggregatord {} starting with configuration {}", kVersion,
               config->source);
  auto server = AggregatorServer::Start(*config);
  if (!server.ok()) {
    spdlog::critical("{}", std::string(server.status().message()));
    return 2;
  }
  WaitForStopSignal(signals);
  spdlog::info("draining in-flight calls (up to {}ms)",
               options.drain_timeout.count());
  (*server)->Shutdown(std::chrono::system_clock::now() + options.drain_timeout);
  spdlog::info("stopped");
  return 0;
}

}  // namespace aggregator
