// HostPort: one parsed network address, the form every listener and learner
// address takes once it leaves the configuration file: "host:port",
// "[v6]:port" or "unix:/path".
//
// Parsed once (config, flags); everything else uses the parts or ToString(),
// which is also the form gRPC takes for targets and listening addresses.
#ifndef LIB_BASE_HOST_PORT_H_
#define LIB_BASE_HOST_PORT_H_

#include <string>
#include <string_view>
#include <tuple>

#include "absl/status/statusor.h"

namespace aggregator {

struct HostPort {
  // TCP when `path` is empty: `host` (an IPv6 address without brackets, an
  // IPv4 address or a name) and `port`. A unix socket otherwise.
  std::string host;
  int port = 0;
  std::string path;

  // Parses "host:port", "[v6]:port" or "unix:/absolute/path". Port 0 (a free
  // port, for listeners) only when `allow_port_zero`. INVALID_ARGUMENT saying
  // what is wrong, e.g. "missing \":port\"".
  static absl::StatusOr<HostPort> Parse(std::string_view text,
                                        bool allow_port_zero);
  static HostPort Tcp(std::string host, int port);
  static HostPort Unix(std::string path);

  bool is_unix() const { return !path.empty(); }
  // 0.0.0.0, :: or an empty host: every interface.
  bool IsWildcard() const;
  // 127.0.0.0/8, ::1, "localhost", or a unix socket: reachable from this host
  // only.
  bool IsLoopback() const;

  // "host:port", "[v6]:port" or "unix:/path".
  std::string ToString() const;
  // The same address with another port (a TCP listener's bound port).
  HostPort WithPort(int bound_port) const;
  // Where a client on this host dials a listener bound here: a wildcard host
  // becomes the loopback address of its family.
  HostPort Dialable() const;

  bool operator==(const HostPort& other) const {
    return std::tie(host, port, path) ==
           std::tie(other.host, other.port, other.path);
  }
  bool operator!=(const HostPort& other) const { return !(*this == other); }
};

// A numeric IPv4 or IPv6 address ("10.0.0.1", "fd00::1"; no brackets).
bool IsIpAddress(const std::string& text);

}  // namespace aggregator

#endif  // LIB_BASE_HOST_PORT_H_
