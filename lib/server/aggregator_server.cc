#include "lib/server/aggregator_server.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/port_holder.h"
#include "lib/base/version.h"
#include "lib/config/config_diff.h"
#include "lib/ops/logging.h"
#include "lib/tls/pem.h"

namespace aggregator {
namespace {

constexpr char kLearnerServiceName[] = "aggregator.v1.Learner";
// While a call is open, its connection is pinged after a minute of silence and
// closed when no answer comes within 20 s: a coordinator that vanished
// without a FIN does not hold its call (and its batch) until the deadline.
constexpr int kKeepaliveTimeMs = 60 * 1000;
constexpr int kKeepaliveTimeoutMs = 20 * 1000;

// Builds and starts `builder`'s server. Sockets it binds on unix paths are
// created 0600 and then given `mode` (never more open than asked for, even for
// an instant); `paths` were claimed by the caller.
std::unique_ptr<grpc::Server> StartListening(
    grpc::ServerBuilder* builder, const std::vector<UnixListenerPath*>& paths,
    mode_t mode, absl::Status* status) {
  mode_t umask_before = 0;
  if (!paths.empty()) umask_before = umask(0177);
  std::unique_ptr<grpc::Server> server = builder->BuildAndStart();
  if (!paths.empty()) umask(umask_before);
  for (UnixListenerPath* path : paths) {
    if (server == nullptr) break;
    if (absl::Status restricted = path->Restrict(mode); !restricted.ok()) {
      *status = restricted;
    }
  }
  return server;
}

// Why `address` (`key` in the configuration) could not be bound, naming the
// process that holds the port when one can be found.
absl::Status ListenFailure(const HostPort& address, const char* key,
                           const AggregatorConfig& config) {
  const std::string holder =
      address.is_unix() ? "" : DescribePortHolder(address.port);
  return absl::UnavailableError(
      absl::StrCat("cannot listen on '", address.ToString(), "' (", key,
                   ", from ", config.source, "): ",
                   holder.empty() ? "the address is invalid or already in use"
                                  : absl::StrCat("already in use by ", holder),
                   config.tls ? ", or gRPC refused the certificate" : ""));
}

ServerIdentity IdentityOf(const ServerTlsConfig& tls) {
  return ServerIdentity{tls.cert.pem, tls.key.pem, tls.client_ca.pem};
}

// A served certificate that expires within a week: said at start and at
// each reload that sets one, while there is time to renew it.
void WarnIfExpiresSoon(const ServerTlsConfig& tls) {
  if (auto soon = ExpiresSoon(tls.cert.pem, std::chrono::hours(24 * 7))) {
    spdlog::warn("tls.cert {}: {}; renew it and reload", tls.cert.path, *soon);
  }
}

const char* Security(const AggregatorConfig& config) {
  if (!config.tls) return "plaintext";
  return config.tls->client_ca.empty() ? "TLS" : "mTLS";
}

// The listener options both servers share.
void SetListenerOptions(const AggregatorConfig& config,
                        const ServerOptions& options,
                        grpc::ServerBuilder* builder) {
  const int limit =
      static_cast<int>(std::min<int64_t>(config.max_message_bytes, INT_MAX));
  builder->SetMaxReceiveMessageSize(limit);
  builder->SetMaxSendMessageSize(limit);
  // A second daemon on the same address must fail to bind, not share it.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder->AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(options.handshake_timeout.count()));
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                              static_cast<int>(options.idle_timeout.count()));
  // Pings on quiet connections find peers that vanished without a FIN.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              kKeepaliveTimeoutMs);
  // A parent aggregator pings its learners, this one among them
  // (connect.keepalive, at least 1s apart): accept that, with or without
  // calls open.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
}

// Learners on gRPC's default ping policy close a connection pinged more than
// twice without data in between; the resource refreshes are that data.
void WarnIfPingsRefused(const ConnectConfig& connect) {
  if (connect.resource_refresh < connect.keepalive_time) return;
  spdlog::warn(
      "resource_refresh ({}ms) is not shorter than connect.keepalive.time "
      "({}ms): learners on gRPC's default ping policy will close their "
      "connections for too many pings (the example learner, the Python SDK "
      "and aggregatord accept them)",
      connect.resource_refresh.count(), connect.keepalive_time.count());
}

}  // namespace

