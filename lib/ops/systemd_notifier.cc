#include "lib/ops/systemd_notifier.h"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <cstdint>

namespace aggregator {

SystemdNotifier::SystemdNotifier() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec / 2);
  }
}

void SystemdNotifier::Ready() { Notify("READY=1"); }

void SystemdNotifier::Reloading() {
  // MONOTONIC_USEC lets newer systemd (Type=notify-reload) match the reload.
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t usec =
      static_cast<uint64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
  Notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

void SystemdNotifier::Stopping() { Notify("STOPPING=1"); }

void SystemdNotifier::Status(const std::string& text) {
  Notify("STATUS=" + text);
}

void SystemdNotifier::Watchdog() { Notify("WATCHDOG=1"); }

void SystemdNotifier::Notify(const std::string& state) {
  sd_notify(/*unset_environment=*/0, state.c_str());
}

}  // namespace aggregator
