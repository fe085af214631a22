// Helpers for tests that run the project's binaries as real processes.
#ifndef TESTS_TESTING_PROCESS_HELPERS_H_
#define TESTS_TESTING_PROCESS_HELPERS_H_

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>
// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/process/subprocess.h"

namespace aggregator::testing {

// Generous bound for anything that should happen at once on a loaded machine.
inline constexpr std::chrono::seconds kLongWait(15);

// Polls `condition` until it holds or `timeout` passes; true if it held.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds timeout =
                                         std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// A fresh directory under $TEST_TMPDIR (or /tmp), symlinks resolved.
inline std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/testXXXXXX";
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  char resolved[PATH_MAX];
  REQUIRE(realpath(pattern.c_str(), resolved) != nullptr);
  return resolved;
}

// Waits through a pidfd (which works for any process, not only children)
// until `pid` has exited; true if it did within `timeout`.
inline bool ExitsWithin(pid_t pid,
                        std::chrono::steady_clock::duration timeout) {
  const int pidfd = pidfd_open(pid, 0);
  if (pidfd < 0) return errno == ESRCH;
  pollfd pfd = {pidfd, POLLIN, 0};
  const int ready =
      poll(&pfd, 1,
           static_cast<int>(
               std::chrono::duration_cast<std::chrono::milliseconds>(timeout)
                   .count()));
  close(pidfd);
  return ready == 1;
}

// How many threads `pid` has now (its entries in /proc/PID/task).
inline size_t ThreadCount(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return 0;
  size_t threads = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++threads;
  }
  closedir(dir);
  return threads;
}

// Waits until every thread of `pid` is stopped (state T in /proc): kill()
// only queues a SIGSTOP, and a thread on another CPU may still answer a call
// meanwhile. True if all were stopped within `timeout`.
inline bool StoppedWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  return Eventually(
      [&] {
        DIR* dir = opendir(tasks.c_str());
        if (dir == nullptr) return false;
        bool all_stopped = true;
        int threads = 0;
        while (dirent* entry = readdir(dir)) {
          if (entry->d_name[0] == '.') continue;
          std::ifstream stat(tasks + "/" + entry->d_name + "/stat");
          std::string line;
          std::getline(stat, line);
          // The state follows the command's closing parenthesis.
          const size_t paren = line.rfind(')');
          ++threads;
          if (paren == std::string::npos || paren + 2 >= line.size() ||
              line[paren + 2] != 'T') {
            all_stopped = false;
          }
        }
        closedir(dir);
        return threads > 0 && all_stopped;
      },
      timeout);
}

inline std::string WriteFile(const std::string& path,
                             const std::string& content) {
  std::ofstream out(path);
  out << content;
  REQUIRE(out.good());
  return path;
}

inline std::unique_ptr<Subprocess> Spawn(std::vector<std::string> argv) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  auto process = Subprocess::Start(options);
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return std::move(*process);
}

// Reads lines (stdout, or stderr) until one contains `needle`; returns it.
// Fails the test at EOF or after kLongWait, showing what was read.
inline std::string WaitForLine(Subprocess& process, const std::string& needle,
                               bool from_stderr = false) {
  const auto deadline = std::chrono::steady_clock::now() + kLongWait;
  std::string seen;
  while (true) {
    auto line = process.ReadLine(deadline, from_stderr);
    INFO("waiting for '" << needle << "'; read so far:\n" << seen);
    REQUIRE(line.ok());
    if (line->find(needle) != std::string::npos) return *line;
    seen += *line + "\n";
  }
}

// Everything left on a stream until EOF (the process has exited or will).
inline std::string ReadAll(Subprocess& process, bool from_stderr) {
  const auto deadline = std::chrono::steady_clock::now() + kLongWait;
  std::string all;
  while (true) {
    auto line = process.ReadLine(deadline, from_stderr);
    if (!line.ok()) return all;
    all += *line + "\n";
  }
}

// The text after the last space of a line: "... listening on 127.0.0.1:5" ->
// addr.
inline std::string LastWord(const std::string& line) {
  return line.substr(line.rfind(' ') + 1);
}

// The word that follows `prefix` in `line` ("" when `prefix` is absent): the
// address in "aggregatord listening on ADDR (TLS) ...".
inline std::string WordAfter(const std::string& line,
                             const std::string& prefix) {
  const size_t at = line.find(prefix);
  if (at == std::string::npos) return "";
  const size_t start = at + prefix.size();
  return line.substr(start, line.find(' ', start) - start);
}

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_PROCESS_HELPERS_H_
