// Reads aggregator.yaml (lib/config/config.h) from YAML, validating it in one
// pass. Parsing never throws: every problem found is reported, one per line,
// as "<source>:<line>:<column>: <field>: <what is wrong>" (line and column
// 1-based; control characters from the text escaped as \n, \xNN).
#ifndef LIB_CONFIG_CONFIG_LOADER_H_
#define LIB_CONFIG_CONFIG_LOADER_H_

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/address_clashes.h"  // PlaintextRefusal
#include "lib/config/config.h"

namespace aggregator {

// Parses and validates YAML text. `source` names the text in error messages.
// Unknown keys, wrong types, bad durations ("500ms", "30s", "2m", "1h"), bad
// addresses, duplicate learner ids or worker names, worker learner ids that
// clash with `learners:`, "{port}" without port_base, overlapping or
// overflowing worker port ranges and out-of-range numbers are errors. On
// failure the status is INVALID_ARGUMENT and its message lists every error
// found, one per line.
absl::StatusOr<AggregatorConfig> ParseConfig(std::string_view yaml,
                                             std::string_view source);

// The keys each map section accepts, by path: "" for the top level,
// "connect.backoff", "workers[]" for each item of a list (what
// config/aggregator.schema.json must list; tests/config compares them).
std::map<std::string, std::vector<std::string>> ConfigKeys();

// Reads and parses a file. A missing or unreadable file is NOT_FOUND /
// PERMISSION_DENIED naming the path; a FIFO, directory or device is
// INVALID_ARGUMENT (it is opened without blocking and never read), and so is
// a file over 16 MiB.
absl::StatusOr<AggregatorConfig> LoadConfigFile(const std::string& path);

// The same, giving up after `timeout` (DEADLINE_EXCEEDED): the read runs on a
// thread of its own, so a file system that stalls cannot stall the caller.
absl::StatusOr<AggregatorConfig> LoadConfigFile(
    const std::string& path, std::chrono::milliseconds timeout);

}  // namespace aggregator

#endif  // LIB_CONFIG_CONFIG_LOADER_H_
