// Process-wide logging through spdlog: to stderr, with timestamps, or, when
// stderr is journald's stream (JOURNAL_STREAM names it), with the numeric
// priority prefix journald reads ("<3>error ...") and no timestamp.
#ifndef LIB_OPS_LOGGING_H_
#define LIB_OPS_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace aggregator {

// Whether JOURNAL_STREAM ("<device>:<inode>") names this process's stderr
// (systemd sets it for a unit's stdout/stderr; a child whose stderr went
// elsewhere may inherit it).
bool StderrIsJournal();

// Installs the default logger (once) and sets its level: trace, debug, info,
// warn, error, critical or off. INVALID_ARGUMENT for another level.
absl::Status ConfigureLogging(const std::string& level);

}  // namespace aggregator

#endif  // LIB_OPS_LOGGING_H_
