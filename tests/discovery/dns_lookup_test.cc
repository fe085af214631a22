// ResolveHost (lib/discovery/dns_lookup.h), the lookup of an orchestrator's
// host, against dnsmasq (tests/testing/dnsmasq.h) and a server that never
// answers, with a search domain dnsmasq refuses in the environment
// (LOCALDOMAIN).
#include "lib/discovery/dns_lookup.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "tests/testing/dnsmasq.h"

namespace aggregator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

RequestLimits Within(milliseconds timeout) {
  return RequestLimits{Clock::now() + timeout};
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

TEST_CASE(
    "ResolveHost finds a host's addresses at the nameserver, takes an "
    "address as it is, and names a host without any") {
  Dnsmasq dns("127.0.0.21 orchestrator.test\nfd00::21 orchestrator.test\n");
  auto found =
      ResolveHost("orchestrator.test", Within(seconds(5)), dns.address());
  INFO(found.status().ToString());
  REQUIRE(found.ok());
  std::vector<std::string> sorted = *found;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"127.0.0.21", "fd00::21"});

  // An address needs no lookup (an unreachable nameserver is never asked).
  SilentDnsServer silent;
  for (const char* address : {"127.0.0.5", "::1"}) {
    auto itself = ResolveHost(address, Within(seconds(5)), silent.address());
    REQUIRE(itself.ok());
    CHECK(*itself == std::vector<std::string>{address});
  }

  // Not the refusal of nothing.test.refused.example: the search domains do
  // not apply at a nameserver.
  REQUIRE(std::getenv("LOCALDOMAIN") != nullptr);
  auto missing = ResolveHost("nothing.test", Within(seconds(5)), dns.address());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() ==
        "nothing.test: no such host at DNS server " + dns.address().ToString());
}

TEST_CASE(
    "ResolveHost ends by the deadline when the DNS server never answers, "
    "and soon after a stop") {
  SilentDnsServer silent;
  auto start = Clock::now();
  auto timed_out = ResolveHost("orchestrator.test", Within(milliseconds(600)),
                               silent.address());
  const double took = Seconds(Clock::now() - start);
  CHECK(timed_out.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(timed_out.status().message() ==
        "orchestrator.test: no answer from DNS server " +
            silent.address().ToString() + " within 600ms");
  CHECK(took < 2.0);

  auto [stopped, after_stop] =
      silent.StopAtQuery([&](const RequestLimits& limits) {
        return ResolveHost("orchestrator.test", limits, silent.address());
      });
  CHECK(stopped.status().code() == absl::StatusCode::kCancelled);
  CHECK(after_stop < 1.0);
  std::printf(
      "ResolveHost against a silent server: cut %.3f s after start at a "
      "0.6 s deadline, %.0f ms after a stop\n",
      took, after_stop * 1000);
}

}  // namespace
}  // namespace aggregator::testing
