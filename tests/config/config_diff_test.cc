#include "lib/config/config_diff.h"

#include <catch2/catch.hpp>

using aggregator::AggregatorConfig;
using aggregator::DescribeReload;
using aggregator::HostPort;

namespace {

AggregatorConfig Base() {
  AggregatorConfig config;
  config.learners = {{"a", HostPort::Tcp("127.0.0.1", 1)},
                     {"b", HostPort::Tcp("127.0.0.1", 2)}};
  aggregator::WorkerSpec worker;
  worker.name = "w";
  worker.command = {"sleep", "100"};
  config.workers = {worker};
  return config;
}

}  // namespace

TEST_CASE("Fields that need a restart are refused, each by name") {
  AggregatorConfig next = Base();
  next.listen = HostPort::Tcp("127.0.0.1", 9);
  next.metrics.listen.reset();
  auto refused = DescribeReload(Base(), next);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("listen (running 127.0.0.1:22272, file says "
                             "127.0.0.1:9)") &&
                 Catch::Contains("metrics.listen") &&
                 !Catch::Contains("max_message_bytes"));
  next = Base();
  next.max_message_bytes = 4096;
  CHECK(DescribeReload(Base(), next).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  next = Base();
  next.unix_socket.mode = 0600;
  CHECK_THAT(std::string(DescribeReload(Base(), next).status().message()),
             Catch::Contains("unix_socket.mode (running \"0660\", file says "
                             "\"0600\")"));
}

TEST_CASE("A reload summary says what changes") {
  CHECK(*DescribeReload(Base(), Base()) == "no changes");
  AggregatorConfig next = Base();
  next.learners = {{"b", HostPort::Tcp("127.0.0.1", 3)},
                   {"c", HostPort::Tcp("127.0.0.1", 4)}};
  next.workers[0].replicas = 3;
  aggregator::WorkerSpec extra;
  extra.name = "x";
  next.workers.push_back(extra);
  next.service.call_timeout = std::chrono::seconds(5);
  next.log.level = "debug";
  next.connect.backoff.jitter = 0;
  next.connect.resource_refresh = std::chrono::milliseconds(250);
  auto summary = DescribeReload(Base(), next);
  REQUIRE(summary.ok());
  CHECK(*summary ==
        "learners +1 -1 ~1; workers ~w +x; call_timeout 60000ms -> 5000ms; "
        "connect; resource_refresh 1000ms -> 250ms; log.level info -> debug");
}

TEST_CASE("Certificates may change on reload; TLS, mTLS and admin.listen not") {
  AggregatorConfig tls = Base();
  tls.tls = aggregator::ServerTlsConfig{{"/s.crt", "A"}, {"/s.key", "a"}, {}};
  AggregatorConfig rotated = tls;
  rotated.tls->cert.pem = "B";
  auto summary = DescribeReload(tls, rotated);
  REQUIRE(summary.ok());
  CHECK(*summary == "tls certificates");

  AggregatorConfig mtls = tls;
  mtls.tls->client_ca = {"/ca.crt", "C"};
  for (const auto& [from, to, words] :
       {std::make_tuple(Base(), tls, "tls (running off, file says TLS)"),
        std::make_tuple(tls, mtls, "tls (running TLS, file says mTLS)"),
        std::make_tuple(mtls, Base(), "tls (running mTLS, file says off)")}) {
    auto refused = DescribeReload(from, to);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(std::string(refused.status().message()), Catch::Contains(words));
  }
  AggregatorConfig moved = Base();
  moved.admin.listen.reset();
  auto refused = DescribeReload(Base(), moved);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("admin.listen (running '127.0.0.1:22274', file "
                             "says '')"));

  // A learner whose TLS changed reconnects: it counts as moved.
  AggregatorConfig secured = Base();
  secured.learners[0].tls = aggregator::ClientTlsConfig{};
  CHECK_THAT(*DescribeReload(Base(), secured), Catch::Contains("~1"));
}

TEST_CASE("Learner sources may change on reload; kept ones by their key") {
  aggregator::DnsSourceConfig dns;
  dns.name = "learners.test";
  dns.port = 22300;
  aggregator::OrchestratorSourceConfig orchestrator;
  orchestrator.url = "http://di-server:8080";
  orchestrator.pod_namespace = "training";
  orchestrator.name = "aggregator-0";
  AggregatorConfig running = Base();
  running.learner_sources = {dns, orchestrator};
  CHECK(*DescribeReload(running, running) == "no changes");

  AggregatorConfig next = running;
  std::get<aggregator::DnsSourceConfig>(next.learner_sources[0]).refresh =
      std::chrono::seconds(1);
  aggregator::DnsSourceConfig more = dns;
  more.name = "more.test";
  next.learner_sources.push_back(more);
  CHECK(*DescribeReload(running, next) == "learner_sources +1 -0 ~1");

  next = running;
  std::get<aggregator::OrchestratorSourceConfig>(next.learner_sources[1]).name =
      "aggregator-1";  // another source: one gone, one new
  CHECK(*DescribeReload(running, next) == "learner_sources +1 -1 ~0");

  next = running;
  std::get<aggregator::DnsSourceConfig>(next.learner_sources[0]).port =
      22301;  // other learners: one gone, one new
  CHECK(*DescribeReload(running, next) == "learner_sources +1 -1 ~0");

  next = running;
  std::swap(next.learner_sources[0], next.learner_sources[1]);
  CHECK(*DescribeReload(running, next) == "learner_sources reordered");

  // The discovered learners are called with learner_tls.
  next = running;
  next.learner_tls = aggregator::ClientTlsConfig{};
  CHECK(*DescribeReload(running, next) == "learner_tls");
}

TEST_CASE("connect.keepalive is a connect change a reload applies") {
  AggregatorConfig next = Base();
  next.connect.keepalive_time = std::chrono::seconds(3);
  CHECK(*DescribeReload(Base(), next) == "connect");
}

TEST_CASE("log.format changes on reload") {
  AggregatorConfig next = Base();
  next.log.format = "json";
  auto summary = DescribeReload(Base(), next);
  REQUIRE(summary.ok());
  CHECK(*summary == "log.format text -> json");
}

TEST_CASE("straggler.late_after changes on reload, named with both values") {
  AggregatorConfig next = Base();
  next.service.straggler.late_after = {
      aggregator::StragglerConfig::LateAfter::Mode::kFixed,
      std::chrono::milliseconds(300)};
  auto summary = DescribeReload(Base(), next);
  REQUIRE(summary.ok());
  CHECK(*summary == "straggler.late_after auto -> 300ms");
  AggregatorConfig off = Base();
  off.service.straggler.late_after.mode =
      aggregator::StragglerConfig::LateAfter::Mode::kOff;
  off.service.straggler.window = 7;
  summary = DescribeReload(next, off);
  REQUIRE(summary.ok());
  CHECK(*summary == "straggler.late_after 300ms -> off; straggler");
}
