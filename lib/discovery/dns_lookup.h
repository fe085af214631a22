// DnsLookup: the c-ares channel of one refresh or request, and the loop that
// runs its queries until they end, limits.deadline passes (DEADLINE_EXCEEDED)
// or limits.stop is set (CANCELLED within 50 ms). c-ares' own timeouts bound
// each try, never the whole; this loop does.
//
// With a nameserver, a name is asked of that server as it is written: no
// search domains, no HOSTALIASES, no hosts file. The host's resolv.conf
// belongs to the host's resolvers, and a private server (dnsmasq --local)
// refuses the names a search list makes of it, which ends a lookup in an
// error (c-ares goes on to the search domains even after an answer without
// records of one type, AAAA say). Without one, the system's settings apply as
// for getaddrinfo: /etc/resolv.conf's servers, search domains and ndots. A
// name ending with '.' is absolute either way.
//
// Thread-safety: one thread at a time.
#ifndef LIB_DISCOVERY_DNS_LOOKUP_H_
#define LIB_DISCOVERY_DNS_LOOKUP_H_

#include <ares.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/host_port.h"
#include "lib/discovery/learner_source.h"

namespace aggregator {

// What a failed query's c-ares `status` means, for errors, after "`server`
// ": ". c-ares 1.18 reports a SERVFAIL, REFUSED or NOTIMP answer, and an
// unreachable server, as ARES_ECONNREFUSED ("Could not contact DNS servers"):
// that one is said as it is.
std::string DnsFailure(int status, const std::string& server,
                       const std::string& name);

class DnsLookup {
 public:
  // A channel whose tries fit in what is left of limits.deadline.
  static absl::StatusOr<std::unique_ptr<DnsLookup>> Start(
      const std::optional<HostPort>& nameserver, const RequestLimits& limits);
  ~DnsLookup();  // ends the queries still running (ARES_EDESTRUCTION)
  DnsLookup(const DnsLookup&) = delete;
  DnsLookup& operator=(const DnsLookup&) = delete;

  // Where queries are started (ares_search, ares_getaddrinfo).
  ares_channel channel() const { return channel_; }
  // "DNS server 10.96.0.10:53" or "the system's DNS servers", for errors.
  const std::string& server() const { return server_; }

  // Runs the queries until done() holds. On an error the queries are
  // cancelled; it names `name` and the server.
  absl::Status Wait(const std::string& name, const std::function<bool()>& done);

 private:
  DnsLookup(ares_channel channel, std::string server, RequestLimits limits,
            std::chrono::milliseconds budget);

  const ares_channel channel_;
  const std::string server_;
  const RequestLimits limits_;
  const std::chrono::milliseconds budget_;  // at Start, for errors
};

// The addresses of `host` ("10.0.0.1", "fd00::1"), in the order to try them:
// as getaddrinfo finds them (the hosts file, then DNS), but within `limits`;
// an IP address is its own. With `nameserver`, only that server is asked.
absl::StatusOr<std::vector<std::string>> ResolveHost(
    const std::string& host, const RequestLimits& limits,
    const std::optional<HostPort>& nameserver = std::nullopt);

}  // namespace aggregator

#endif  // LIB_DISCOVERY_DNS_LOOKUP_H_
