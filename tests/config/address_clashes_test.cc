// Which addresses of one configuration collide: listeners on one socket, a
// listener inside a worker's ports, a learner that is a listener of this
// daemon or a replica of a learner worker; and which listeners may not be
// served in plaintext. Each clash reported once, at the later party, with the
// key and the message the loader prints.
#include "lib/config/address_clashes.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace aggregator {
namespace {

HostPort Tcp(const std::string& host, int port) {
  return HostPort::Tcp(host, port);
}

// The defaults: listen 127.0.0.1:22272, metrics 22273, admin 22274.
AggregatorConfig Defaults() { return AggregatorConfig(); }

LearnerEndpoint Learner(const std::string& id, const HostPort& address) {
  LearnerEndpoint learner;
  learner.id = id;
  learner.address = address;
  return learner;
}

WorkerSpec Worker(const std::string& name, int port_base, int replicas,
                  bool learner) {
  WorkerSpec worker;
  worker.name = name;
  worker.port_base = port_base;
  worker.replicas = replicas;
  worker.learner = learner;
  return worker;
}

// "metrics.listen: the same socket as ...", one line per clash.
std::vector<std::string> Lines(const AggregatorConfig& config) {
  std::vector<std::string> lines;
  for (const AddressClash& clash : FindAddressClashes(config)) {
    lines.push_back(clash.user_key + ": " + clash.message);
  }
  return lines;
}

TEST_CASE("The default addresses do not collide") {
  CHECK(FindAddressClashes(Defaults()).empty());
}

TEST_CASE(
    "Two listeners on one socket clash once, at the later of the two, "
    "naming the earlier") {
  AggregatorConfig config = Defaults();
  config.metrics.listen = Tcp("127.0.0.1", 22272);
  const std::vector<AddressClash> clashes = FindAddressClashes(config);
  REQUIRE(clashes.size() == 1);
  CHECK(clashes[0].user.kind == AddressUser::kMetricsListen);
  CHECK(clashes[0].other.kind == AddressUser::kListen);
  CHECK(clashes[0].user_key == "metrics.listen");
  CHECK(clashes[0].message ==
        "the same socket as listen (\"127.0.0.1:22272\"): each listener needs "
        "its own");

  // localhost is 127.0.0.1; admin.listen meets both others.
  config.admin.listen = Tcp("localhost", 22272);
  CHECK(Lines(config) ==
        std::vector<std::string>{
            "metrics.listen: the same socket as listen (\"127.0.0.1:22272\"): "
            "each listener needs its own",
            "admin.listen: the same socket as listen (\"127.0.0.1:22272\"): "
            "each listener needs its own",
            "admin.listen: the same socket as metrics.listen "
            "(\"127.0.0.1:22272\"): each listener needs its own"});
}

TEST_CASE("Which hosts and ports share a socket") {
  AggregatorConfig config = Defaults();
  config.admin.listen.reset();
  auto clashes_with = [&config](const HostPort& listen,
                                const HostPort& metrics) {
    config.listen = listen;
    config.metrics.listen = metrics;
    return !FindAddressClashes(config).empty();
  };
  // A wildcard takes the port on every address.
  CHECK(clashes_with(Tcp("0.0.0.0", 9000), Tcp("127.0.0.1", 9000)));
  CHECK(clashes_with(Tcp("10.0.0.5", 9000), Tcp("::", 9000)));
  CHECK(clashes_with(Tcp("::1", 9000), Tcp("localhost", 9000)));
  CHECK(clashes_with(HostPort::Unix("/run/a.sock"),
                     HostPort::Unix("/run/a.sock")));
  // Other ports, other addresses, other families, or port 0 (each its own).
  CHECK_FALSE(clashes_with(Tcp("127.0.0.1", 9000), Tcp("127.0.0.1", 9001)));
  CHECK_FALSE(clashes_with(Tcp("127.0.0.1", 9000), Tcp("127.0.0.2", 9000)));
  CHECK_FALSE(clashes_with(Tcp("127.0.0.1", 9000), Tcp("::1", 9000)));
  CHECK_FALSE(clashes_with(Tcp("127.0.0.1", 0), Tcp("127.0.0.1", 0)));
  CHECK_FALSE(clashes_with(HostPort::Unix("/run/a.sock"),
                           HostPort::Unix("/run/b.sock")));
  CHECK_FALSE(
      clashes_with(HostPort::Unix("/run/a.sock"), Tcp("0.0.0.0", 9000)));
}

TEST_CASE(
    "A worker's ports that include a listener's port clash at its port_base, "
    "whatever address the listener binds") {
  AggregatorConfig config = Defaults();
  config.listen = Tcp("10.0.0.5", 22272);
  config.workers = {Worker("sim", 22270, 3, false)};
  const std::vector<AddressClash> clashes = FindAddressClashes(config);
  REQUIRE(clashes.size() == 1);
  CHECK(clashes[0].user.kind == AddressUser::kWorker);
  CHECK(clashes[0].user.index == 0);
  CHECK(clashes[0].other.kind == AddressUser::kListen);
  CHECK(clashes[0].user_key == "workers[0].port_base");
  CHECK(clashes[0].message ==
        "ports 22270-22272 of worker \"sim\" include the port of listen "
        "(\"10.0.0.5:22272\")");

  // One port short of it; a worker without replicas or without port_base.
  config.workers = {Worker("a", 22270, 2, false), Worker("b", 22272, 0, false),
                    Worker("c", 0, 5, false)};
  CHECK(FindAddressClashes(config).empty());
  // The range's last port is metrics.listen's.
  config.workers = {Worker("a", 22270, 2, false), Worker("d", 22273, 1, true)};
  CHECK(Lines(config) ==
        std::vector<std::string>{
            "workers[1].port_base: ports 22273-22273 of worker \"d\" include "
            "the port of metrics.listen (\"127.0.0.1:22273\")"});
}

TEST_CASE(
    "A listed learner that is one of this daemon's listeners clashes: its "
    "calls would come back") {
  AggregatorConfig config = Defaults();
  config.learners = {Learner("a", Tcp("10.0.0.9", 22300)),
                     Learner("me", Tcp("localhost", 22274))};
  const std::vector<AddressClash> clashes = FindAddressClashes(config);
  REQUIRE(clashes.size() == 1);
  CHECK(clashes[0].user.kind == AddressUser::kLearner);
  CHECK(clashes[0].user.index == 1);
  CHECK(clashes[0].other.kind == AddressUser::kAdminListen);
  CHECK(clashes[0].user_key == "learners[1].address");
  CHECK(clashes[0].message ==
        "\"localhost:22274\" is this aggregator's own admin.listen: its calls "
        "would come back here; remove it");

  // A wildcard listener answers on every loopback address, not on another
  // host's.
  config.listen = Tcp("0.0.0.0", 22272);
  config.learners = {Learner("loop", Tcp("127.0.0.1", 22272)),
                     Learner("remote", Tcp("10.1.2.3", 22272)),
                     Learner("other-loopback", Tcp("127.0.0.2", 22273))};
  CHECK(Lines(config) ==
        std::vector<std::string>{
            "learners[0].address: \"127.0.0.1:22272\" is this aggregator's "
            "own listen: its calls would come back here; remove it"});

  // A unix socket learner on listen's path.
  config.listen = HostPort::Unix("/run/agg.sock");
  config.learners = {Learner("u", HostPort::Unix("/run/agg.sock")),
                     Learner("v", HostPort::Unix("/run/learner.sock"))};
  CHECK(Lines(config) ==
        std::vector<std::string>{
            "learners[0].address: \"unix:/run/agg.sock\" is this aggregator's "
            "own listen: its calls would come back here; remove it"});
}

TEST_CASE(
    "A listed learner on a learner worker's replica port clashes: the "
    "replica joins by itself") {
  AggregatorConfig config = Defaults();
  config.workers = {Worker("plain", 23100, 2, false),
                    Worker("sim", 23000, 2, true)};
  config.learners = {Learner("x", Tcp("127.0.0.1", 23001)),
                     Learner("past", Tcp("127.0.0.1", 23002)),
                     Learner("plain", Tcp("127.0.0.1", 23100)),
                     Learner("remote", Tcp("10.0.0.1", 23000))};
  const std::vector<AddressClash> clashes = FindAddressClashes(config);
  REQUIRE(clashes.size() == 1);
  CHECK(clashes[0].user.kind == AddressUser::kLearner);
  CHECK(clashes[0].user.index == 0);
  CHECK(clashes[0].other.kind == AddressUser::kWorker);
  CHECK(clashes[0].other.index == 1);
  CHECK(clashes[0].user_key == "learners[0].address");
  CHECK(clashes[0].message ==
        "\"127.0.0.1:23001\" is replica 1 of learner worker \"sim\", which "
        "joins the learners by itself as \"sim-1\"");
  config.learners = {Learner("y", Tcp("localhost", 23000))};
  CHECK(Lines(config) ==
        std::vector<std::string>{
            "learners[0].address: \"localhost:23000\" is replica 0 of learner "
            "worker \"sim\", which joins the learners by itself as "
            "\"sim-0\""});
}

TEST_CASE(
    "Plaintext is refused on an address other hosts can reach, unless tls or "
    "allow_insecure") {
  AggregatorConfig config = Defaults();
  CHECK(PlaintextRefusal(config, Tcp("127.0.0.1", 22272)).empty());
  CHECK(PlaintextRefusal(config, Tcp("localhost", 22272)).empty());
  CHECK(PlaintextRefusal(config, HostPort::Unix("/run/a.sock")).empty());
  CHECK(PlaintextRefusal(config, Tcp("0.0.0.0", 22272)) ==
        "plaintext on \"0.0.0.0:22272\", which other hosts can reach: set tls "
        "(cert and key), or allow_insecure: true to accept it");
  CHECK(PlaintextRefusal(config, Tcp("fd00::1", 1)) ==
        "plaintext on \"[fd00::1]:1\", which other hosts can reach: set tls "
        "(cert and key), or allow_insecure: true to accept it");
  config.allow_insecure = true;
  CHECK(PlaintextRefusal(config, Tcp("0.0.0.0", 22272)).empty());
  config.allow_insecure = false;
  config.tls = ServerTlsConfig();
  CHECK(PlaintextRefusal(config, Tcp("0.0.0.0", 22272)).empty());
}

}  // namespace
}  // namespace aggregator
