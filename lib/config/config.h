// aggregator.yaml's schema: what the daemon runs, after parsing and
// validation (lib/config/config_loader.h reads it from YAML).
//
// Every default lives here, once, and is documented in the commented default
// config/aggregator.yaml (which is also embedded in the binary). Each part is
// passed down as it is (the pool takes ConnectConfig, the Learner service
// ServiceConfig) instead of being copied into option structs of their own.
//
// Each struct's == lists its fields through a structured binding, which stops
// compiling when a field is added and not listed: a new field cannot be
// silently left out of a comparison (WorkerSpec's decides whether a reload
// restarts a worker).
#ifndef LIB_CONFIG_CONFIG_H_
#define LIB_CONFIG_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "lib/base/backoff.h"
#include "lib/base/host_port.h"

namespace aggregator {

struct ConnectConfig {
  // A learner not ready this long after it was added is marked failed (and is
  // still retried in the background).
  std::chrono::milliseconds timeout{30000};  // connect.timeout
  // The longest one connection attempt may take (gRPC's MIN_CONNECT_TIMEOUT).
  std::chrono::milliseconds attempt_timeout{20000};  // connect.attempt_timeout
  // connect.backoff: the reconnect schedule, as gRPC's connection-backoff spec.
  BackoffOptions backoff{std::chrono::milliseconds(1000), 1.6, 0.2,
                         std::chrono::milliseconds(120000)};
  // resource_refresh (a top-level key): how often a ready learner's resources
  // are asked again, so a child aggregator's change shows in GetResource.
  std::chrono::milliseconds resource_refresh{1000};
  // connect.keepalive: each learner connection is pinged after `time` without
  // a ping, and closed when the answer takes longer than `timeout`, so a
  // learner whose host hangs (stopped, its network gone) leaves the ready set
  // within about time + timeout, not when a call's deadline passes.
  std::chrono::milliseconds keepalive_time{10000};    // >= 1s
  std::chrono::milliseconds keepalive_timeout{5000};  // >= 1ms

  bool operator==(const ConnectConfig& other) const {
    const auto& [a_timeout, a_attempt, a_backoff, a_refresh, a_ping,
                 a_ping_timeout] = *this;
    const auto& [b_timeout, b_attempt, b_backoff, b_refresh, b_ping,
                 b_ping_timeout] = other;
    return std::tie(a_timeout, a_attempt, a_backoff, a_refresh, a_ping,
                    a_ping_timeout) == std::tie(b_timeout, b_attempt, b_backoff,
                                                b_refresh, b_ping,
                                                b_ping_timeout);
  }
  bool operator!=(const ConnectConfig& other) const {
    return !(*this == other);
  }
};

// A PEM file named in the configuration: its path and, once LoadConfigFile
// has read and checked it, its text. Comparing the text is what makes a
// certificate rotated on disk a change a reload applies.
struct PemFile {
  std::string path;  // empty: not set
  std::string pem;

  bool empty() const { return path.empty(); }
  bool operator==(const PemFile& other) const {
    return std::tie(path, pem) == std::tie(other.path, other.pem);
  }
  bool operator!=(const PemFile& other) const { return !(*this == other); }
};

// tls: the listeners' certificate (cert and key both set), and client_ca for
// mTLS (set: clients must present a certificate it signed).
struct ServerTlsConfig {
  PemFile cert;
  PemFile key;
  PemFile client_ca;

  bool operator==(const ServerTlsConfig& other) const {
    const auto& [a_cert, a_key, a_ca] = *this;
    const auto& [b_cert, b_key, b_ca] = other;
    return std::tie(a_cert, a_key, a_ca) == std::tie(b_cert, b_key, b_ca);
  }
  bool operator!=(const ServerTlsConfig& other) const {
    return !(*this == other);
  }
};

// learner_tls, or a learner's own tls: how calls to learners are secured.
struct ClientTlsConfig {
  PemFile ca;    // empty: the system's roots
  PemFile cert;  // our client certificate, for learners that require mTLS
  PemFile key;   // set with cert
  // The name the learner's certificate must carry; empty: the address's host.
  std::string server_name;

  bool operator==(const ClientTlsConfig& other) const {
    const auto& [a_ca, a_cert, a_key, a_name] = *this;
    const auto& [b_ca, b_cert, b_key, b_name] = other;
    return std::tie(a_ca, a_cert, a_key, a_name) ==
           std::tie(b_ca, b_cert, b_key, b_name);
  }
  bool operator!=(const ClientTlsConfig& other) const {
    return !(*this == other);
  }
};

// A remote learner from `learners:`.
struct LearnerEndpoint {
  std::string id;    // unique, non-empty
  HostPort address;  // TCP (port >= 1) or a unix socket
  // The learner's own `tls:`, else `learner_tls` (set by the loader); none:
  // plaintext. Learner workers, on loopback, are always called in plaintext.
  std::optional<ClientTlsConfig> tls;

