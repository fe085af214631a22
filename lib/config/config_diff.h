// What a reload would change: checks that a new configuration only changes
// what can change while running, and says what changes, for logs and replies.
#ifndef LIB_CONFIG_CONFIG_DIFF_H_
#define LIB_CONFIG_CONFIG_DIFF_H_

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/config.h"

namespace aggregator {

// FAILED_PRECONDITION naming every field that needs a restart (listen,
// max_message_bytes, metrics.listen) and differs; otherwise a one-line summary
// such as "learners +1 -0; workers ~learner; call_timeout 60000ms -> 30000ms",
// or "no changes".
absl::StatusOr<std::string> DescribeReload(const AggregatorConfig& running,
                                           const AggregatorConfig& next);

}  // namespace aggregator

#endif  // LIB_CONFIG_CONFIG_DIFF_H_
