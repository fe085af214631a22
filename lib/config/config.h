// aggregator.yaml: the daemon's configuration, parsed and validated in one
// pass.
//
// Every default lives here and is documented in the commented default
// config/aggregator.yaml, which is also embedded in the binary
// (DefaultConfigYaml()). Parsing never throws: every problem found is reported,
// one per line, as
// "<source>:<line>:<column>: <field>: <what is wrong>" (line and column
// 1-based).
#ifndef LIB_CONFIG_CONFIG_H_
#define LIB_CONFIG_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

// Reconnect schedule, as gRPC's connection-backoff spec.
struct BackoffOptions {
  std::chrono::milliseconds initial{1000};  // connect.backoff.initial
  double multiplier = 1.6;                  // connect.backoff.multiplier (>= 1)
  double jitter = 0.2;                      // connect.backoff.jitter (0..1)
  std::chrono::milliseconds max{120000};    // connect.backoff.max (>= initial)
};

struct ConnectOptions {
  // A learner not ready this long after it was added is marked failed (and is
  // still retried in the background).
  std::chrono::milliseconds timeout{30000};  // connect.timeout
  // The longest one connection attempt may take (gRPC's MIN_CONNECT_TIMEOUT).
  std::chrono::milliseconds attempt_timeout{20000};  // connect.attempt_timeout
  BackoffOptions backoff;                            // connect.backoff
};

// A remote learner from `learners:`.
struct LearnerEndpoint {
  std::string id;       // unique, non-empty
  std::string address;  // "host:port", "[v6]:port" or "unix:/path"

  bool operator==(const LearnerEndpoint& other) const {
    return id == other.id && address == other.address;
  }
};

// What a worker replica's restart policy does when its process exits.
enum class RestartPolicy {
  kAlways,     // restart after any exit
  kOnFailure,  // restart after a non-zero exit, a signal, or an early exit
  kNever,      // never restart
};

// "always", "on-failure" or "never".
const char* RestartPolicyName(RestartPolicy policy);

// Delay before restarting a worker replica: `initial`, times `multiplier` after
// each further failed start, up to `max`. No jitter: replicas restart
// independently, and exact delays keep restart timing predictable.
struct WorkerBackoffOptions {
  std::chrono::milliseconds initial{1000};  // workers[].backoff.initial
  double multiplier = 2.0;                  // workers[].backoff.multiplier
  std::chrono::milliseconds max{30000};     // workers[].backoff.max

  bool operator==(const WorkerBackoffOptions& other) const {
    return initial == other.initial && multiplier == other.multiplier &&
           max == other.max;
  }
};

// One entry of `workers:`: `replicas` local processes of one command, each
// with its index (0..replicas-1) substituted for "{index}", port_base + index
// for "{port}" and the name for "{name}" in command, env values and cwd.
struct WorkerSpec {
  std::string name;  // unique, non-empty, [A-Za-z0-9_.-]
  // argv; argv[0] without '/' is looked up on PATH, a relative one with '/' is
  // resolved by the worker manager (see lib/workers/worker_manager.h).
  std::vector<std::string> command;
  int replicas = 1;  // >= 0
  // Added to (or replacing entries of) the daemon's environment, in file order.
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;    // empty: the daemon's working directory
  int port_base = 0;  // 0: not set; else 1..65535 and port_base+replicas-1 too
  RestartPolicy restart = RestartPolicy::kOnFailure;
  WorkerBackoffOptions backoff;
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

  bool operator==(const WorkerSpec& other) const {
    return name == other.name && command == other.command &&
           replicas == other.replicas && env == other.env && cwd == other.cwd &&
           port_base == other.port_base && restart == other.restart &&
           backoff == other.backoff && max_restarts == other.max_restarts &&
           restart_window == other.restart_window &&
           min_uptime == other.min_uptime &&
           stop_timeout == other.stop_timeout && learner == other.learner;
  }
  bool operator!=(const WorkerSpec& other) const { return !(*this == other); }
};

struct AggregatorConfig {
  // Where this configuration came from: a file path, or "<embedded default>".
  std::string source;

  std::string listen = "127.0.0.1:22272";  // cannot change on reload
  std::vector<LearnerEndpoint> learners;
  // Local worker processes the daemon runs; learner workers join `learners`.
  std::vector<WorkerSpec> workers;
  // Ready learners needed before the daemon serves (and for StartTask, GetData,
  // Learn to proceed). 0 <= min_learners <= number of learners plus replicas
  // of learner workers.
  int min_learners = 1;
  ConnectOptions connect;
  // Deadline of every call to a learner (tightened by the caller's own
  // deadline).
  std::chrono::milliseconds call_timeout{60000};
  // Largest message sent or received, on both sides. An integer or "512MiB"
  // etc. (B, KiB, MiB, GiB); 1 KiB .. 2 GiB - 1.
  int64_t max_message_bytes = int64_t{1} << 30;
  // merge.homogeneous_keys: info keys that take one value (the first
  // learner's).
  std::vector<std::string> homogeneous_keys = {"learner_step", "buffer_id",
                                               "task_id", "learner_done"};
  // log.level: trace, debug, info, warn, error, critical or off.
  std::string log_level = "info";
  // How long SIGTERM waits for calls in flight before stopping.
  std::chrono::milliseconds drain_timeout{30000};
  // metrics.listen: the Prometheus endpoint (GET /metrics); empty: none.
  // Cannot change on reload.
  std::string metrics_listen = "127.0.0.1:22273";
};

// Parses and validates YAML text. `source` names the text in error messages.
// Unknown keys, wrong types, bad durations ("500ms", "30s", "2m", "1h"), bad
// addresses, duplicate learner ids or worker names, worker learner ids that
// clash with `learners:`, "{port}" without port_base, overlapping or
// overflowing worker port ranges and out-of-range numbers are errors. On
// failure the status is INVALID_ARGUMENT and its message lists every error
// found, one per line.
absl::StatusOr<AggregatorConfig> ParseConfig(std::string_view yaml,
                                             std::string_view source);

// Reads and parses a file. A missing or unreadable file is NOT_FOUND /
// PERMISSION_DENIED naming the path.
absl::StatusOr<AggregatorConfig> LoadConfigFile(const std::string& path);

// The commented default config/aggregator.yaml, compiled into the binary.
std::string_view DefaultConfigYaml();

}  // namespace aggregator

#endif  // LIB_CONFIG_CONFIG_H_