  bool operator==(const LearnerEndpoint& other) const {
    const auto& [a_id, a_address, a_tls] = *this;
    const auto& [b_id, b_address, b_tls] = other;
    return std::tie(a_id, a_address, a_tls) == std::tie(b_id, b_address, b_tls);
  }
  bool operator!=(const LearnerEndpoint& other) const {
    return !(*this == other);
  }
};

// learner_sources[].dns: one learner per A and AAAA record of `name`, at
// `port`, with the address as its id ("10.0.0.3:22300", "[fd00::3]:22300").
struct DnsSourceConfig {
  std::string name;  // a DNS name, not an address; required
  int port = 0;      // 1..65535; required
  // How often the name is resolved again (from the start of one lookup to
  // the start of the next), and the longest one lookup may take.
  std::chrono::milliseconds refresh{5000};
  std::chrono::milliseconds timeout{5000};
  // The DNS server asked ("10.96.0.10:53", an IP address); none: the
  // system's (/etc/resolv.conf, with its search domains).
  std::optional<HostPort> nameserver;

  bool operator==(const DnsSourceConfig& other) const {
    const auto& [a_name, a_port, a_refresh, a_timeout, a_server] = *this;
    const auto& [b_name, b_port, b_refresh, b_timeout, b_server] = other;
    return std::tie(a_name, a_port, a_refresh, a_timeout, a_server) ==
           std::tie(b_name, b_port, b_refresh, b_timeout, b_server);
  }
  bool operator!=(const DnsSourceConfig& other) const {
    return !(*this == other);
  }
};

// learner_sources[].orchestrator: the learners DI-orchestrator lists for this
// aggregator (GET {url}/v1alpha1/replicas?namespace=NS&aggregator=NAME), each
// with its address as its id; failed ones are reported to it
// (POST {url}/v1alpha1/replicas/failed) so it replaces their pods.
struct OrchestratorSourceConfig {
  // The server, "http://di-server.di-system:8080" (no trailing '/'); when not
  // written, $KUBERNETES_SERVER_URL.
  std::string url;
  // This aggregator's namespace and pod name as the orchestrator knows them;
  // when not written, $KUBERNETES_POD_NAMESPACE and $KUBERNETES_POD_NAME.
  std::string pod_namespace;
  std::string name;
  std::chrono::milliseconds refresh{5000};
  std::chrono::milliseconds timeout{5000};  // the longest one request may take
  // A learner of this source that stays failed this long is reported, once
  // per failure episode.
  std::chrono::milliseconds report_failed_after{60000};

  bool operator==(const OrchestratorSourceConfig& other) const {
    const auto& [a_url, a_ns, a_name, a_refresh, a_timeout, a_report] = *this;
    const auto& [b_url, b_ns, b_name, b_refresh, b_timeout, b_report] = other;
    return std::tie(a_url, a_ns, a_name, a_refresh, a_timeout, a_report) ==
           std::tie(b_url, b_ns, b_name, b_refresh, b_timeout, b_report);
  }
  bool operator!=(const OrchestratorSourceConfig& other) const {
    return !(*this == other);
  }
};

// One entry of `learner_sources:`: where learners are discovered while the
// daemon runs, besides `learners:` and the learner workers.
using LearnerSourceConfig =
    std::variant<DnsSourceConfig, OrchestratorSourceConfig>;

// "dns" or "orchestrator".
const char* LearnerSourceKind(const LearnerSourceConfig& source);
// What it asks, for logs and status: "learners.ns.svc:22300" (with " via
// 10.96.0.10:53" for a nameserver), "http://di-server:8080 ns/aggregator-0".
std::string LearnerSourceTarget(const LearnerSourceConfig& source);
// Which source it is, whatever its other settings: "dns learners.ns:22300"
// (the name it resolves and the learners' port: the same name at two ports is
// two sets of learners), or "orchestrator <url> <namespace>/<name>". Two
// entries of one configuration never share it; a reload keeps a source (and
// its learners) whose key stays, applying its other settings in place.
std::string LearnerSourceKey(const LearnerSourceConfig& source);

// What a worker replica's restart policy does when its process exits.
enum class RestartPolicy {
  kAlways,     // restart after any exit
  kOnFailure,  // restart after a non-zero exit, a signal, or an early exit
  kNever,      // never restart
};

// "always", "on-failure" or "never".
const char* RestartPolicyName(RestartPolicy policy);

// One entry of `workers:`: `replicas` local processes of one command, each
// with its index (0..replicas-1) substituted for "{index}", port_base + index
// for "{port}" and the name for "{name}" in command, env values and cwd.
struct WorkerSpec {
  std::string name;  // unique, non-empty, [A-Za-z0-9_.-]
  // argv; argv[0] without '/' is looked up on PATH, a relative one with '/' is
  // resolved by the worker manager (see lib/workers/worker_program.h).
  std::vector<std::string> command;
  int replicas = 1;  // >= 0
  // Added to (or replacing entries of) the daemon's environment, in file order.
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;    // empty: the daemon's working directory
  int port_base = 0;  // 0: not set; else 1..65535 and port_base+replicas-1 too
  RestartPolicy restart = RestartPolicy::kOnFailure;
  // workers[].backoff: the delay before a restart, exact (no jitter).
  BackoffOptions backoff{std::chrono::milliseconds(1000), 2.0, 0.0,
                         std::chrono::milliseconds(30000)};
  // More than max_restarts restarts within restart_window: the replica is
  // failed and no longer restarted.
  int max_restarts = 5;
  std::chrono::milliseconds restart_window{60000};
  // An exit sooner than this after the start counts as a failed start.
  std::chrono::milliseconds min_uptime{1000};
  // SIGTERM to the process group, then SIGKILL this long after.
  std::chrono::milliseconds stop_timeout{10000};
  // Each replica's 127.0.0.1:{port} joins the learner pool as "<name>-<index>".
  bool learner = false;
  // Each replica runs with the worker channel (AGGREGATOR_WORKER_FD,
  // proto/worker.proto). A learner worker then joins the pool when it
  // announces its port there ("_listening"), at once, instead of being
  // connected to (and refused) before it listens.
  bool channel = false;

