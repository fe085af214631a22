#include "daemon/daemon_runner.h"

#include <limits.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "daemon/bazel_paths.h"
#include "lib/base/mutex.h"
#include "lib/base/version.h"
#include "lib/config/address_clashes.h"
#include "lib/config/config_loader.h"
#include "lib/ops/logging.h"
#include "lib/ops/metrics_endpoint.h"
#include "lib/ops/systemd_notifier.h"
#include "lib/process/adopted.h"
#include "lib/server/aggregator_server.h"
#include "lib/server/reloader.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;

constexpr char kEmbeddedSource[] = "<embedded default>";
// The longest the signal loop sleeps between watchdog checks.
constexpr std::chrono::milliseconds kLoopPeriod(1000);
// A configuration file that takes longer to read is on a stalled file system.
constexpr std::chrono::milliseconds kConfigReadTimeout(10000);
// How long AggregatorAdmin.Reload waits for its reload.
constexpr std::chrono::seconds kAdminReloadTimeout(30);
// How long stopping waits for the metrics endpoint (a client may hold it).
constexpr std::chrono::seconds kMetricsStopTimeout(2);
// How long killing orphaned worker descendants may take, per round.
constexpr std::chrono::milliseconds kOrphanKillTimeout(500);

sigset_t DaemonSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signo : kDaemonSignals) {
    sigaddset(&signals, signo);
  }
  return signals;
}

// The next signal, pinging the systemd watchdog while waiting.
int NextSignal(SystemdNotifier& notifier, Steady::time_point* next_ping) {
  const sigset_t signals = DaemonSignals();
  while (true) {
    auto period = kLoopPeriod;
    if (auto interval = notifier.watchdog_interval()) {
      if (Steady::now() >= *next_ping) {
        notifier.Watchdog();
        *next_ping = Steady::now() + *interval;
      }
      period = std::min(period,
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            *next_ping - Steady::now()));
    }
    const timespec wait{static_cast<time_t>(period.count() / 1000),
                        static_cast<long>((period.count() % 1000) * 1000000)};
    siginfo_t info;
    const int signo = sigtimedwait(&signals, &info, &wait);
    if (signo > 0) return signo;
  }
}

// This executable, which runs the process guard (main() dispatches
// `--process-guard`); empty when it cannot be named.
std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// Every connection and worker pipe is an fd: take what the hard limit allows.
void RaiseOpenFilesLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  if (limit.rlim_cur != before) {
    spdlog::info("open files limit raised from {} to {}", before,
                 limit.rlim_cur);
  } else {
    spdlog::info("open files limit {}", limit.rlim_cur);
  }
}

// gperftools' tcmalloc's own interface, present when it is the allocator
// (//third_party/system:tcmalloc; not under a sanitizer).
extern "C" int MallocExtension_SetNumericProperty(const char* property,
                                                  size_t value)
    __attribute__((weak));

// tcmalloc lets its per-thread caches of small objects grow to 32 MiB in all,
// slowly, as gRPC's threads take turns: for a daemon of ~30 MiB that is RSS
// creeping up for hours (+20 % over a 10,000-step soak). 4 MiB keeps small
// allocations fast; batch buffers are large and never cached per thread.
// TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES in the environment still decides.
constexpr size_t kThreadCacheBytes = size_t{4} << 20;

void CapAllocatorThreadCaches() {
  if (MallocExtension_SetNumericProperty == nullptr ||
      std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") != nullptr) {
    return;
  }
  if (MallocExtension_SetNumericProperty(
          "tcmalloc.max_total_thread_cache_bytes", kThreadCacheBytes)) {
    spdlog::debug("tcmalloc's thread caches capped at {} bytes",
                  kThreadCacheBytes);
  }
}

// One log line: each error of a bad file becomes a "; "-separated part.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\n", "; "}});
}

