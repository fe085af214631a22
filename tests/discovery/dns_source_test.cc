// learner_sources[].dns against a real DNS server: dnsmasq
// (tests/testing/dnsmasq.h), with a search domain it refuses in the environment
// (LOCALDOMAIN). The learners are example learners on one port at several
// 127.0.0.x addresses.
#include "lib/discovery/dns_source.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/testing/dnsmasq.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"

namespace aggregator::testing {
namespace {

namespace pb = aggregator::v1;
using std::chrono::seconds;

DnsSourceConfig Source(const std::string& name, int port, const Dnsmasq& dns) {
  DnsSourceConfig config;
  config.name = name;
  config.port = port;
  config.refresh = milliseconds(100);
  config.timeout = milliseconds(2000);
  config.nameserver = dns.address();
  return config;
}

RequestLimits Within(milliseconds timeout) {
  return RequestLimits{Clock::now() + timeout};
}

std::vector<std::string> Strings(const std::vector<HostPort>& addresses) {
  std::vector<std::string> out;
  for (const HostPort& address : addresses) out.push_back(address.ToString());
  return out;
}

TEST_CASE(
    "DnsSource finds every A and AAAA record of a name, in address "
    "order") {
  Dnsmasq dns(
      "127.0.0.13 learners.test\n127.0.0.11 learners.test\n"
      "fd00::5 learners.test\n127.0.0.12 learners.test\n"
      "127.0.0.20 other.test\n");
  DnsSource source(Source("learners.test", 22300, dns));
  auto found = source.Fetch(Within(milliseconds(5000)));
  INFO(found.status().ToString());
  REQUIRE(found.ok());
  CHECK(Strings(*found) ==
        std::vector<std::string>{"127.0.0.11:22300", "127.0.0.12:22300",
                                 "127.0.0.13:22300", "[fd00::5]:22300"});
  // A fully qualified name is the same name.
  found = DnsSource(Source("other.test.", 1, dns))
              .Fetch(Within(milliseconds(5000)));
  REQUIRE(found.ok());
  CHECK(Strings(*found) == std::vector<std::string>{"127.0.0.20:1"});
}

TEST_CASE(
    "With a nameserver the name is asked as written: the host's search "
    "domains, which that server refuses, are not tried") {
  // The search domain of the test's environment, as a resolv.conf `search`
  // line gives one: without it this case shows nothing.
  const char* search = std::getenv("LOCALDOMAIN");
  REQUIRE(search != nullptr);
  REQUIRE(std::string(search) == kRefusedSearchDomain);
  Dnsmasq dns("127.0.0.11 learners.test\n");
  // An A record and no AAAA: after the empty AAAA answer c-ares' search goes
  // on to learners.test.refused.example, and dnsmasq's REFUSED would end the
  // lookup in an error.
  auto found = DnsSource(Source("learners.test", 1, dns))
                   .Fetch(Within(milliseconds(5000)));
  INFO(found.status().ToString());
  REQUIRE(found.ok());
  CHECK(Strings(*found) == std::vector<std::string>{"127.0.0.11:1"});
  // No records at all: NOT_FOUND for the name, not REFUSED for another.
  auto missing = DnsSource(Source("nothing.test", 1, dns))
                     .Fetch(Within(milliseconds(5000)));
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

// A DNS server on 127.0.0.1 (UDP, port 0) answering every query SERVFAIL.
class FailingDnsServer {
 public:
  FailingDnsServer() : fd_(BoundUdpSocket(&port_)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd ready{fd_, POLLIN, 0};
        if (poll(&ready, 1, 50) != 1) continue;  // 50 ms: looks at stop_
        unsigned char query[512];
        sockaddr_storage from{};
        socklen_t length = sizeof(from);
        const ssize_t n = recvfrom(fd_, query, sizeof(query), 0,
                                   reinterpret_cast<sockaddr*>(&from), &length);
        if (n < 12) continue;
        query[2] |= 0x80;     // QR: an answer
        query[3] = 0x80 | 2;  // RA, RCODE 2 (SERVFAIL)
        sendto(fd_, query, n, 0, reinterpret_cast<sockaddr*>(&from), length);
        ++answered_;
      }
    });
  }
  ~FailingDnsServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  HostPort address() const { return HostPort::Tcp("127.0.0.1", port_); }
  int answered() const { return answered_; }

