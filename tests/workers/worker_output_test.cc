// WorkerOutput: worker bytes become safe, bounded log lines.
#include "lib/workers/worker_output.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace aggregator {
namespace {

using Stream = WorkerOutput::Stream;
using std::chrono::milliseconds;
using std::chrono::seconds;

struct Harness {
  explicit Harness(WorkerOutputOptions options = {})
      : output(options, &clock,
               [this](const std::string& line) { lines.push_back(line); }) {}
  FakeClock clock;
  std::vector<std::string> lines;
  WorkerOutput output;
};

TEST_CASE("Output is split at newlines, per stream, CRLF included") {
  Harness h;
  h.output.Append(Stream::kStdout, "one\r\ntw");
  h.output.Append(Stream::kStderr, "err");
  h.output.Append(Stream::kStdout, "o\nthree");
  CHECK(h.lines == std::vector<std::string>{"one", "two"});
  h.output.Finish(Stream::kStdout);
  h.output.Flush();
  CHECK(h.lines == std::vector<std::string>{"one", "two", "three", "err"});
}

TEST_CASE("A line longer than max_line_bytes is logged in pieces") {
  WorkerOutputOptions options;
  options.max_line_bytes = 4;
  Harness h(options);
  h.output.Append(Stream::kStdout, "abcdefghij");
  CHECK(h.lines == std::vector<std::string>{"abcd", "efgh"});
  h.output.Append(Stream::kStdout, "\n");
  CHECK(h.lines.back() == "ij");
}

TEST_CASE("Control characters are escaped and invalid UTF-8 replaced") {
  // Regression: NUL split a journald entry (a forged line without the
  // worker's prefix), CR displayed as a forged line, ESC drove terminals.
  CHECK(SanitizeLine(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(SanitizeLine("x\rcritical forged") == "x\\x0dcritical forged");
  CHECK(SanitizeLine("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(SanitizeLine("del\x7f") == "del\\x7f");
  CHECK(SanitizeLine("tab\tkept") == "tab\tkept");
  CHECK(SanitizeLine("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // é € 😀 stay
  const std::string replacement = "\xef\xbf\xbd";
  CHECK(SanitizeLine("bad\xff") == "bad" + replacement);
  CHECK(SanitizeLine("\xc0\xaf") == replacement + replacement);  // overlong
  CHECK(SanitizeLine("\xed\xa0\x80") ==
        replacement + replacement + replacement);  // a surrogate
  CHECK(SanitizeLine("cut\xe2\x82") == "cut" + replacement + replacement);
}

TEST_CASE("Lines over the rate are dropped, then counted in one line") {
  WorkerOutputOptions options;
  options.burst_lines = 3;
  options.lines_per_second = 2;
  Harness h(options);
  for (int i = 0; i < 10; ++i) {
    h.output.Append(Stream::kStdout, "line " + std::to_string(i) + "\n");
  }
  CHECK(h.lines == std::vector<std::string>{"line 0", "line 1", "line 2"});
  h.clock.Advance(milliseconds(500));  // one token
  h.output.Append(Stream::kStdout, "later\n");
  REQUIRE(h.lines.size() == 5);
  CHECK(h.lines[3] ==
        "(7 lines dropped: output over 2 lines/s after a burst of 3)");
  CHECK(h.lines[4] == "later");
  h.output.Append(Stream::kStdout, "dropped\n");
  h.output.Flush();  // the process is gone: the count is not kept back
  CHECK(h.lines.back() ==
        "(1 lines dropped: output over 2 lines/s after a burst of 3)");
  CHECK(h.output.dropped_total() == 8);
  h.clock.Advance(seconds(60));  // the bucket refills to the burst, no more
  for (int i = 0; i < 5; ++i) h.output.Append(Stream::kStdout, "x\n");
  CHECK(h.output.dropped_total() == 10);
}

}  // namespace
}  // namespace aggregator