absl::StatusOr<std::unique_ptr<AggregatorServer>> AggregatorServer::Start(
    const AggregatorConfig& config, ServerOptions options) {
  std::unique_ptr<AggregatorServer> self(new AggregatorServer());
  AggregatorServer* raw = self.get();
  self->options_ = std::move(options);
  {
    MutexLock lock(&self->config_mu_);
    self->config_ = config;
  }
  self->min_learners_ = config.service.min_learners;

  LearnerPoolHooks pool_hooks;
  pool_hooks.aggregator_id = self->aggregator_id_;
  pool_hooks.on_ready_change = [raw](size_t ready, size_t total) {
    raw->OnReadyChange(ready, total);
  };
  self->pool_ = std::make_unique<LearnerPool>(
      config.connect, config.max_message_bytes, std::move(pool_hooks));
  self->learner_service_ = std::make_unique<LearnerService>(
      self->pool_.get(), config.service,
      LearnerServiceOptions{
          &self->metrics_, self->aggregator_id_,
          std::min<int64_t>(config.max_message_bytes, INT_MAX),
          self->options_.learn_stream_window_bytes});
  self->admin_service_ = std::make_unique<AdminService>(
      [raw] { return raw->Status(); }, self->options_.reload);
  self->metrics_.AddCollector([raw] { raw->CollectMetrics(); });

  // Before the server starts, so status calls always find it; its workers
  // start only once the address is bound.
  WorkerManagerOptions worker_options;
  worker_options.on_change = [raw] {
    raw->UpdateLearners();
    raw->Changed();
  };
  worker_options.program_dirs = self->options_.program_dirs;
  worker_options.guard_program = self->options_.guard_program;
  self->workers_ = std::make_unique<WorkerManager>(std::move(worker_options));
  DiscoveryHooks discovery_hooks;
  discovery_hooks.on_change = [raw] { raw->UpdateLearners(); };
  discovery_hooks.failed_learners = [raw] { return raw->FailedLearners(); };
  self->discovery_ =
      std::make_unique<DiscoveryLoop>(std::move(discovery_hooks));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (config.tls) {
    if (config.tls->cert.pem.empty() || config.tls->key.pem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tls in ", config.source,
          ": the certificate and key were not read (a configuration with tls "
          "comes from LoadConfigFile)"));
    }
    self->tls_ = std::make_unique<ServerTls>(IdentityOf(*config.tls));
    WarnIfExpiresSoon(*config.tls);
  }
  auto credentials = [raw]() {
    return raw->tls_ ? raw->tls_->Credentials()
                     : grpc::InsecureServerCredentials();
  };
  // gRPC would unlink a unix socket path another daemon is listening on.
  auto claim = [&](const HostPort& address, const char* what,
                   std::vector<UnixListenerPath*>* claimed) -> absl::Status {
    if (!address.is_unix()) return absl::OkStatus();
    auto path = std::make_unique<UnixListenerPath>(address.path, what);
    absl::Status status = path->Claim();
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat(status.message(), " (from ", config.source, ")"));
    }
    claimed->push_back(path.get());
    self->unix_paths_.push_back(std::move(path));
    return absl::OkStatus();
  };
  const mode_t socket_mode = static_cast<mode_t>(config.unix_socket.mode);
  std::vector<UnixListenerPath*> listen_paths;
  if (absl::Status claimed = claim(config.listen, "listen", &listen_paths);
      !claimed.ok()) {
    return claimed;
  }
  grpc::ServerBuilder builder;
  SetListenerOptions(config, self->options_, &builder);
  builder.AddListeningPort(config.listen.ToString(), credentials(),
                           &self->port_);
  builder.RegisterService(self->learner_service_.get());
  absl::Status restricted;
  self->server_ =
      StartListening(&builder, listen_paths, socket_mode, &restricted);
  if (!restricted.ok()) return restricted;
  if (self->server_ == nullptr || self->port_ == 0) {
    return ListenFailure(config.listen, "listen", config);
  }
  if (config.admin.listen) {
    std::vector<UnixListenerPath*> admin_paths;
    if (absl::Status claimed =
            claim(*config.admin.listen, "admin.listen", &admin_paths);
        !claimed.ok()) {
      return claimed;
    }
    grpc::ServerBuilder admin;
    // Health is the Learner listener's to report (NOT_SERVING while draining):
    // the admin listener does not answer for it.
    admin.SetOption(
        std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    SetListenerOptions(config, self->options_, &admin);
    admin.AddListeningPort(config.admin.listen->ToString(), credentials(),
                           &self->admin_port_);
    admin.RegisterService(self->admin_service_.get());
    self->admin_server_ =
        StartListening(&admin, admin_paths, socket_mode, &restricted);
    if (!restricted.ok()) return restricted;
    if (self->admin_server_ == nullptr || self->admin_port_ == 0) {
      return ListenFailure(*config.admin.listen, "admin.listen", config);
    }
  }
  self->OnReadyChange(0, config.learners.size());

  if (absl::Status status = self->workers_->Apply(config.workers);
      !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("cannot start the workers of ",
                                     config.source, ": ", status.message()));
  }
  const size_t worker_learners = self->workers_->LearnerEndpoints().size();
  // The addresses as bound: a wildcard stays a wildcard.
  spdlog::info(
      "aggregatord listening on {} ({}) with {} learner(s) ({} listed, {} "
      "learner worker replica(s)), {} worker(s), min_learners {}",
      config.listen.WithPort(self->port_).ToString(), Security(config),
      config.learners.size() + worker_learners, config.learners.size(),
      worker_learners, config.workers.size(), config.service.min_learners);
  if (config.admin.listen) {
    spdlog::info("admin on {} ({})",
                 config.admin.listen->WithPort(self->admin_port_).ToString(),
                 Security(config));
  }
  if (!config.tls && config.allow_insecure &&
      (!config.listen.IsLoopback() ||
       (config.admin.listen && !config.admin.listen->IsLoopback()))) {
    spdlog::warn(
        "plaintext on an address other hosts can reach (allow_insecure: "
        "true): anyone who reaches it can call it and read what it sends");
  }
  spdlog::info("aggregator id {} (on every call it relays: loops are refused)",
               self->aggregator_id_);
  spdlog::info("Learn batches in flight are bounded by {}",
               self->learner_service_->DescribeInflightLimit());
  WarnIfPingsRefused(config.connect);
  self->UpdateLearners();
  self->discovery_->Apply(config.learner_sources);
  return self;
}

