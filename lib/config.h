// aggregator.yaml: the daemon's configuration, parsed and validated in one
// pass.
//
// Every default lives here and is documented in the commented default
// config/aggregator.yaml, which is also embedded in the binary
// (DefaultConfigYaml()). Parsing never throws: every problem found is reported,
// one per line, as
// "<source>:<line>:<column>: <field>: <what is wrong>" (line and column
// 1-based).
#ifndef LIB_CONFIG_H_
#define LIB_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
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

struct AggregatorConfig {
  // Where this configuration came from: a file path, or "<embedded default>".
  std::string source;

  std::string listen = "127.0.0.1:22272";  // cannot change on reload
  std::vector<LearnerEndpoint> learners;
  // Ready learners needed before the daemon serves (and for StartTask, GetData,
  // Learn to proceed). 0 <= min_learners <= number of learners.
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
};

// Parses and validates YAML text. `source` names the text in error messages.
// Unknown keys, wrong types, bad durations ("500ms", "30s", "2m", "1h"), bad
// addresses, duplicate learner ids and out-of-range numbers are errors. On
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

#endif  // LIB_CONFIG_H_