 private:
  int port_ = 0;
  const int fd_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

TEST_CASE(
    "DnsSource reports no records, a DNS server that is down or "
    "silent, and a stop as errors naming the server, within the "
    "timeout") {
  Dnsmasq dns("127.0.0.11 learners.test\n");
  auto missing = DnsSource(Source("nothing.test", 1, dns))
                     .Fetch(Within(milliseconds(5000)));
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() ==
        "nothing.test: no A or AAAA records at DNS server " +
            dns.address().ToString());

  // Nothing listens on this port: refused at once.
  DnsSourceConfig down = Source("learners.test", 1, dns);
  down.nameserver = HostPort::Tcp("127.0.0.1", ClosedPort());
  auto refused = DnsSource(down).Fetch(Within(milliseconds(5000)));
  CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::StartsWith("learners.test (A): DNS server " +
                               down.nameserver->ToString() + ": "));

  // A server that answers SERVFAIL (c-ares: "Could not contact DNS
  // servers"): said as it is, naming the server.
  FailingDnsServer failing;
  DnsSourceConfig servfail = Source("learners.test", 1, dns);
  servfail.nameserver = failing.address();
  auto failed = DnsSource(servfail).Fetch(Within(milliseconds(5000)));
  CHECK(failed.status().code() == absl::StatusCode::kUnavailable);
  CHECK(failed.status().message() ==
        "learners.test (A): DNS server " + servfail.nameserver->ToString() +
            " refused or failed the query for learners.test (SERVFAIL, "
            "REFUSED or NOTIMP), or could not be reached");
  CHECK(failing.answered() > 0);

  // A server that takes the queries and never answers: cut at the deadline;
  // or soon after a stop asked while the query waits.
  SilentDnsServer silent;
  DnsSourceConfig hanging = Source("learners.test", 1, dns);
  hanging.nameserver = silent.address();
  const auto start = Clock::now();
  auto timed_out = DnsSource(hanging).Fetch(Within(milliseconds(600)));
  const double took = Seconds(Clock::now() - start);
  CHECK(took < 3.0);
  CHECK(timed_out.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(timed_out.status().message()),
             Catch::Contains("no answer from DNS server " +
                             hanging.nameserver->ToString()));
  auto [stopped, after_stop] =
      silent.StopAtQuery([&](const RequestLimits& limits) {
        return DnsSource(hanging).Fetch(limits);
      });
  CHECK(stopped.status().code() == absl::StatusCode::kCancelled);
  CHECK(after_stop < 1.0);
}

// Example learners on one port at 127.0.0.11 .. 127.0.0.14.
struct LearnersOnOnePort {
  int port = 0;
  std::map<std::string, std::unique_ptr<ExampleLearnerServer>> at;  // by id

  LearnersOnOnePort() {
    for (int attempt = 0; attempt < 20 && at.empty(); ++attempt) {
      const int candidate = ClosedPort();
      for (int i = 11; i <= 14; ++i) {
        const std::string address =
            "127.0.0." + std::to_string(i) + ":" + std::to_string(candidate);
        auto learner = StartExampleLearner({}, address);
        if (!learner.ok()) {
          at.clear();
          break;
        }
        at[address] = std::move(*learner);
      }
      port = candidate;
    }
    REQUIRE(at.size() == 4);
  }
  std::string Id(int last_octet) const {
    return "127.0.0." + std::to_string(last_octet) + ":" + std::to_string(port);
  }
};

std::string Hosts(std::initializer_list<int> octets) {
  std::string hosts;
  for (int octet : octets) {
    hosts += "127.0.0." + std::to_string(octet) + " learners.test\n";
  }
  return hosts;
}