  // Every field but `replicas`: replicas of a worker whose fields are the same
  // can keep running when only the count changes.
  auto FieldsButReplicas() const {
    const auto& [name_, command_, replicas_, env_, cwd_, port_base_, restart_,
                 backoff_, max_restarts_, restart_window_, min_uptime_,
                 stop_timeout_, learner_, channel_] = *this;
    (void)replicas_;
    return std::tie(name_, command_, env_, cwd_, port_base_, restart_, backoff_,
                    max_restarts_, restart_window_, min_uptime_, stop_timeout_,
                    learner_, channel_);
  }
  bool operator==(const WorkerSpec& other) const {
    return replicas == other.replicas &&
           FieldsButReplicas() == other.FieldsButReplicas();
  }
  bool operator!=(const WorkerSpec& other) const { return !(*this == other); }
};

// merge: how learn infos are merged (lib/aggregation/info_merger.h).
struct MergeConfig {
  // merge.homogeneous_keys: info keys that take one value (the first
  // learner's).
  std::vector<std::string> homogeneous_keys = {"learner_step", "buffer_id",
                                               "task_id", "learner_done"};
  // merge.per_sample_keys: info keys (dotted paths) whose lists hold one entry
  // per sample: each learner's list must have exactly as many entries as the
  // learner was sent samples, and every learner must send it, so the merged
  // list lines up with the batch. A map key covers every list under it.
  std::vector<std::string> per_sample_keys = {"priority_info"};

  bool operator==(const MergeConfig& other) const {
    const auto& [a_homogeneous, a_per_sample] = *this;
    const auto& [b_homogeneous, b_per_sample] = other;
    return std::tie(a_homogeneous, a_per_sample) ==
           std::tie(b_homogeneous, b_per_sample);
  }
};

// on_learner_failure: what a learner's failed call does to the next plans.
enum class OnLearnerFailure {
  kFail,    // nothing: it stays in the plans while it is ready
  kShrink,  // it leaves them until it is back (lib/service/membership.h)
};

// "fail", "shrink".
const char* OnLearnerFailureName(OnLearnerFailure policy);

// straggler: a learner whose Learn takes longer than `factor` times the
// median of the others for `window` steps in a row is flagged.
struct StragglerConfig {
  double factor = 3.0;  // straggler.factor, > 1
  int window = 5;       // straggler.window, >= 1
  // straggler.action: kNone only flags it; kShrink also takes it out of the
  // plans (as a failure would under shrink) until it is fast again.
  enum class Action { kNone, kShrink };
  Action action = Action::kNone;
  // straggler.late_after: in a fan-out, how long after all the other learners
  // of the call answered a learner still silent is late
  // (lib/service/late_watch.h).
  struct LateAfter {
    enum class Mode {
      kAuto,   // from the learners' recent answers (late_watch.h)
      kFixed,  // `fixed`
      kOff,    // never late: call_timeout and keepalive alone
    };
    Mode mode = Mode::kAuto;
    std::chrono::milliseconds fixed{0};