AggregatorServer::~AggregatorServer() {
  Shutdown(std::chrono::system_clock::now());
}

AggregatorConfig AggregatorServer::config() const {
  MutexLock lock(&config_mu_);
  return config_;
}

std::chrono::milliseconds AggregatorServer::config_drain_timeout() const {
  MutexLock lock(&config_mu_);
  return config_.drain_timeout;
}

void AggregatorServer::UpdateLearners() {
  {
    MutexLock lock(&learners_mu_);
    // After Shutdown began the pool only drains; the manager is stopping.
    if (shutting_down_) return;
    const AggregatorConfig config = this->config();
    std::vector<LearnerEndpoint> learners = config.learners;
    AddWorkers(&learners);
    AddDiscovered(config.learner_tls, &learners);
    if (learner_set_.has_value() && *learner_set_ == learners) return;
    learner_set_ = learners;
    pool_->SetLearners(learners);
  }
  Changed();  // the number of learners changed
}

void AggregatorServer::AddWorkers(std::vector<LearnerEndpoint>* learners) {
  // Who holds each address so far: a learner is called once, so a worker
  // (a channel worker says its own port) at an address already taken is
  // left out, not a second learner on the same process.
  std::map<std::string, std::string> holders;
  for (const LearnerEndpoint& learner : *learners) {
    holders.emplace(learner.address.ToString(), learner.id);
  }
  std::set<std::string> refused;
  for (LearnerEndpoint& endpoint : workers_->LearnerEndpoints()) {
    const std::string address = endpoint.address.ToString();
    const auto [holder, added] = holders.emplace(address, endpoint.id);
    if (added) {
      learners->push_back(std::move(endpoint));
      continue;
    }
    const std::string key = absl::StrCat(endpoint.id, " ", address);
    refused.insert(key);
    if (refused_workers_.count(key) == 0) {
      spdlog::warn(
          "worker learner {} is at {}, already learner {}'s: left out (one "
          "process would train two slices)",
          endpoint.id, address, holder->second);
    }
  }
  refused_workers_ = std::move(refused);
}

