// WorkerOutput: turns the bytes a worker writes to stdout and stderr into log
// lines that are safe to log and bounded in rate.
//
// Each stream is split at newlines (a line longer than max_line_bytes is cut
// into pieces, so a child that never prints a newline cannot grow our memory).
// Every line is sanitised: invalid UTF-8 becomes U+FFFD, control characters
// (NUL, CR, ESC, ... but not tab) become \xNN, so a worker can neither split a
// journald entry, nor forge a line without its prefix, nor drive a terminal.
// Lines pass a token bucket per worker (a burst, then a steady rate); lines
// over it are dropped and counted, and the count is logged as one
// "N lines dropped" line before the next line that passes, or at Flush().
//
// Thread-safety: none; one WorkerOutput belongs to one thread.
#ifndef LIB_WORKERS_WORKER_OUTPUT_H_
#define LIB_WORKERS_WORKER_OUTPUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "lib/base/clock.h"

namespace aggregator {

struct WorkerOutputOptions {
  size_t max_line_bytes = 16 * 1024;
  // Lines logged at once before the rate applies, and lines per second after.
  double burst_lines = 1000;
  double lines_per_second = 200;
};

// Makes `line` safe to log: see the file comment.
std::string SanitizeLine(absl::string_view line);

class WorkerOutput {
 public:
  enum class Stream { kStdout, kStderr };
  // Receives each line to log, sanitised and without its newline.
  using Sink = std::function<void(const std::string& line)>;

  WorkerOutput(WorkerOutputOptions options, const Clock* clock, Sink sink);

  // Bytes read from `stream`.
  void Append(Stream stream, absl::string_view bytes);
  // `stream` ended: its unterminated last line, if any, is logged.
  void Finish(Stream stream);
  // Both streams end (the process is gone): their last lines and the count of
  // dropped lines, if any, are logged.
  void Flush();

  int64_t dropped_total() const { return dropped_total_; }

 private:
  void Emit(absl::string_view line);
  void ReportDropped();

  const WorkerOutputOptions options_;
  const Clock* const clock_;
  const Sink sink_;
  std::string partial_[2];  // per stream: what follows its last newline
  double tokens_;
  Clock::TimePoint refilled_at_;
  int64_t dropped_ = 0;  // since the last report
  int64_t dropped_total_ = 0;
};

}  // namespace aggregator

#endif  // LIB_WORKERS_WORKER_OUTPUT_H_
