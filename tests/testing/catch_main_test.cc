// The shared Catch2 main leaves a fatal signal to the sanitizer of a
// sanitizer build: a test that crashes under --config=asan or tsan prints the
// sanitizer's report with the stack of the fault. With Catch2's own handler
// (installed around every test case) TSan reported only that handler's
// malloc, and the stack was lost.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <string>

#include "tests/testing/process_helpers.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif
#else
constexpr bool kSanitizer = false;
#endif

// Named, so the report's stack can be checked for it.
[[gnu::noinline]] void CrashOnPurpose(volatile int* where) { *where = 1; }

// Reads `fd` to its end, for at most `timeout`.
std::string ReadAll(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd = {fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

TEST_CASE("A crash in a test case under a sanitizer prints its stack") {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Inside the test case, so with whatever handlers Catch2 installed.
    dup2(pipe_fds[1], STDERR_FILENO);
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    CrashOnPurpose(nullptr);
    _exit(0);
  }
  close(pipe_fds[1]);
  // A sanitizer symbolizes the stack: seconds on a loaded machine.
  const std::string report = ReadAll(pipe_fds[0], std::chrono::seconds(60));
  close(pipe_fds[0]);
  REQUIRE(aggregator::testing::ExitsWithin(child, std::chrono::seconds(10)));
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO("the child's output:\n" << report);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  if (kSanitizer) {
    CHECK_THAT(report, Catch::Contains("Sanitizer: SEGV on unknown address") &&
                           Catch::Contains("CrashOnPurpose"));
  }
}