void AggregatorServer::AddDiscovered(const std::optional<ClientTlsConfig>& tls,
                                     std::vector<LearnerEndpoint>* learners) {
  std::set<std::string> ids;
  std::set<std::string> addresses;
  for (const LearnerEndpoint& learner : *learners) {
    ids.insert(learner.id);
    addresses.insert(learner.address.ToString());
  }
  std::vector<HostPort> found;
  for (const std::vector<HostPort>& source : discovery_->Members()) {
    found.insert(found.end(), source.begin(), source.end());
  }
  discovered_ = StableMerge(discovered_, found);
  std::set<std::string> left_out;
  for (const HostPort& address : discovered_) {
    const std::string id = address.ToString();
    // A learner is called once: a listed one (or a worker) at the same
    // address keeps its own id.
    if (ids.count(id) != 0 || addresses.count(id) != 0) {
      left_out.insert(id);
      continue;
    }
    ids.insert(id);
    learners->push_back(LearnerEndpoint{id, address, tls});
  }
  for (const std::string& id : left_out) {
    if (left_out_.count(id) == 0) {
      spdlog::warn(
          "discovered learner {} is already a learner (in learners, or a "
          "worker): left out",
          id);
    }
  }
  left_out_ = std::move(left_out);
}

std::set<std::string> AggregatorServer::FailedLearners() const {
  std::set<std::string> failed;
  for (const LearnerSnapshot& learner : pool_->Status()) {
    if (learner.state == LearnerState::kFailed) failed.insert(learner.id);
  }
  return failed;
}

std::string AggregatorServer::address() const {
  return config().listen.WithPort(port_).Dialable().ToString();
}

std::string AggregatorServer::admin_address() const {
  const std::optional<HostPort> admin = config().admin.listen;
  return admin ? admin->WithPort(admin_port_).Dialable().ToString() : "";
}

bool AggregatorServer::WaitUntilReady(
    std::chrono::steady_clock::time_point deadline) const {
  return pool_->WaitForReady(
      static_cast<size_t>(std::max(0, min_learners_.load())), deadline);
}

std::string AggregatorServer::Summary() const {
  size_t running = 0;
  for (const WorkerSnapshot& worker : workers_->Status()) {
    if (worker.state == WorkerState::kRunning) ++running;
  }
  int configured = 0;
  for (const WorkerSpec& worker : config().workers)
    configured += worker.replicas;
  return absl::StrCat("learners ", pool_->ReadyCount(), " of ", pool_->size(),
                      " ready; workers ", running, " of ", configured,
                      " running; config generation ", generation_.load());
}

void AggregatorServer::Changed() {
  if (options_.on_change && !shutting_down_) options_.on_change();
}

void AggregatorServer::OnReadyChange(size_t ready, size_t total) {
  bool started = false;
  {
    MutexLock lock(&health_mu_);
    if (shutting_down_ || draining_ || server_ == nullptr) return;
    const int min_learners = min_learners_.load();
    started = ready >= static_cast<size_t>(std::max(0, min_learners));
    // Serving is what the calls do: they need min_learners, and always one.
    const bool serving =
        ready >= static_cast<size_t>(std::max(1, min_learners));
    // Health first: whoever reads the log line must find health agreeing.
    auto* health = server_->GetHealthCheckService();
    health->SetServingStatus(serving);
    health->SetServingStatus(kLearnerServiceName, serving);
    if (serving != ready_.exchange(serving)) {
      spdlog::info("{}: {} of {} learner(s) ready (min_learners {}{})",
                   serving ? "serving" : "not serving", ready, total,
                   min_learners,
                   min_learners == 0 ? "; a call needs at least one" : "");
    }
  }
  if (options_.on_ready_change) options_.on_ready_change(started);
  Changed();
}

