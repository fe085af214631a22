// Process-wide logging through spdlog: to stderr, with timestamps, or, when
// stderr is journald's stream (JOURNAL_STREAM names it), with the numeric
// priority prefix journald reads ("<3>error ...") and no timestamp. Every
// message is written on one line: its control characters escaped
// (EscapeLogText), whatever peer-supplied text it quotes.
#ifndef LIB_OPS_LOGGING_H_
#define LIB_OPS_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aggregator {

// Whether JOURNAL_STREAM ("<device>:<inode>") names this process's stderr
// (systemd sets it for a unit's stdout/stderr; a child whose stderr went
// elsewhere may inherit it).
bool StderrIsJournal();

// `text` with newlines and carriage returns as \n and \r, other control
// characters but tab (and DEL) as \xNN; the rest unchanged.
std::string EscapeLogText(absl::string_view text);

// Installs the default logger (once) and sets its level: trace, debug, info,
// warn, error, critical or off. INVALID_ARGUMENT for another level.
absl::Status ConfigureLogging(const std::string& level);

}  // namespace aggregator

#endif  // LIB_OPS_LOGGING_H_
