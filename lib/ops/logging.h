// Process-wide logging through spdlog: to stderr, with timestamps, or, when
// stderr is journald's stream (JOURNAL_STREAM names it), with the numeric
// priority prefix journald reads ("<3>error ...") and no timestamp. Every
// message is written on one line: its control characters escaped
// (EscapeLogText), whatever peer-supplied text it quotes. With the json
// format (log.format: json) each line is one JSON object instead:
//   {"ts":"2026-12-06T01:20:00.123Z","level":"info","msg":"...","worker":"learner-0"}
// with the structured fields of the ScopedLogFields in force on the logging
// thread. gRPC's own lines go through the same logger; its error lines at
// most 5 per call site (file:line) per 10 s, then one line counting the ones
// left out (RepeatLimiter).
#ifndef LIB_OPS_LOGGING_H_
#define LIB_OPS_LOGGING_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/base/log_fields.h"

namespace aggregator {

// Whether JOURNAL_STREAM ("<device>:<inode>") names this process's stderr
// (systemd sets it for a unit's stdout/stderr; a child whose stderr went
// elsewhere may inherit it).
bool StderrIsJournal();

// `text` with newlines and carriage returns as \n and \r, other control
// characters but tab (and DEL) as \xNN; the rest unchanged.
std::string EscapeLogText(absl::string_view text);

// Installs the default logger (once) and sets its level: trace, debug, info,
// warn, error, critical or off; and its format: text or json (each call may
// change both: a reload). INVALID_ARGUMENT for another level or format.
absl::Status ConfigureLogging(const std::string& level,
                              const std::string& format = "text");

// TLS handshakes gRPC reported failed since the start (its "Handshake failed
// ..." error lines), both ways: on the listeners (a peer that is not a TLS
// client, a refused client certificate) and to learners (a certificate
// learner_tls does not trust); gRPC's lines do not say which. Counted whatever
// the log level and however many lines were written, once ConfigureLogging
// has run.
uint64_t TlsHandshakeFailures();

// ScopedLogFields (lib/base/log_fields.h) sets the structured fields.

// `text` as a JSON string, quotes included (control characters as \uXXXX).
std::string JsonString(absl::string_view text);

}  // namespace aggregator

#endif  // LIB_OPS_LOGGING_H_