ServerStatus AggregatorServer::Status() const {
  ServerStatus status;
  status.learners = pool_->Status();
  for (const auto& [id, standing] : learner_service_->Standings()) {
    status.plans[id].standing =
        absl::StrCat(StandingName(standing.state),
                     standing.why.empty() ? "" : ": ", standing.why);
  }
  for (const auto& [id, times] : learner_service_->LearnTimes()) {
    status.plans[id].straggler = times.flagged;
    status.plans[id].learn_ewma_ms = times.ewma_seconds * 1000;
    status.plans[id].learn_p50_ms = times.p50_seconds * 1000;
    status.plans[id].learn_p99_ms = times.p99_seconds * 1000;
  }
  for (const auto& [id, ms] : learner_service_->LateMs()) {
    // At least 1: 0 means not late.
    status.plans[id].late_ms = std::max<int64_t>(ms, 1);
  }
  status.workers = workers_->Status();
  status.sources = discovery_->Status();
  status.config_path = config().source;
  status.config_generation = generation_.load();
  status.ready = ready_.load();
  return status;
}

std::string AggregatorServer::StatusPage() const {
  StatusPageFacts facts;
  facts.version = kVersion;
  facts.aggregator_id = aggregator_id_;
  facts.uptime = std::chrono::steady_clock::now() - started_;
  facts.membership_generation = learner_service_->membership_generation();
  facts.min_learners = min_learners_.load();
  return RenderStatusPage(Status(), facts);
}

void AggregatorServer::CollectMetrics() {
  if (pool_ == nullptr) return;
  std::map<std::string, int> by_state = {
      {"ready", 0}, {"connecting", 0}, {"failed", 0}};
  std::map<std::string, bool> ready;
  std::map<std::string, int> by_standing = {
      {"in", 0}, {"rejoining", 0}, {"out", 0}};
  const std::map<std::string, LearnerStanding> standings =
      learner_service_->Standings();
  for (const auto& learner : pool_->Status()) {
    ++by_state[LearnerStateName(learner.state)];
    const bool is_ready = learner.state == LearnerState::kReady;
    ready[learner.id] = is_ready;
    if (!is_ready) continue;
    auto standing = standings.find(learner.id);
    ++by_standing[StandingName(standing == standings.end()
                                   ? LearnerStanding::kIn
                                   : standing->second.state)];
  }
  for (const auto& [state, count] : by_state) {
    metrics_.SetLearners(state, count);
  }
  metrics_.SetLearnerReady(ready);
  // Every learner timed so far has a series (0 until flagged), so an alert on
  // it and a dashboard find it before the first straggler.
  for (const auto& [id, times] : learner_service_->LearnTimes()) {
    metrics_.SetStraggler(id, times.flagged);
  }
  // Likewise each learner of the pool for late answers.
  std::vector<std::string> ids;
  for (const auto& [id, is_ready] : ready) ids.push_back(id);
  learner_service_->CollectLate(ids);
  metrics_.SetStandings(by_standing);
  metrics_.SetMinLearners(min_learners_.load());
  metrics_.SetInflight(
      static_cast<double>(learner_service_->inflight_bytes()),
      static_cast<double>(learner_service_->max_inflight_bytes()));
  for (const auto& worker : workers_->Status()) {
    metrics_.SetWorkerRestarts(worker.name, worker.index, worker.restarts);
  }
  metrics_.SetMembershipGeneration(
      static_cast<double>(learner_service_->membership_generation()));
  std::vector<SourceFigures> sources;
  for (const SourceSnapshot& source : discovery_->Status()) {
    sources.push_back(SourceFigures{source.kind, source.key, source.instance,
                                    static_cast<double>(source.refreshes),
                                    static_cast<double>(source.errors),
                                    static_cast<double>(source.learners.size()),
                                    static_cast<double>(source.reported)});
  }
  metrics_.SetSources(sources);
  const LearnerService::Buffered buffered = learner_service_->StreamBuffered();
  metrics_.SetStreamBuffered(static_cast<double>(buffered.now),
                             static_cast<double>(buffered.peak));
  // Process-wide: gRPC reports them only in its log lines.
  metrics_.SetTlsHandshakeFailures(static_cast<double>(TlsHandshakeFailures()));
}

