#include "lib/base/host_port.h"

#include <catch2/catch.hpp>

namespace aggregator {
namespace {

TEST_CASE("HostPort parses the three forms and prints them back") {
  for (const char* text : {"127.0.0.1:22272", "[::1]:80", "[fe80::1%eth0]:5001",
                           "learner-0.ns:1", "unix:/run/aggregator.sock"}) {
    INFO(text);
    absl::StatusOr<HostPort> parsed = HostPort::Parse(text, false);
    REQUIRE(parsed.ok());
    CHECK(parsed->ToString() == text);
  }
  auto v6 = HostPort::Parse("[::1]:80", false);
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 80);
  auto unix = HostPort::Parse("unix:/tmp/s", false);
  REQUIRE(unix.ok());
  CHECK(unix->is_unix());
  CHECK(unix->path == "/tmp/s");
}

TEST_CASE("HostPort says what is wrong with a bad address") {
  struct Case {
    const char* text;
    const char* problem;
  };
  for (const Case& c : {
           Case{"", "empty string"},
           Case{"localhost", "missing \":port\""},
           Case{"::1:80", "needs brackets"},
           Case{"[::1]80", "missing \":port\" after \"]\""},
           Case{"http://h:1", "without a URL scheme"},
           Case{"h:0", "from 1 to 65535"},
           Case{"h:65536", "from 1 to 65535"},
           Case{"h :1", "contains \" \""},
           Case{"unix:relative", "absolute path"},
       }) {
    INFO(c.text);
    absl::StatusOr<HostPort> parsed = HostPort::Parse(c.text, false);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()),
               Catch::Contains(c.problem));
  }
  CHECK(HostPort::Parse("h:0", /*allow_port_zero=*/true).ok());
}

TEST_CASE(
    "HostPort refuses an IPv6 zone that is not an interface name, e.g. one "
    "with a newline and \"<0>\" (issue 26 item 9: forged journald lines)") {
  for (const char* text :
       {"[fe80::1%eth0.12]:1", "[fe80::1%2]:1", "[fe80::1%wlp3s0_x-y]:1"}) {
    INFO(text);
    CHECK(HostPort::Parse(text, false).ok());
  }
  struct Case {
    const char* text;
    const char* problem;
  };
  for (const Case& c : {
           Case{"[fe80::1%eth0\n<0>forged]:1",
                "the zone of \"fe80::1%eth0\\n<0>forged\" contains \"\\n\""},
           Case{"[fe80::1%a<0>]:1", "contains \"<\""},
           Case{"[fe80::1%a b]:1", "contains \" \""},
           Case{"[fe80::1%]:1",
                "the zone after \"%\" in \"fe80::1%\" is empty"},
           Case{"[fe80::1%a%b]:1", "contains \"%\""},
       }) {
    INFO(c.text);
    absl::StatusOr<HostPort> parsed = HostPort::Parse(c.text, false);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()),
               Catch::Contains(c.problem));
  }
}

TEST_CASE("HostPort knows loopback and wildcard hosts") {
  CHECK(HostPort::Tcp("127.0.0.1", 1).IsLoopback());
  CHECK(HostPort::Tcp("127.3.4.5", 1).IsLoopback());
  CHECK(HostPort::Tcp("::1", 1).IsLoopback());
  CHECK(HostPort::Tcp("localhost", 1).IsLoopback());
  CHECK(HostPort::Unix("/s").IsLoopback());
  CHECK_FALSE(HostPort::Tcp("10.0.0.1", 1).IsLoopback());
  CHECK_FALSE(HostPort::Tcp("0.0.0.0", 1).IsLoopback());
  CHECK(HostPort::Tcp("0.0.0.0", 1).IsWildcard());
  CHECK(HostPort::Tcp("::", 1).IsWildcard());
  CHECK(HostPort::Tcp("0.0.0.0", 0).WithPort(5).Dialable().ToString() ==
        "127.0.0.1:5");
  CHECK(HostPort::Tcp("::", 0).WithPort(5).Dialable().ToString() == "[::1]:5");
  CHECK(HostPort::Tcp("10.0.0.1", 7).Dialable().ToString() == "10.0.0.1:7");
}

}  // namespace
}  // namespace aggregator
