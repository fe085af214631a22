// Process-wide logging through spdlog: to stderr, with timestamps unless stderr
// is journald's (JOURNAL_STREAM set), which stamps lines itself.
#ifndef LIB_OPS_LOGGING_H_
#define LIB_OPS_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace aggregator {

// Installs the default logger (once) and sets its level: trace, debug, info,
// warn, error, critical or off. INVALID_ARGUMENT for another level.
absl::Status ConfigureLogging(const std::string& level);

}  // namespace aggregator

#endif  // LIB_OPS_LOGGING_H_