std::vector<std::string> StringList(const google::protobuf::Value& value) {
  std::vector<std::string> out;
  for (const auto& v : value.list_value().values()) {
    out.push_back(v.string_value());
  }
  return out;
}

// Why a successful Learn is wrong ("" when its merge lines up with the batch
// and with the plan's members).
std::string CheckMerged(const pb::DataDemand& demand, const std::string& prefix,
                        const pb::LearnReply& reply) {
  const auto& info = reply.info().fields();
  const auto& priority_info = info.at("priority_info").struct_value().fields();
  const int n = static_cast<int>(demand.batch_size());
  if (StringList(priority_info.at("replay_unique_id")) != Ids(prefix, 0, n)) {
    return "replay ids out of order";
  }
  const auto& received = info.at("received").list_value().values();
  if (received.size() != demand.membership().members_size()) {
    return "not one share per member";
  }
  for (const auto& share : received) {
    if (share.number_value() != 32) return "a share is not 32 samples";
  }
  return "";
}

// (No colon in a test name: Catch2 2.13 indents a wrapped name to the colon,
// and loops forever when that is beyond the width.)
TEST_CASE(
    "Learners join and leave as their DNS records change while a "
    "coordinator trains; every Learn is split right, a step that lost a "
    "learner fails FAILED_PRECONDITION and the next one succeeds") {
  LearnersOnOnePort learners;
  Dnsmasq dns(Hosts({11, 12}));
  AggregatorConfig config = FastConfig({}, 1);
  config.learner_sources = {Source("learners.test", learners.port, dns)};
  auto aggregator = StartAggregator(config);
  REQUIRE(Eventually([&] {
    return PoolIds(*aggregator) ==
           std::vector<std::string>{learners.Id(11), learners.Id(12)};
  }));
  auto stub = LearnerStub(aggregator->address());

  // One step straddles a change: planned over .11 and .12, then .12 leaves
  // and .13 and .14 join (appended after .11, which keeps its place).
  pb::DataDemand before;
  REQUIRE(stub->GetData(Deadline().get(), {}, &before).ok());
  const auto changed = Clock::now();
  dns.SetHosts(Hosts({14, 11, 13}));
  REQUIRE(Eventually([&] {
    return PoolIds(*aggregator) == std::vector<std::string>{learners.Id(11),
                                                            learners.Id(13),
                                                            learners.Id(14)};
  }));
  const double change_seconds = Seconds(Clock::now() - changed);
  pb::LearnRequest batch = Batch(static_cast<int>(before.batch_size()), "old");
  batch.set_plan_id(before.plan_id());
  pb::LearnReply reply;
  const grpc::Status stale = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(stale.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(
      stale.error_message(),
      Catch::Contains(learners.Id(12) + " is no longer a configured learner") &&
          Catch::Contains("call GetData again"));
  // The next step is over the three, in pool order, each with its slice.
  pb::DataDemand after;
  REQUIRE(stub->GetData(Deadline().get(), {}, &after).ok());
  CHECK(after.batch_size() == 3 * 32);
  batch = Batch(static_cast<int>(after.batch_size()), "new");
  batch.set_plan_id(after.plan_id());
  REQUIRE(stub->Learn(Deadline().get(), batch, &reply).ok());
  CHECK(CheckMerged(after, "new", reply).empty());
  int slice = 0;
  for (int octet : {11, 13, 14}) {
    INFO("learner " << learners.Id(octet));
    CHECK(learners.at.at(learners.Id(octet))->learner->received().back() ==
          Ids("new", slice * 32, (slice + 1) * 32));
    ++slice;
  }

  // Now a coordinator trains while the records change under it.
  std::atomic<bool> stop{false};
  std::atomic<int> succeeded{0};
  std::atomic<int> refused{0};
  // Written by the coordinator thread only, read once it is joined.
  std::vector<std::string> wrong;
  int wrong_count = 0;
  auto note = [&](const std::string& what) {
    if (wrong.size() < 10) wrong.push_back(what);
    ++wrong_count;
  };
  std::thread coordinator([&] {
    for (int step = 0; !stop; ++step) {
      pb::DataDemand demand;
      const grpc::Status got = stub->GetData(Deadline().get(), {}, &demand);
      if (!got.ok()) {
        note("GetData failed: " + got.error_message());
        // Not a hot loop while the aggregator refuses.
        std::this_thread::sleep_for(milliseconds(50));
        continue;
      }
      const std::string prefix = "s" + std::to_string(step) + "-";
      pb::LearnRequest request =
          Batch(static_cast<int>(demand.batch_size()), prefix);
      request.set_plan_id(demand.plan_id());
      pb::LearnReply learned;
      const grpc::Status status =
          stub->Learn(Deadline().get(), request, &learned);
      if (status.ok()) {
        const std::string why = CheckMerged(demand, prefix, learned);
        if (!why.empty()) note(why);
        ++succeeded;
      } else if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                 status.error_message().find("changed since GetData") !=
                     std::string::npos) {
        ++refused;
      } else {
        note("Learn: " + status.error_message());
      }
    }
  });
  // Stopped and joined however the test ends (a REQUIRE below throws: a
  // joinable thread's destructor would abort the binary, losing the report).
  struct Join {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Join() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } joined_at_exit{stop, coordinator};
  auto change = [&](std::initializer_list<int> records,
                    std::vector<std::string> expected) {
    const int steps = succeeded;
    dns.SetHosts(Hosts(records));
    const auto start = Clock::now();
    REQUIRE(Eventually([&] { return PoolIds(*aggregator) == expected; },
                       milliseconds(15000)));
    const double seconds = Seconds(Clock::now() - start);
    // Some steps go through on the new set before the next change.
    REQUIRE(Eventually([&] { return succeeded >= steps + 3; },
                       milliseconds(15000)));
    return seconds;
  };
  // .11 (the first) leaves, .12 comes back: appended; then .13 leaves.
  const double leave_join =
      change({12, 13, 14}, {learners.Id(13), learners.Id(14), learners.Id(12)});
  const double leave = change({12, 14}, {learners.Id(14), learners.Id(12)});
  const double join =
      change({11, 12, 14}, {learners.Id(14), learners.Id(12), learners.Id(11)});
  stop = true;
  coordinator.join();
  std::printf(
      "DNS change to pool (refresh 100 ms): %.0f ms (-.12 +.13 +.14), %.0f ms "
      "(-.11 +.12), %.0f ms (-.13), %.0f ms (+.11); %d steps succeeded, %d "
      "refused as their plan lost a learner\n",
      change_seconds * 1000, leave_join * 1000, leave * 1000, join * 1000,
      succeeded.load(), refused.load());
  INFO(wrong_count << " steps went wrong; the first: "
                   << Catch::rangeToString(wrong));
  CHECK(wrong_count == 0);

  // The records vanish (NXDOMAIN): an error, and the pool keeps the learners.
  const std::vector<std::string> kept = PoolIds(*aggregator);
  const int64_t errors = aggregator->discovery().Status().at(0).errors;
  dns.SetHosts("");
  REQUIRE(Eventually(
      [&] { return aggregator->discovery().Status().at(0).errors > errors; }));
  const SourceSnapshot status = aggregator->discovery().Status().at(0);
  CHECK(status.kind == "dns");
  CHECK(status.target == "learners.test:" + std::to_string(learners.port) +
                             " via " + dns.address().ToString());
  CHECK(status.learners.size() == 3);
  CHECK(status.last_error ==
        "learners.test: no A or AAAA records at DNS "
        "server " +
            dns.address().ToString());
  CHECK(PoolIds(*aggregator) == kept);
  pb::DataDemand still;
  CHECK(stub->GetData(Deadline().get(), {}, &still).ok());
  CHECK(still.batch_size() == 3 * 32);
}

}  // namespace
}  // namespace aggregator::testing