    bool operator==(const LateAfter& other) const {
      return mode == other.mode &&
             (mode != Mode::kFixed || fixed == other.fixed);
    }
    bool operator!=(const LateAfter& other) const { return !(*this == other); }
  };
  LateAfter late_after;

  bool operator==(const StragglerConfig& other) const {
    return factor == other.factor && window == other.window &&
           action == other.action && late_after == other.late_after;
  }
};

// "auto", "off", or the duration ("300ms").
std::string LateAfterName(const StragglerConfig::LateAfter& late_after);

// How the Learner service relays calls (lib/service/learner_service.h).
struct ServiceConfig {
  // min_learners: ready learners needed before the daemon serves (and for
  // StartTask, GetData, Learn to proceed). 0 <= min_learners <= number of
  // learners plus replicas of learner workers (no bound with learner_sources,
  // whose learners are not known in advance).
  int min_learners = 1;
  // call_timeout: the deadline of every call to a learner (tightened by the
  // caller's own deadline); a LearnStream's whole stream, and its calls to
  // learners, end within it from its start.
  std::chrono::milliseconds call_timeout{60000};
  MergeConfig merge;
  // max_inflight_bytes: the Learn batches in flight at once, in bytes; one
  // that would pass it is refused with RESOURCE_EXHAUSTED. nullopt ("auto"):
  // a quarter of the memory the process may use (lib/base/memory_limit.h).
  std::optional<int64_t> max_inflight_bytes;
  OnLearnerFailure on_learner_failure = OnLearnerFailure::kFail;
  StragglerConfig straggler;
};

struct MetricsConfig {
  // metrics.listen: the Prometheus endpoint (GET /metrics); "" turns it off.
  // Cannot change on reload.
  std::optional<HostPort> listen = HostPort::Tcp("127.0.0.1", 22273);
};

struct AdminConfig {
  // admin.listen: where AggregatorAdmin (status, reload) is served, with the
  // same TLS as `listen` when `tls` is set; "" turns it off. Cannot change on
  // reload.
  std::optional<HostPort> listen = HostPort::Tcp("127.0.0.1", 22274);
};

struct UnixSocketConfig {
  // unix_socket.mode: the permissions of the unix sockets the daemon listens
  // on (listen, admin.listen). Cannot change on reload.
  int mode = 0660;

  bool operator==(const UnixSocketConfig& other) const {
    return mode == other.mode;
  }
  bool operator!=(const UnixSocketConfig& other) const {
    return !(*this == other);
  }
};

struct LogConfig {
  // log.level: trace, debug, info, warn, error, critical or off.
  std::string level = "info";
  // log.format: text (a timestamp, the level, the message; under journald
  // its priority instead of the timestamp) or json (one object per line).
  std::string format = "text";
};

struct AggregatorConfig {
  // Where this configuration came from: a file path, or "<embedded default>".
  std::string source;

  // listen: where the Learner and health services are served (port 0: a free
  // port). Cannot change on reload.
  HostPort listen = HostPort::Tcp("127.0.0.1", 22272);
  // tls: TLS (and with client_ca mTLS) on `listen` and `admin.listen`. Whether
  // it is set, and whether client_ca is, cannot change on reload; the files
  // are re-read on every reload.
  std::optional<ServerTlsConfig> tls;
  // learner_tls: TLS on calls to `learners:` entries without a tls of their
  // own (already applied to each LearnerEndpoint).
  std::optional<ClientTlsConfig> learner_tls;
  // allow_insecure: a plaintext listener (listen, admin.listen) that other
  // hosts can reach (not loopback, not a unix socket) is a configuration
  // error unless true.
  bool allow_insecure = false;
  AdminConfig admin;
  std::vector<LearnerEndpoint> learners;
  // Local worker processes the daemon runs; learner workers join `learners`.
  std::vector<WorkerSpec> workers;
  // Where more learners are discovered while running; theirs join the pool
  // after `learners` and the learner workers.
  std::vector<LearnerSourceConfig> learner_sources;
  ServiceConfig service;
  ConnectConfig connect;
  // Largest message sent or received, on both sides. An integer or "512MiB"
  // etc. (B, KiB, MiB, GiB); 1 KiB .. 2 GiB - 1. Cannot change on reload.
  int64_t max_message_bytes = int64_t{1} << 30;
  LogConfig log;
  // How long SIGTERM waits for calls in flight before stopping.
  std::chrono::milliseconds drain_timeout{30000};
  MetricsConfig metrics;
  UnixSocketConfig unix_socket;
};

// The commented default config/aggregator.yaml, compiled into the binary.
std::string_view DefaultConfigYaml();

}  // namespace aggregator

#endif  // LIB_CONFIG_CONFIG_H_
