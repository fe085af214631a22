// dnsmasq (Debian's dnsmasq-base) as a DNS server for tests: started on a free
// loopback port, serving names of the .test domain from a hosts file that the
// test rewrites (and dnsmasq re-reads on SIGHUP), refusing every other name.
#ifndef TESTS_TESTING_DNSMASQ_H_
#define TESTS_TESTING_DNSMASQ_H_

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/base/host_port.h"
#include "lib/discovery/learner_source.h"
#include "tests/testing/process_helpers.h"

namespace aggregator::testing {

// A UDP socket bound to a free port of 127.0.0.1; sets `port`.
inline int BoundUdpSocket(int* port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A port free for both UDP and TCP on 127.0.0.1 right now (DNS uses both).
inline int FreeDnsPort() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int port = 0;
    const int udp = BoundUdpSocket(&port);
    const int tcp = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(tcp >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool free =
        bind(tcp, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(tcp);
    close(udp);
    if (free) return port;
  }
  FAIL("no free port for dnsmasq");
  return 0;
}

// dnsmasq answering for *.test from a hosts file ("address name" lines) and
// nothing else (no upstream, no /etc/hosts): any other name is REFUSED.
class Dnsmasq {
 public:
  explicit Dnsmasq(const std::string& hosts)
      : dir_(TempDir()), hosts_path_(dir_ + "/hosts") {
    WriteFile(hosts_path_, hosts);
    for (int attempt = 0; attempt < 5 && process_ == nullptr; ++attempt) {
      port_ = FreeDnsPort();
      // --no-daemon: in the foreground, logging to stderr too, and keeping
      // the test's user (as root it would switch to its own, which a
      // sandbox's user namespace does not allow).
      auto process = Spawn(
          {"/usr/sbin/dnsmasq", "--no-daemon", "--conf-file=/dev/null",
           "--port=" + std::to_string(port_), "--listen-address=127.0.0.1",
           "--bind-interfaces", "--no-resolv", "--no-hosts", "--local=/test/",
           "--addn-hosts=" + hosts_path_, "--log-facility=-"});
      // Its log goes to stderr; "read <hosts>" once it serves them.
      const std::string line = WaitForLine(*process, "dnsmasq", true);
      if (line.find("failed") != std::string::npos) {  // the port was taken
        failures_.push_back(line);
        continue;
      }
      WaitForLine(*process, "read " + hosts_path_, true);
      process_ = std::move(process);
    }
    INFO(Catch::rangeToString(failures_));
    REQUIRE(process_ != nullptr);
  }
  ~Dnsmasq() {
    if (process_) {
      (void)process_->Signal(SIGTERM);
      (void)process_->Wait(std::chrono::steady_clock::now() + kLongWait);
    }
  }

  HostPort address() const { return HostPort::Tcp("127.0.0.1", port_); }

  // Replaces the records and waits until dnsmasq has read them.
  void SetHosts(const std::string& hosts) {
    WriteFile(hosts_path_ + ".new", hosts);
    REQUIRE(rename((hosts_path_ + ".new").c_str(), hosts_path_.c_str()) == 0);
    REQUIRE(process_->Signal(SIGHUP).ok());
    WaitForLine(*process_, "read " + hosts_path_, true);
  }

 private:
  const std::string dir_;
  const std::string hosts_path_;
  int port_ = 0;
  std::unique_ptr<Subprocess> process_;
  std::vector<std::string> failures_;  // of the attempts to start it
};

// A UDP socket on 127.0.0.1 that takes DNS queries and never answers.
class SilentDnsServer {
 public:
  SilentDnsServer() : fd_(BoundUdpSocket(&port_)) {}
  ~SilentDnsServer() { close(fd_); }
  SilentDnsServer(const SilentDnsServer&) = delete;
  SilentDnsServer& operator=(const SilentDnsServer&) = delete;

  HostPort address() const { return HostPort::Tcp("127.0.0.1", port_); }

  // Drops the queries received so far.
  void Drain() {
    char query[512];
    while (recv(fd_, query, sizeof(query), MSG_DONTWAIT) >= 0) {
    }
  }
  // Waits up to `timeout` for a query (and drops it); true once one came.
  bool WaitForQuery(std::chrono::milliseconds timeout) {
    pollfd ready{fd_, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(timeout.count())) != 1) return false;
    char query[512];
    return recv(fd_, query, sizeof(query), 0) >= 0;
  }

  // Runs `lookup(limits)` (a deadline 30 s away) with a stop set as soon as
  // this server gets one of its queries; returns the result and the seconds
  // from the stop to the lookup's return.
  template <typename Lookup>
  auto StopAtQuery(Lookup lookup) {
    using Clock = std::chrono::steady_clock;
    Drain();  // an earlier lookup's
    std::atomic<bool> stop{false};
    bool queried = false;
    Clock::time_point stop_at{};
    std::thread stopper([&] {
      queried = WaitForQuery(kLongWait);
      stop_at = Clock::now();
      stop = true;
    });
    auto result =
        lookup(RequestLimits{Clock::now() + std::chrono::seconds(30), &stop});
    const Clock::time_point returned = Clock::now();
    stopper.join();
    CHECK(queried);
    return std::make_pair(
        std::move(result),
        std::chrono::duration<double>(returned - stop_at).count());
  }

 private:
  int port_ = 0;
  const int fd_;
};

// The search domain tests run with (LOCALDOMAIN, in tests/discovery/BUILD),
// as a host whose resolv.conf has a `search` line would have it: dnsmasq
// refuses its names.
inline constexpr char kRefusedSearchDomain[] = "refused.example";

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_DNSMASQ_H_