// The daemon's life; RunDaemon's state.
class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options) : options_(options) {}

  int Run() {
    absl::StatusOr<AggregatorConfig> config = LoadConfig();
    if (!config.ok()) {
      std::fprintf(stderr, "aggregatord: invalid configuration:\n%s\n",
                   std::string(config.status().message()).c_str());
      return 1;
    }
    if (absl::Status logging =
            ConfigureLogging(config->log.level, config->log.format);
        !logging.ok()) {
      std::fprintf(stderr, "aggregatord: %s\n",
                   std::string(logging.message()).c_str());
      return 1;
    }
    if (options_.check_only) {
      std::printf("configuration '%s' OK\n", config->source.c_str());
      return 0;
    }
    spdlog::info("aggregatord {} starting with configuration {}", kVersion,
                 config->source);
    RaiseOpenFilesLimit();
    CapAllocatorThreadCaches();
    if (absl::Status reaper = BecomeChildSubreaper(); !reaper.ok()) {
      spdlog::warn("{}: orphaned worker descendants go to init instead",
                   std::string(reaper.message()));
    }
    reloader_ = std::make_unique<Reloader>([this] { return Reload(); });

    absl::StatusOr<std::unique_ptr<AggregatorServer>> server =
        AggregatorServer::Start(*config, ServerOptionsFor());
    if (!server.ok()) {
      spdlog::critical("{}", std::string(server.status().message()));
      reloader_->Stop();
      return 2;
    }
    server_ = server->get();
    ReportStatus();
    std::unique_ptr<MetricsEndpoint> metrics;
    if (config->metrics.listen.has_value()) {
      AggregatorServer* page_of = server->get();
      auto started = MetricsEndpoint::Start(
          *config->metrics.listen, (*server)->metrics().collectable(),
          [page_of] { return page_of->StatusPage(); });
      if (!started.ok()) {
        spdlog::critical("{}", std::string(started.status().message()));
        reloader_->Stop();
        (*server)->Shutdown(std::chrono::system_clock::now());
        return 2;
      }
      metrics = *std::move(started);
      const std::string bound =
          config->metrics.listen->WithPort(metrics->port()).ToString();
      spdlog::info("metrics on http://{}/metrics", bound);
      spdlog::info("status page on http://{}/", bound);
    }

    const int signo = ServeUntilStopSignal();
    spdlog::info("received {}: draining calls in flight (up to {}ms)",
                 signo == SIGTERM ? "SIGTERM" : "SIGINT",
                 (*server)->config_drain_timeout().count());
    notifier_.Stopping();
    Stop(**server, metrics.get());
    spdlog::info("stopped");
    return 0;
  }

 private:
  // The configuration to run: the file (or the embedded default) with the
  // command line's overrides.
  absl::StatusOr<AggregatorConfig> LoadConfig() const {
    absl::StatusOr<AggregatorConfig> config =
        options_.config_path.empty()
            ? ParseConfig(DefaultConfigYaml(), kEmbeddedSource)
            : LoadConfigFile(ResolveUserPath(options_.config_path),
                             kConfigReadTimeout);
    if (!config.ok()) return config;
    if (!options_.listen.empty()) {
      absl::StatusOr<HostPort> listen =
          HostPort::Parse(options_.listen, /*allow_port_zero=*/true);
      if (!listen.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: bad address \"", options_.listen,
                         "\": ", listen.status().message()));
      }
      if (std::string why = PlaintextRefusal(*config, *listen); !why.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--listen: ", why));
      }
      config->listen = *std::move(listen);
      for (const AddressClash& clash : FindAddressClashes(*config)) {
        if (clash.user.kind == AddressUser::kListen) {
          return absl::InvalidArgumentError(
              absl::StrCat("--listen: ", clash.message));
        }
        if (clash.other.kind == AddressUser::kListen) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--listen \"", options_.listen, "\": clashes with ",
              clash.user_key, " in ", config->source, ": ", clash.message));
        }
      }
    }
    if (!options_.log_level.empty()) config->log.level = options_.log_level;
    return config;
  }

  ServerOptions ServerOptionsFor() {
    ServerOptions server_options;
    server_options.program_dirs = FindRunfilesDirs();
    server_options.guard_program = SelfPath();
    server_options.on_ready_change = [this](bool ready) {
      // READY=1 on each transition to ready (systemd ignores repeats).
      if (ready != announced_ready_.exchange(ready) && ready) notifier_.Ready();
    };
    server_options.on_change = [this] { ReportStatus(); };
    server_options.reload = [this] {
      return reloader_->Request(Steady::now() + kAdminReloadTimeout);
    };
    return server_options;
  }

  // On the reloader's thread, one at a time.
  absl::StatusOr<ReloadResult> Reload() {
    AggregatorServer* server = server_.load();
    if (server == nullptr) {
      return absl::UnavailableError("aggregatord is still starting");
    }
    if (options_.config_path.empty()) {
      return absl::FailedPreconditionError(
          "aggregatord runs its embedded default configuration (no --config): "
          "there is no file to reload");
    }
    notifier_.Reloading();
    absl::StatusOr<AggregatorConfig> next = LoadConfig();
    absl::StatusOr<ReloadResult> reply =
        next.ok() ? server->Reload(*next) : next.status();
    if (!next.ok()) server->metrics().Reloaded(false);
    if (reply.ok()) {
      (void)ConfigureLogging(next->log.level, next->log.format);
      spdlog::info("configuration reloaded (generation {}): {}",
                   reply->config_generation, reply->summary);
    } else {
      spdlog::error(
          "configuration reload failed, the running configuration stays: {}",
          OneLine(reply.status().message()));
    }
    notifier_.Ready();
    ReportStatus();
    return reply;
  }

  // STATUS= for systemd, sent when its text changes.
  void ReportStatus() {
    AggregatorServer* server = server_.load();
    if (server == nullptr) return;
    const std::string status = server->Summary();
    MutexLock lock(&status_mu_);
    if (status == last_status_) return;
    last_status_ = status;
    notifier_.Status(status);
  }

  // Takes signals until SIGTERM or SIGINT, which it returns.
  int ServeUntilStopSignal() {
    for (;;) {
      const int signo = NextSignal(notifier_, &next_ping_);
      switch (signo) {
        case SIGTERM:
        case SIGINT:
          return signo;
        case SIGHUP:
          reloader_->RequestAsync();  // read and applied off this thread
          break;
        case SIGCHLD:
          KillOrphans();
          break;
        default:
          break;
      }
    }
  }

  // Worker descendants re-parented to the daemon: their guard is gone, so
  // nothing else would stop them.
  void KillOrphans() {
    if (const int killed = KillAdopted(Steady::now() + kOrphanKillTimeout,
                                       AdoptedScope::kOtherProcessGroups)) {
      spdlog::warn(
          "killed {} orphaned process(es) left by workers whose guard ended",
          killed);
    }
  }

  // Drains and stops, each step with its own deadline. Stopping runs beside
  // the signal loop, so a second stop signal still exits at once.
  void Stop(AggregatorServer& server, MetricsEndpoint* metrics) {
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
      reloader_->Stop();
      const auto drain = server.config_drain_timeout();
      if (!server.Drain(Steady::now() + drain)) {
        spdlog::warn(
            "drain_timeout ({}ms) passed with calls still in flight: "
            "cancelling them",
            drain.count());
      }
      if (metrics != nullptr &&
          !metrics->Stop(Steady::now() + kMetricsStopTimeout)) {
        spdlog::warn(
            "the metrics endpoint did not stop within {}s (a client holds a "
            "request open): left to finish on its own",
            kMetricsStopTimeout.count());
      }
      server.Shutdown(std::chrono::system_clock::now());
      stopped = true;
      kill(getpid(), SIGUSR1);  // wakes the signal loop
    });
    while (!stopped) {
      const int signo = NextSignal(notifier_, &next_ping_);
      if (signo == SIGTERM || signo == SIGINT) {
        spdlog::warn("second stop signal: exiting now");
        std::_Exit(1);  // the workers' guards stop their trees
      }
      if (signo == SIGCHLD) KillOrphans();
    }
    stopper.join();
    KillOrphans();
  }

  const DaemonOptions options_;
  SystemdNotifier notifier_;
  Steady::time_point next_ping_ = Steady::now();
  std::atomic<AggregatorServer*> server_{nullptr};
  std::atomic<bool> announced_ready_{false};
  std::unique_ptr<Reloader> reloader_;
  Mutex status_mu_;
  std::string last_status_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace

void BlockDaemonSignals() {
  const sigset_t signals = DaemonSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int RunDaemon(const DaemonOptions& options) {
  BlockDaemonSignals();  // again, in case main() did not
  // Debian's libabsl is built without NDEBUG, so every absl::Mutex (ours and
  // gRPC's) would keep a graph of lock order to look for cycles: a tenth of a
  // relayed call's CPU in callgrind. Lock-order inversions are left to
  // ThreadSanitizer (tools/test runs every test under it); clang's
  // thread-safety build checks which lock guards what, not their order.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return Daemon(options).Run();
}

}  // namespace aggregator
