#include "lib/workers/worker_output.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aggregator {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence at the start of `s`, or 0 if none
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // bounds of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string SanitizeLine(absl::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t') || c == 0x7F) {
        absl::StrAppendFormat(&out, "\\x%02x", c);
      } else {
        out.push_back(static_cast<char>(c));
      }
      ++i;
      continue;
    }
    const size_t length = Utf8SequenceLength(line.substr(i));
    if (length == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(line.data() + i, length);
      i += length;
    }
  }
  return out;
}

WorkerOutput::WorkerOutput(WorkerOutputOptions options, const Clock* clock,
                           Sink sink)
    : options_(options),
      clock_(clock),
      sink_(std::move(sink)),
      tokens_(options.burst_lines),
      refilled_at_(clock->Now()) {}

void WorkerOutput::Append(Stream stream, absl::string_view bytes) {
  std::string& partial = partial_[static_cast<int>(stream)];
  partial.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (size_t newline;
       (newline = partial.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    Emit(absl::string_view(partial).substr(start, newline - start));
  }
  while (partial.size() - start >= options_.max_line_bytes) {
    Emit(absl::string_view(partial).substr(start, options_.max_line_bytes));
    start += options_.max_line_bytes;
  }
  partial.erase(0, start);
}

void WorkerOutput::Finish(Stream stream) {
  std::string& partial = partial_[static_cast<int>(stream)];
  if (!partial.empty()) Emit(std::exchange(partial, std::string()));
}

void WorkerOutput::Flush() {
  Finish(Stream::kStdout);
  Finish(Stream::kStderr);
  ReportDropped();
}

void WorkerOutput::Emit(absl::string_view line) {
  // "\r\n" line ends are the line's end, not a control character in it.
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const Clock::TimePoint now = clock_->Now();
  const double elapsed =
      std::chrono::duration<double>(now - refilled_at_).count();
  refilled_at_ = now;
  tokens_ = std::min(options_.burst_lines,
                     tokens_ + elapsed * options_.lines_per_second);
  if (tokens_ < 1) {
    ++dropped_;
    ++dropped_total_;
    return;
  }
  tokens_ -= 1;
  ReportDropped();
  sink_(SanitizeLine(line));
}

void WorkerOutput::ReportDropped() {
  if (dropped_ == 0) return;
  sink_(absl::StrFormat(
      "(%d lines dropped: output over %g lines/s after a burst of %g)",
      dropped_, options_.lines_per_second, options_.burst_lines));
  dropped_ = 0;
}

}  // namespace aggregator
