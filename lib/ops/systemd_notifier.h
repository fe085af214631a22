// SystemdNotifier: the sd_notify side of systemd's Type=notify protocol (READY,
// RELOADING, STOPPING, STATUS, WATCHDOG), sent without ever blocking. Every
// call is a no-op when the process was not started by systemd (NOTIFY_SOCKET
// unset), so callers never need to check.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LIB_OPS_SYSTEMD_NOTIFIER_H_
#define LIB_OPS_SYSTEMD_NOTIFIER_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <optional>
#include <string>

namespace aggregator {

class SystemdNotifier {
 public:
  SystemdNotifier();
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  void Ready();
  // Before applying a new configuration; follow with Ready().
  void Reloading();
  void Stopping();
  // A one-line, human-readable state shown by `systemctl status`.
  void Status(const std::string& text);
  // A keep-alive ping for WatchdogSec=.
  void Watchdog();

  // How often to ping: half of WATCHDOG_USEC, when the watchdog is enabled for
  // us.
  std::optional<std::chrono::microseconds> watchdog_interval() const {
    return watchdog_interval_;
  }

 private:
  void Notify(const std::string& state);

  std::optional<std::chrono::microseconds> watchdog_interval_;
  int fd_ = -1;  // a datagram socket for NOTIFY_SOCKET, or -1
  sockaddr_un address_{};
  socklen_t address_length_ = 0;
};

}  // namespace aggregator

#endif  // LIB_OPS_SYSTEMD_NOTIFIER_H_
