#include "daemon/daemon_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/bazel_paths.h"
#include "lib/base/version.h"
#include "lib/config/config_loader.h"
#include "lib/ops/logging.h"
#include "lib/ops/metrics_endpoint.h"
#include "lib/ops/systemd_notifier.h"
#include "lib/server/aggregator_server.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;

constexpr char kEmbeddedSource[] = "<embedded default>";
// The longest the signal loop sleeps between watchdog checks.
constexpr std::chrono::milliseconds kLoopPeriod(1000);

// The configuration to run: the file (or the embedded default) with the
// command line's overrides.
absl::StatusOr<AggregatorConfig> LoadConfig(const DaemonOptions& options) {
  absl::StatusOr<AggregatorConfig> config =
      options.config_path.empty()
          ? ParseConfig(DefaultConfigYaml(), kEmbeddedSource)
          : LoadConfigFile(ResolveUserPath(options.config_path));
  if (!config.ok()) return config;
  if (!options.listen.empty()) {
    absl::StatusOr<HostPort> listen =
        HostPort::Parse(options.listen, /*allow_port_zero=*/true);
    if (!listen.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen: bad address \"", options.listen,
                       "\": ", listen.status().message()));
    }
    config->listen = *std::move(listen);
  }
  if (!options.log_level.empty()) config->log.level = options.log_level;
  return config;
}

// Signals are blocked in every thread and taken synchronously by the main
// thread: SIGTERM/SIGINT stop, SIGHUP reloads, SIGUSR1 wakes it when a stop is
// complete.
class SignalLoop {
 public:
  explicit SignalLoop(const SystemdNotifier& notifier) : notifier_(notifier) {
    sigemptyset(&signals_);
    for (int signo : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) {
      sigaddset(&signals_, signo);
    }
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }

  // The next signal, pinging the systemd watchdog while waiting.
  int Next(SystemdNotifier& notifier) {
    while (true) {
      auto period = kLoopPeriod;
      if (auto interval = notifier_.watchdog_interval()) {
        period = std::min(
            period,
            std::chrono::duration_cast<std::chrono::milliseconds>(*interval));
        if (Steady::now() >= next_ping_) {
          notifier.Watchdog();
          next_ping_ = Steady::now() + *interval;
        }
        period = std::min(period,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              next_ping_ - Steady::now()));
      }
      const timespec wait{static_cast<time_t>(period.count() / 1000),
                          static_cast<long>((period.count() % 1000) * 1000000)};
      siginfo_t info;
      const int signo = sigtimedwait(&signals_, &info, &wait);
      if (signo > 0) return signo;
    }
  }

 private:
  const SystemdNotifier& notifier_;
  sigset_t signals_;
  Steady::time_point next_ping_ = Steady::now();
};

}  // namespace

int RunDaemon(const DaemonOptions& options) {
  SystemdNotifier notifier;
  SignalLoop signals(notifier);  // before any thread starts

  absl::StatusOr<AggregatorConfig> config = LoadConfig(options);
  if (!config.ok()) {
    std::fprintf(stderr, "aggregatord: invalid configuration:\n%s\n",
                 std::string(config.status().message()).c_str());
    return 1;
  }
  if (absl::Status logging = ConfigureLogging(config->log.level);
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
  std::atomic<AggregatorServer*> running{nullptr};
  std::atomic<bool> announced_ready{false};
  const int min_learners = config->service.min_learners;
  ServerOptions server_options;
  server_options.program_dirs = FindRunfilesDirs();
  server_options.on_ready_change = [&](bool ready, size_t ready_learners,
                                       size_t learners) {
    notifier.Status(absl::StrCat(
        ready ? "serving: " : "waiting: ", ready_learners, " of ", learners,
        " learners ready (min_learners ", min_learners, ")"));
    // READY=1 on each transition to ready (systemd ignores repeats).
    if (ready != announced_ready.exchange(ready) && ready) notifier.Ready();
  };
  server_options.reload = [&]() -> absl::StatusOr<ReloadResult> {
    AggregatorServer* server = running.load();
    if (server == nullptr) {
      return absl::UnavailableError("aggregatord is still starting");
    }
    if (options.config_path.empty()) {
      return absl::FailedPreconditionError(
          "aggregatord runs its embedded default configuration (no --config): "
          "there is no file to reload");
    }
    notifier.Reloading();
    absl::StatusOr<AggregatorConfig> next = LoadConfig(options);
    absl::StatusOr<ReloadResult> reply =
        next.ok() ? server->Reload(*next) : next.status();
    if (!next.ok()) server->metrics().Reloaded(false);
    if (reply.ok()) {
      (void)ConfigureLogging(next->log.level);
      spdlog::info("configuration reloaded (generation {}): {}",
                   reply->config_generation, reply->summary);
    } else {
      // One log line: each error of a bad file becomes a "; "-separated part.
      std::string message(reply.status().message());
      for (size_t at; (at = message.find('\n')) != std::string::npos;) {
        message.replace(at, 1, "; ");
      }
      spdlog::error(
          "configuration reload failed, the running configuration stays: {}",
          message);
    }
    notifier.Ready();
    notifier.Status(server->Summary());
    return reply;
  };

  auto server = AggregatorServer::Start(*config, server_options);
  if (!server.ok()) {
    spdlog::critical("{}", std::string(server.status().message()));
    return 2;
  }
  running = server->get();
  std::unique_ptr<MetricsEndpoint> metrics;
  if (config->metrics.listen.has_value()) {
    auto started = MetricsEndpoint::Start(*config->metrics.listen,
                                          (*server)->metrics().collectable());
    if (!started.ok()) {
      spdlog::critical("{}", std::string(started.status().message()));
      (*server)->Shutdown(std::chrono::system_clock::now());
      return 2;
    }
    metrics = std::move(*started);
    spdlog::info("metrics on http://{}/metrics",
                 config->metrics.listen->WithPort(metrics->port()).ToString());
  }

  int signo = 0;
  while ((signo = signals.Next(notifier)) == SIGHUP || signo == SIGUSR1) {
    if (signo == SIGHUP) (void)server_options.reload();
  }
  spdlog::info("received {}: draining calls in flight (up to {}ms)",
               signo == SIGTERM ? "SIGTERM" : "SIGINT",
               (*server)->config_drain_timeout().count());
  notifier.Stopping();

  // Stopping runs beside the signal loop, so a second signal still acts.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    const auto drain = (*server)->config_drain_timeout();
    if (!(*server)->Drain(Steady::now() + drain)) {
      spdlog::warn(
          "drain_timeout ({}ms) passed with calls still in flight: "
          "cancelling them",
          drain.count());
    }
    if (metrics != nullptr) metrics->Stop();
    (*server)->Shutdown(std::chrono::system_clock::now());
    stopped = true;
    kill(getpid(), SIGUSR1);  // wakes the signal loop
  });
  while (!stopped) {
    signo = signals.Next(notifier);
    if (signo == SIGTERM || signo == SIGINT) {
      spdlog::warn("second stop signal: exiting now");
      std::_Exit(1);  // workers die with us (PR_SET_PDEATHSIG)
    }
  }
  stopper.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace aggregator
