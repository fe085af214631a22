// The daemon's logging (lib/ops/logging) as journald reads it: stderr is a
// file named by JOURNAL_STREAM, as systemd sets it for a unit.
#include "lib/ops/logging.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace aggregator {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

TEST_CASE("EscapeLogText escapes control characters only") {
  CHECK(EscapeLogText("a\nb\r\t\x01\x7f \\x") == "a\\nb\\r\t\\x01\\x7f \\x");
  CHECK(EscapeLogText("[fe80::1%eth0]:1 ünïcode") ==
        "[fe80::1%eth0]:1 ünïcode");
}

TEST_CASE(
    "Every log line is one line: a peer-supplied newline and \"<0>\" cannot "
    "forge a journald line or priority (issue 26 item 9)") {
  const char* dir = std::getenv("TEST_TMPDIR");
  REQUIRE(dir != nullptr);
  const std::string path = std::string(dir) + "/journal";
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  const int saved_stderr = dup(STDERR_FILENO);
  REQUIRE(dup2(file, STDERR_FILENO) == STDERR_FILENO);
  close(file);
  struct stat info {};
  REQUIRE(fstat(STDERR_FILENO, &info) == 0);
  const std::string stream =
      std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino);
  setenv("JOURNAL_STREAM", stream.c_str(), 1);
  REQUIRE(StderrIsJournal());
  REQUIRE(ConfigureLogging("info").ok());
  const std::string peer = "learner-0\n<0>emerg forged\r<2>x\x1b[31m";
  spdlog::info("learner {} failed: {}", peer, "reset\nby peer");
  spdlog::default_logger()->flush();
  REQUIRE(dup2(saved_stderr, STDERR_FILENO) == STDERR_FILENO);
  close(saved_stderr);
  unsetenv("JOURNAL_STREAM");

  const std::vector<std::string> lines = Lines(path);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] ==
        "<6>info learner learner-0\\n<0>emerg forged\\r<2>x\\x1b[31m failed: "
        "reset\\nby peer");
}

}  // namespace
}  // namespace aggregator
