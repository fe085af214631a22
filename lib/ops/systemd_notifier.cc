#include "lib/ops/systemd_notifier.h"

#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>

namespace aggregator {
namespace {

// A decimal that fills `text` whole, above 0.
std::optional<uint64_t> PositiveNumber(const char* text) {
  if (text == nullptr || text[0] < '0' || text[0] > '9') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value == 0) return std::nullopt;
  return value;
}

// sd_watchdog_enabled(3)'s reading of the environment, here rather than from
// libsystemd: linking it loaded 7 shared objects (libsystemd, libgcrypt,
// libcap, liblzma, libzstd, liblz4, libgpg-error) that ld.so relocates
// before aggregatord can block its signals (issue 26 item 17). WATCHDOG_USEC,
// for this process if WATCHDOG_PID names another.
std::optional<uint64_t> WatchdogUsec() {
  const std::optional<uint64_t> usec = PositiveNumber(getenv("WATCHDOG_USEC"));
  if (!usec) return std::nullopt;
  if (const char* pid = getenv("WATCHDOG_PID"); pid != nullptr) {
    const std::optional<uint64_t> owner = PositiveNumber(pid);
    if (!owner || *owner != static_cast<uint64_t>(getpid())) {
      return std::nullopt;
    }
  }
  return usec;
}

}  // namespace

SystemdNotifier::SystemdNotifier() {
  const char* socket_path = getenv("NOTIFY_SOCKET");
  if (socket_path != nullptr && socket_path[0] != '\0' &&
      strlen(socket_path) < sizeof(sockaddr_un{}.sun_path) &&
      (socket_path[0] == '/' || socket_path[0] == '@')) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    memcpy(address.sun_path, socket_path, strlen(socket_path));
    if (address.sun_path[0] == '@') address.sun_path[0] = '\0';  // abstract
    address_length_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                             strlen(socket_path));
    address_ = address;
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  }
  if (const std::optional<uint64_t> usec = WatchdogUsec()) {
    watchdog_interval_ = std::chrono::microseconds(*usec / 2);
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

SystemdNotifier::~SystemdNotifier() {
  if (fd_ >= 0) close(fd_);
}

void SystemdNotifier::Notify(const std::string& state) {
  if (fd_ < 0) return;
  // Never blocks: sd_notify() would wait while the receiver's queue is full,
  // and the signal loop that pings the watchdog must not. A message that does
  // not fit is dropped (systemd reads its socket at once; a lost ping is
  // resent within half the watchdog interval).
  (void)sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL | MSG_DONTWAIT,
               reinterpret_cast<const sockaddr*>(&address_), address_length_);
}

}  // namespace aggregator
