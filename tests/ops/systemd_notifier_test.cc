// SystemdNotifier's reading of the watchdog settings, as sd_watchdog_enabled(3)
// reads them (libsystemd is no longer linked: issue 26 item 17).
#include "lib/ops/systemd_notifier.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

namespace aggregator {
namespace {

std::optional<std::chrono::microseconds> IntervalWith(const char* usec,
                                                      const char* pid) {
  if (usec != nullptr) {
    setenv("WATCHDOG_USEC", usec, 1);
  } else {
    unsetenv("WATCHDOG_USEC");
  }
  if (pid != nullptr) {
    setenv("WATCHDOG_PID", pid, 1);
  } else {
    unsetenv("WATCHDOG_PID");
  }
  return SystemdNotifier().watchdog_interval();
}

TEST_CASE("The watchdog is pinged at half of WATCHDOG_USEC, if it is ours") {
  using std::chrono::microseconds;
  const std::string self = std::to_string(getpid());
  CHECK(IntervalWith("200000", nullptr) == microseconds(100000));
  CHECK(IntervalWith("200000", self.c_str()) == microseconds(100000));
  // Another process's watchdog (a child that inherited the variables).
  CHECK(IntervalWith("200000", "1") == std::nullopt);
  CHECK(IntervalWith("200000", "x") == std::nullopt);
  CHECK(IntervalWith(nullptr, self.c_str()) == std::nullopt);
  CHECK(IntervalWith("0", nullptr) == std::nullopt);
  CHECK(IntervalWith("-5", nullptr) == std::nullopt);
  CHECK(IntervalWith("20s", nullptr) == std::nullopt);
  CHECK(IntervalWith("", nullptr) == std::nullopt);
}

}  // namespace
}  // namespace aggregator
