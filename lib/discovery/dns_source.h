// DnsSource: learner_sources[].dns. Every refresh looks up the name's A and
// AAAA records with c-ares (the resolver gRPC uses too), at the configured
// nameserver (the name as written) or the system's (with its search domains,
// unless the name ends with '.'; see lib/discovery/dns_lookup.h), and returns
// one learner per address at the configured port, in address order.
//
// A name without records (NXDOMAIN, or neither A nor AAAA) is an error, not an
// empty answer: a resolver that lost its records and a service scaled to zero
// look alike, and the discovery loop keeps the last learners on an error.
//
// Thread-safety: one Fetch at a time (the loop's thread for this source).
#ifndef LIB_DISCOVERY_DNS_SOURCE_H_
#define LIB_DISCOVERY_DNS_SOURCE_H_

#include <vector>

#include "lib/config/config.h"
#include "lib/discovery/learner_source.h"

namespace aggregator {

class DnsSource : public LearnerSource {
 public:
  explicit DnsSource(DnsSourceConfig config);

  // Both lookups are sent at once and waited for together: the whole Fetch
  // ends by limits.deadline (DEADLINE_EXCEEDED), or within 50 ms of
  // limits.stop (CANCELLED).
  absl::StatusOr<std::vector<HostPort>> Fetch(
      const RequestLimits& limits) override;

 private:
  const DnsSourceConfig config_;
};

}  // namespace aggregator

#endif  // LIB_DISCOVERY_DNS_SOURCE_H_