absl::StatusOr<ReloadResult> AggregatorServer::Reload(
    const AggregatorConfig& next) {
  MutexLock reload_lock(&reload_mu_);
  absl::StatusOr<std::string> summary = DescribeReload(config(), next);
  if (!summary.ok()) {
    metrics_.Reloaded(false);
    return summary.status();
  }
  if (tls_ && next.tls && config().tls != next.tls) {
    tls_->Update(IdentityOf(*next.tls));
    WarnIfExpiresSoon(*next.tls);
  }
  {
    MutexLock lock(&config_mu_);
    config_ = next;
  }
  min_learners_ = next.service.min_learners;
  pool_->SetConnectConfig(next.connect);
  WarnIfPingsRefused(next.connect);
  learner_service_->SetConfig(next.service);
  if (absl::Status applied = workers_->Apply(next.workers); !applied.ok()) {
    // The file was valid; a worker that cannot start is reported by its
    // state, as at start-up.
    spdlog::error("reload: workers: {}", std::string(applied.message()));
  }
  discovery_->Apply(next.learner_sources);
  UpdateLearners();
  // min_learners may have changed: recompute readiness now.
  OnReadyChange(pool_->ReadyCount(), pool_->size());
  metrics_.Reloaded(true);
  ReloadResult result{++generation_, *std::move(summary)};
  Changed();
  return result;
}

bool AggregatorServer::Drain(std::chrono::steady_clock::time_point deadline) {
  {
    MutexLock lock(&health_mu_);
    if (shutting_down_ || server_ == nullptr) return true;
    draining_ = true;
    ready_ = false;
    auto* health = server_->GetHealthCheckService();
    health->SetServingStatus(false);
    health->SetServingStatus(kLearnerServiceName, false);
  }
  learner_service_->StartDraining();
  return learner_service_->WaitIdle(deadline);
}

void AggregatorServer::Shutdown(
    std::chrono::system_clock::time_point deadline) {
  {
    MutexLock lock(&health_mu_);
    if (shutting_down_.exchange(true) || server_ == nullptr) return;
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  // A scrape still running (an endpoint that could not stop in time) must
  // not reach into what is torn down below.
  metrics_.ClearCollectors();
  // Status and reload answer until the calls are done; then they stop too.
  server_->Shutdown(deadline);
  server_->Wait();
  if (admin_server_ != nullptr) {
    admin_server_->Shutdown(std::chrono::system_clock::now());
    admin_server_->Wait();
  }
  // The pool stops first, so stopping learner workers is not reported as lost
  // learners (UpdateLearners no longer touches it once shutting_down_ is set).
  // It is stopped, not destroyed: a hook already past its shutting_down_ check
  // (a worker's status change reading Summary()) still finds it, empty.
  // ThreadSanitizer found the reset racing with such a read. The sources
  // stop first: their refreshes feed the pool. So do the task replays: one
  // left on a learner's channel held the pool's Stop up for a second.
  discovery_->Stop();
  learner_service_->StopReplays();
  pool_->Stop();
  // Each worker gets its own stop_timeout between SIGTERM and SIGKILL.
  std::chrono::milliseconds longest_stop(0);
  for (const WorkerSpec& worker : config().workers) {
    longest_stop = std::max(longest_stop, worker.stop_timeout);
  }
  workers_->Shutdown(std::chrono::steady_clock::now() + longest_stop);
}

}  // namespace aggregator
