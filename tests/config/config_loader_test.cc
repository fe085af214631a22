#include "lib/config/config_loader.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "tests/testing/tls_certificates.h"

namespace aggregator {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using std::chrono::milliseconds;

constexpr char kSource[] = "test.yaml";

AggregatorConfig Parse(const std::string& yaml) {
  absl::StatusOr<AggregatorConfig> config = ParseConfig(yaml, kSource);
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  return *config;
}

// The error lines for `yaml`, which must be invalid.
std::vector<std::string> Errors(const std::string& yaml) {
  absl::StatusOr<AggregatorConfig> config = ParseConfig(yaml, kSource);
  REQUIRE_FALSE(config.ok());
  REQUIRE(config.status().code() == absl::StatusCode::kInvalidArgument);
  return absl::StrSplit(config.status().message(), '\n');
}

// The one error for `yaml`.
std::string Error(const std::string& yaml) {
  std::vector<std::string> errors = Errors(yaml);
  INFO(Catch::rangeToString(errors));
  REQUIRE(errors.size() == 1);
  return errors[0];
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh directory under the test's temporary directory.
std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      std::string(base != nullptr ? base : "/tmp") + "/config_test.XXXXXX";
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// Each learner's id and address as written.
using LearnerText = std::pair<std::string, std::string>;
std::vector<LearnerText> Learners(const AggregatorConfig& config) {
  std::vector<LearnerText> out;
  for (const LearnerEndpoint& learner : config.learners) {
    out.emplace_back(learner.id, learner.address.ToString());
  }
  return out;
}

void CheckDefaults(const AggregatorConfig& config) {
  CHECK(config.listen.ToString() == "127.0.0.1:22272");
  CHECK(config.service.min_learners == 1);
  CHECK(config.connect.timeout == milliseconds(30000));
  CHECK(config.connect.attempt_timeout == milliseconds(20000));
  CHECK(config.connect.backoff.initial == milliseconds(1000));
  CHECK(config.connect.backoff.multiplier == 1.6);
  CHECK(config.connect.backoff.jitter == 0.2);
  CHECK(config.connect.backoff.max == milliseconds(120000));
  CHECK(config.service.call_timeout == milliseconds(60000));
  CHECK(config.max_message_bytes == 1073741824);
  CHECK(config.service.merge.homogeneous_keys ==
        std::vector<std::string>{"learner_step", "buffer_id", "task_id",
                                 "learner_done"});
  CHECK(config.log.level == "info");
  CHECK(config.connect.keepalive_time == milliseconds(10000));
  CHECK(config.connect.keepalive_timeout == milliseconds(5000));
  CHECK(config.learner_sources.empty());
}

TEST_CASE("An empty or comment-only text is the default configuration",
          "[config]") {
  for (const char* yaml : {"", "\n", "# nothing but comments\n  # here\n",
                           "---\n", "~\n", "connect:\nmerge:\nlog:\n"}) {
    INFO("yaml: " << yaml);
    AggregatorConfig config = Parse(yaml);
    CHECK(config.source == "test.yaml");
    CHECK(config.learners.empty());
    CheckDefaults(config);
  }
}

TEST_CASE("The embedded default is config/aggregator.yaml and is valid",
          "[config]") {
  // The file is a data dependency; the test runs at the workspace root.
  CHECK(DefaultConfigYaml() == ReadText("config/aggregator.yaml"));
  CHECK_THAT(
      std::string(DefaultConfigYaml()),
      StartsWith("# yaml-language-server: $schema=aggregator.schema.json\n"
                 "# aggregatord configuration"));

  absl::StatusOr<AggregatorConfig> config =
      ParseConfig(DefaultConfigYaml(), "<embedded default>");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->source == "<embedded default>");
  CHECK(config->learners.empty());
  // Two example learners as local workers, written out with every default.
  WorkerSpec learner;
  learner.name = "learner";
  learner.command = {"tools/examples/example_learner", "--listen",
                     "127.0.0.1:{port}"};
  learner.replicas = 2;
  learner.port_base = 22300;
  learner.learner = true;
  CHECK(config->workers == std::vector<WorkerSpec>{learner});
  CheckDefaults(*config);
}

TEST_CASE("Every field is read", "[config]") {
  AggregatorConfig config = Parse(R"(
listen: "[::1]:0"
learners:
  - id: a
    address: "10.0.0.1:5000"
  - address: "[fe80::1%eth0]:5001"
    id: b
  - {id: c, address: "unix:/run/learner.sock"}
min_learners: 3
connect:
  timeout: 2m
  attempt_timeout: 1.5s
  backoff:
    initial: 250ms
    multiplier: 2
    jitter: 0
    max: 1h
call_timeout: 90s
max_message_bytes: 512MiB
merge:
  homogeneous_keys: [step, "task id"]
log:
  level: debug
)");
  CHECK(config.listen.ToString() == "[::1]:0");
  CHECK(Learners(config) ==
        std::vector<LearnerText>{{"a", "10.0.0.1:5000"},
                                 {"b", "[fe80::1%eth0]:5001"},
                                 {"c", "unix:/run/learner.sock"}});
  CHECK(config.service.min_learners == 3);
  CHECK(config.connect.timeout == milliseconds(120000));
  CHECK(config.connect.attempt_timeout == milliseconds(1500));
  CHECK(config.connect.backoff.initial == milliseconds(250));
  CHECK(config.connect.backoff.multiplier == 2.0);
  CHECK(config.connect.backoff.jitter == 0.0);
  CHECK(config.connect.backoff.max == milliseconds(3600000));
  CHECK(config.service.call_timeout == milliseconds(90000));
  CHECK(config.max_message_bytes == 536870912);
  CHECK(config.service.merge.homogeneous_keys ==
        std::vector<std::string>{"step", "task id"});
  CHECK(config.log.level == "debug");
}

TEST_CASE("Omitted keys keep their defaults next to written ones", "[config]") {
  AggregatorConfig config = Parse(
      "connect:\n"
      "  backoff:\n"
      "    jitter: 1\n"
      "merge:\n"
      "  homogeneous_keys: []\n");
  CHECK(config.connect.backoff.jitter == 1.0);
  CHECK(config.connect.backoff.initial == milliseconds(1000));
  CHECK(config.connect.backoff.multiplier == 1.6);
  CHECK(config.connect.timeout == milliseconds(30000));
  CHECK(config.service.merge.homogeneous_keys.empty());
  CHECK(config.service.min_learners == 1);
  CHECK(config.listen.ToString() == "127.0.0.1:22272");
}

TEST_CASE("Durations take a unit and millisecond resolution", "[config]") {
  struct Case {
    const char* text;
    int64_t ms;
  };
  for (Case c :
       {Case{"250ms", 250}, Case{"30s", 30000}, Case{"1.5s", 1500},
        Case{"2m", 120000}, Case{"1h", 3600000}, Case{"1h30m", 5400000},
        Case{"1000us", 1}, Case{"8760h", 31536000000}}) {
    INFO(c.text);
    CHECK(Parse(std::string("call_timeout: ") + c.text).service.call_timeout ==
          milliseconds(c.ms));
  }
}

TEST_CASE("Bad durations name the field and position", "[config]") {
  CHECK(Error("call_timeout: 30") ==
        "test.yaml:1:15: call_timeout: \"30\" has no unit; durations need one, "
        "e.g. \"30s\" or \"30ms\"");
  CHECK(Error("call_timeout: -5s") ==
        "test.yaml:1:15: call_timeout: must be positive, got \"-5s\"");
  CHECK(Error("call_timeout: 0s") ==
        "test.yaml:1:15: call_timeout: must be positive, got \"0s\"");
  CHECK_THAT(
      Error("connect:\n  timeout: soon\n"),
      StartsWith("test.yaml:2:12: connect.timeout: expected a duration "
                 "with a unit (us, ms, s, m, h), e.g. \"30s\" or \"250ms\", "
                 "got \"soon\""));
  CHECK_THAT(Error("connect:\n  backoff:\n    initial: 100us\n"),
             StartsWith("test.yaml:3:14: connect.backoff.initial: must be from "
                        "1ms to 8760h"));
  CHECK_THAT(
      Error("call_timeout: 8761h"),
      StartsWith("test.yaml:1:15: call_timeout: must be from 1ms to 8760h"));
  CHECK_THAT(Error("call_timeout: inf"),
             StartsWith("test.yaml:1:15: call_timeout: must be from 1ms"));
  CHECK_THAT(Error("connect:\n  attempt_timeout: [1s]\n"),
             StartsWith("test.yaml:2:20: connect.attempt_timeout: expected a "
                        "duration") &&
                 Contains("got a list"));
}

TEST_CASE("max_message_bytes takes bytes or a binary unit", "[config]") {
  struct Case {
    const char* text;
    int64_t bytes;
  };
  for (Case c :
       {Case{"1024", 1024}, Case{"1KiB", 1024}, Case{"\"2048B\"", 2048},
        Case{"512 MiB", 536870912}, Case{"1GiB", 1073741824},
        Case{"2147483647", 2147483647}, Case{"2047MiB", 2146435072}}) {
    INFO(c.text);
    CHECK(
        Parse(std::string("max_message_bytes: ") + c.text).max_message_bytes ==
        c.bytes);
  }
  CHECK(Error("max_message_bytes: 1023") ==
        "test.yaml:1:20: max_message_bytes: must be from 1024 to "
        "2147483647 (1KiB to 2GiB - 1), got 1023");
  CHECK(Error("max_message_bytes: 2GiB") ==
        "test.yaml:1:20: max_message_bytes: must be from 1024 to "
        "2147483647 (1KiB to 2GiB - 1), got \"2GiB\"");
  CHECK_THAT(
      Error("max_message_bytes: 99999999999999999999GiB"),
      StartsWith("test.yaml:1:20: max_message_bytes: must be from 1024"));
  CHECK_THAT(
      Error("max_message_bytes: -1"),
      StartsWith("test.yaml:1:20: max_message_bytes: must be from 1024"));
  for (const char* bad : {"1MB", "1.5GiB", "GiB", "lots", "1 GB"}) {
    INFO(bad);
    CHECK_THAT(
        Error(std::string("max_message_bytes: ") + bad),
        StartsWith("test.yaml:1:20: max_message_bytes: expected a byte "
                   "count such as 1073741824 or \"1GiB\" (units: B, KiB, "
                   "MiB, GiB, TiB), got \"" +
                   std::string(bad) + "\""));
  }
}

TEST_CASE("max_inflight_bytes takes bytes or auto", "[config]") {
  CHECK_FALSE(Parse("").service.max_inflight_bytes.has_value());
  CHECK_FALSE(
      Parse("max_inflight_bytes: auto").service.max_inflight_bytes.has_value());
  CHECK(Parse("max_inflight_bytes: 6GiB").service.max_inflight_bytes ==
        int64_t{6} << 30);
  CHECK(Parse("max_inflight_bytes: 2TiB").service.max_inflight_bytes ==
        int64_t{2} << 40);
  CHECK(Error("max_inflight_bytes: 0") ==
        "test.yaml:1:21: max_inflight_bytes: must be from 1024 to "
        "1125899906842624 (1KiB to 1024TiB, or auto), got 0");
  CHECK_THAT(Error("max_inflight_bytes: plenty"),
             StartsWith("test.yaml:1:21: max_inflight_bytes: expected a byte "
                        "count"));
}

TEST_CASE("Addresses are host:port, [v6]:port or unix:/path", "[config]") {
  for (const char* good :
       {"127.0.0.1:1", "localhost:65535", "learner-0.example.com:22300",
        "my_host:80", "[::1]:22300", "[2001:db8::7]:443", "unix:/tmp/l.sock"}) {
    INFO(good);
    // Apart: a learner at the daemon's own listen is a loop.
    CHECK(Parse(std::string("listen: \"") + good + "\"\nallow_insecure: true\n")
              .listen.ToString() == good);
    CHECK(Parse(std::string("learners: [{id: x, address: \"") + good + "\"}]")
              .learners.at(0)
              .address.ToString() == good);
  }
  // Only the listen address may ask for any free port.
  CHECK(Parse("listen: 0.0.0.0:0\nallow_insecure: true").listen.ToString() ==
        "0.0.0.0:0");

  struct Case {
    const char* address;
    const char* problem;
  };
  for (Case c : {
           Case{"",
                "expected \"host:port\", \"[v6]:port\" or \"unix:/path\", got "
                "an empty string"},
           Case{"127.0.0.1", "missing \":port\""},
           Case{":22300", "the host is empty"},
           Case{"::1:22300",
                "an IPv6 host needs brackets, e.g. \"[::1]:22300\""},
           Case{"host:0",
                "the port must be a number from 1 to 65535, got \"0\""},
           Case{"host:65536",
                "the port must be a number from 1 to 65535, got \"65536\""},
           Case{"host:http",
                "the port must be a number from 1 to 65535, got \"http\""},
           Case{"host:", "the port must be a number from 1 to 65535, got \"\""},
           Case{"host:-1",
                "the port must be a number from 1 to 65535, got \"-1\""},
           Case{"ho st:1", "the host \"ho st\" contains \" \""},
           Case{"http://host:80",
                "expected \"host:port\" without a URL scheme"},
           Case{"[::1]22300", "missing \":port\" after \"]\""},
           Case{"[::1:22300", "missing \"]\" after the IPv6 host"},
           Case{"[]:1", "the host between \"[\" and \"]\" is empty"},
           Case{"[host]:1", "\"host\" is not an IPv6 address"},
           Case{"unix:",
                "a unix socket address is \"unix:\" and an absolute "
                "path, e.g. \"unix:/run/aggregator.sock\""},
           Case{"unix:relative.sock",
                "a unix socket address is \"unix:\" and "
                "an absolute path, e.g. "
                "\"unix:/run/aggregator.sock\""},
       }) {
    INFO(c.address);
    // Line 3, column 14: the quoted value after "    address: ".
    CHECK(Error(std::string("learners:\n  - id: a\n    address: \"") +
                c.address + "\"\n") ==
          std::string("test.yaml:3:14: learners[0].address: "
                      "bad address \"") +
              c.address + "\": " + c.problem);
  }
  CHECK(Error("listen: 127.0.0.1") ==
        "test.yaml:1:9: listen: bad address \"127.0.0.1\": missing \":port\"");
  CHECK(Error("listen: 127.0.0.1:70000") ==
        "test.yaml:1:9: listen: bad address \"127.0.0.1:70000\": the port must "
        "be "
        "a number from 0 to 65535, got \"70000\"");
}

TEST_CASE("A YAML syntax error points at the parser's position", "[config]") {
  CHECK_THAT(
      Error("listen: \"127.0.0.1:1\"\nlearners: [{id: a\nmin_learners: 1\n"),
      StartsWith("test.yaml:3:13: YAML syntax error: "));
  CHECK(Error("connect:\n  timeout: 1s\n    backoff: 2\n") ==
        "test.yaml:3:12: YAML syntax error: illegal map value");
}

TEST_CASE("Unknown keys are reported at the key with the allowed keys",
          "[config]") {
  CHECK(Error("listen: \"127.0.0.1:1\"\nlisten_port: 5\n") ==
        "test.yaml:2:1: listen_port: unknown key; allowed here: listen, tls, "
        "learner_tls, allow_insecure, admin, learners, workers, "
        "learner_sources, min_learners, "
        "connect, call_timeout, resource_refresh, "
        "drain_timeout, metrics, unix_socket, max_message_bytes, "
        "on_learner_failure, straggler, max_inflight_bytes, "
        "merge, log");
  CHECK(Error("connect:\n  backoff:\n    jiter: 0.1\n") ==
        "test.yaml:3:5: connect.backoff.jiter: unknown key; allowed here: "
        "initial, multiplier, jitter, max");
  CHECK(Error("learners:\n  - id: a\n    adress: \"h:1\"\n    address: "
              "\"h:1\"\n") ==
        "test.yaml:3:5: learners[0].adress: unknown key; allowed here: id, "
        "address, tls");
  CHECK(Error("log: {level: info, file: x}") ==
        "test.yaml:1:20: log.file: unknown key; allowed here: level, format");
  CHECK(
      Error("merge:\n  keys: [a]\n") ==
      "test.yaml:2:3: merge.keys: unknown key; allowed here: homogeneous_keys, "
      "per_sample_keys");
  CHECK(Error("[a]: 1\n") == "test.yaml:1:1: keys must be names, got a list");
}

TEST_CASE("A key given twice is an error naming both", "[config]") {
  CHECK(Error("call_timeout: 1s\nlog: {level: info}\ncall_timeout: 2s\n") ==
        "test.yaml:3:1: call_timeout: duplicate key, first at 1:1");
}

TEST_CASE("Wrong types say what was expected and what was found", "[config]") {
  CHECK(Error("listen: {host: a, port: 1}") ==
        "test.yaml:1:9: listen: expected a string, got a map");
  CHECK(Error("min_learners: abc") ==
        "test.yaml:1:15: min_learners: expected an integer, got \"abc\"");
  CHECK(Error("min_learners: 1.5") ==
        "test.yaml:1:15: min_learners: expected an integer, got \"1.5\"");
  CHECK(Error("learners: learner0") ==
        "test.yaml:1:11: learners: expected a list, got \"learner0\"");
  CHECK(
      Error("learners:\n  - learner0\n") ==
      "test.yaml:2:5: learners[0]: expected a map with \"id\" and \"address\", "
      "got \"learner0\"");
  CHECK(Error("connect: 30s") ==
        "test.yaml:1:10: connect: expected a map, got \"30s\"");
  CHECK(Error("connect:\n  backoff:\n    multiplier: fast\n") ==
        "test.yaml:3:17: connect.backoff.multiplier: expected a number, got "
        "\"fast\"");
  CHECK(Error("merge:\n  homogeneous_keys: [a, [b]]\n") ==
        "test.yaml:2:25: merge.homogeneous_keys[1]: expected a string, got a "
        "list");
  CHECK(
      Errors("merge:\n  homogeneous_keys: [a, \"\", a]\n") ==
      std::vector<std::string>{
          "test.yaml:2:25: merge.homogeneous_keys[1]: must not be empty",
          "test.yaml:2:29: merge.homogeneous_keys[2]: duplicate entry \"a\""});
  CHECK(Error("merge:\n  homogeneous_keys: task_id\n") ==
        "test.yaml:2:21: merge.homogeneous_keys: expected a list, got "
        "\"task_id\"");
  CHECK(Error("- listen\n- learners\n") ==
        "test.yaml:1:1: expected a map of settings (key: value), got a list");
  CHECK(Error("just text\n") ==
        "test.yaml:1:1: expected a map of settings (key: value), got \"just "
        "text\"");
  // An empty value has no position of its own: the error points at its key.
  CHECK(Error("log:\n  level:\n") ==
        "test.yaml:2:3: log.level: expected a string, got nothing");
}

TEST_CASE("Out-of-range numbers are rejected", "[config]") {
  CHECK(Error("connect:\n  backoff:\n    jitter: 1.5\n") ==
        "test.yaml:3:13: connect.backoff.jitter: must be from 0 to 1, got 1.5");
  CHECK(
      Error("connect:\n  backoff:\n    jitter: -0.1\n") ==
      "test.yaml:3:13: connect.backoff.jitter: must be from 0 to 1, got -0.1");
  CHECK(Error("connect:\n  backoff:\n    multiplier: 0.5\n") ==
        "test.yaml:3:17: connect.backoff.multiplier: must be at least 1, got "
        "0.5");
  CHECK(Error("connect:\n  backoff:\n    multiplier: .nan\n") ==
        "test.yaml:3:17: connect.backoff.multiplier: expected a number, got "
        "\".nan\"");
  CHECK(Error("min_learners: -1") ==
        "test.yaml:1:15: min_learners: must be from 0 to 2147483647, got -1");
  CHECK(Error("log: {level: verbose}") ==
        "test.yaml:1:14: log.level: expected one of trace, debug, info, warn, "
        "error, critical, off, got \"verbose\"");
}

TEST_CASE("backoff.max must not be below backoff.initial", "[config]") {
  CHECK(Error("connect:\n  backoff:\n    initial: 10s\n    max: 5s\n") ==
        "test.yaml:4:10: connect.backoff.max: must be at least "
        "connect.backoff.initial (10s), got 5s");
  CHECK(Error("connect:\n  backoff:\n    initial: 3m\n") ==
        "test.yaml:3:14: connect.backoff.initial: must be at most "
        "connect.backoff.max (2m, the default), got 3m");
  // An invalid max is reported once, not also compared.
  CHECK(Error("connect:\n  backoff:\n    initial: 200s\n    max: soon\n") ==
        "test.yaml:4:10: connect.backoff.max: expected a duration with a unit "
        "(us, ms, s, m, h), e.g. \"30s\" or \"250ms\", got \"soon\"");
  CHECK(
      Parse("connect: {backoff: {initial: 5s, max: 5s}}").connect.backoff.max ==
      milliseconds(5000));
}

TEST_CASE("Learners need a unique id and an address", "[config]") {
  const std::vector<std::string> errors = Errors(
      "learners:\n"
      "  - id: learner0\n"
      "    address: \"h:1\"\n"
      "  - id: learner1\n"
      "    address: \"h:2\"\n"
      "  - id: learner0\n"
      "    address: \"h:3\"\n");
  REQUIRE(errors.size() == 1);
  CHECK(
      errors[0] ==
      "test.yaml:6:9: learners[2].id: duplicate learner id \"learner0\", first "
      "at 2:9");

  CHECK(
      Error("learners:\n  - address: \"h:1\"\n") ==
      "test.yaml:2:5: learners[0]: missing \"id\" (a unique, non-empty name)");
  CHECK(Error("learners:\n  - id: a\n") ==
        "test.yaml:2:5: learners[0]: missing \"address\" (\"host:port\", "
        "\"[v6]:port\" or \"unix:/path\")");
  CHECK(Error("learners:\n  - id: \"\"\n    address: \"h:1\"\n") ==
        "test.yaml:2:9: learners[0].id: must not be empty");
  CHECK(Error("learners: [{id: [a], address: \"h:1\"}]") ==
        "test.yaml:1:17: learners[0].id: expected a string, got a list");
  CHECK(Error("learners:\n  -\n") ==
        "test.yaml:2:3: learners[0]: expected a map with \"id\" and "
        "\"address\", got nothing");
  // An empty `learners:` is an empty list.
  CHECK(Parse("learners:\nmin_learners: 0\n").learners.empty());
}

TEST_CASE("min_learners cannot exceed the learners listed", "[config]") {
  CHECK(Error("learners:\n  - {id: a, address: \"h:1\"}\nmin_learners: 2\n") ==
        "test.yaml:3:15: min_learners: 2 is more than the number of learners "
        "listed (1)");
  CHECK(Error("min_learners: 1") ==
        "test.yaml:1:15: min_learners: 1 is more than the number of learners "
        "listed (0)");
  CHECK(Parse("min_learners: 0").service.min_learners == 0);
  // Left at its default, it is not checked: learners may be added on reload.
  CHECK(Parse("learners: []").service.min_learners == 1);
}

TEST_CASE("Every error is reported, in document order", "[config]") {
  const std::vector<std::string> errors = Errors(
      "min_learners: 5\n"                   // 1: more than the 2 learners
      "listen: 127.0.0.1\n"                 // 2: no port
      "learners:\n"                         // 3
      "  - id: a\n"                         // 4
      "    address: \"h:0\"\n"              // 5: port 0
      "  - id: a\n"                         // 6: duplicate id
      "    address: \"h:1\"\n"              // 7
      "connect:\n"                          // 8
      "  timeout: 30\n"                     // 9: no unit
      "  backoff: {jitter: 2, bogus: 1}\n"  // 10: range, unknown key
      "call_timeout: 1s\n"                  // 11
      "call_timeout: 2s\n"                  // 12: duplicate key
      "log: {level: loud}\n");              // 13: not a level
  INFO(Catch::rangeToString(errors));
  REQUIRE(errors.size() == 9);
  CHECK_THAT(errors[0], StartsWith("test.yaml:1:15: min_learners: 5 is more"));
  CHECK_THAT(errors[1], StartsWith("test.yaml:2:9: listen: bad address"));
  CHECK_THAT(errors[2],
             StartsWith("test.yaml:5:14: learners[0].address: bad "));
  CHECK_THAT(errors[3],
             StartsWith("test.yaml:6:9: learners[1].id: duplicate "));
  CHECK_THAT(errors[4],
             StartsWith("test.yaml:9:12: connect.timeout: \"30\" has"));
  CHECK_THAT(
      errors[5],
      StartsWith("test.yaml:10:21: connect.backoff.jitter: must be from"));
  CHECK_THAT(errors[6],
             StartsWith("test.yaml:10:24: connect.backoff.bogus: unknown key"));
  CHECK_THAT(errors[7],
             StartsWith("test.yaml:12:1: call_timeout: duplicate key"));
  CHECK_THAT(errors[8],
             StartsWith("test.yaml:13:14: log.level: expected one of"));
}

TEST_CASE("Workers: every field is read", "[config][workers]") {
  AggregatorConfig config = Parse(R"(
learners:
  - {id: remote, address: "h:1"}
workers:
  - name: learner
    command: [bin/learner, --port, "{port}", --rank, "{index}"]
    replicas: 3
    env: {RANK: "{index}", TAG: "{name}-x", EMPTY: ""}
    cwd: /var/lib/{name}
    port_base: 22300
    restart: always
    backoff: {initial: 250ms, multiplier: 1.5, max: 1m}
    max_restarts: 0
    restart_window: 5m
    min_uptime: 2s
    stop_timeout: 500ms
    learner: true
  - name: helper.v2_x-1
    command: [sleep, "1000"]
    restart: never
    learner: False
min_learners: 4
)");
  REQUIRE(config.workers.size() == 2);
  const WorkerSpec& learner = config.workers[0];
  CHECK(learner.name == "learner");
  CHECK(learner.command == std::vector<std::string>{"bin/learner", "--port",
                                                    "{port}", "--rank",
                                                    "{index}"});
  CHECK(learner.replicas == 3);
  CHECK(learner.env ==
        std::vector<std::pair<std::string, std::string>>{
            {"RANK", "{index}"}, {"TAG", "{name}-x"}, {"EMPTY", ""}});
  CHECK(learner.cwd == "/var/lib/{name}");
  CHECK(learner.port_base == 22300);
  CHECK(learner.restart == RestartPolicy::kAlways);
  CHECK(learner.backoff.initial == milliseconds(250));
  CHECK(learner.backoff.multiplier == 1.5);
  CHECK(learner.backoff.max == milliseconds(60000));
  CHECK(learner.max_restarts == 0);
  CHECK(learner.restart_window == milliseconds(300000));
  CHECK(learner.min_uptime == milliseconds(2000));
  CHECK(learner.stop_timeout == milliseconds(500));
  CHECK(learner.learner);
  const WorkerSpec& helper = config.workers[1];
  CHECK(helper.name == "helper.v2_x-1");
  CHECK(helper.restart == RestartPolicy::kNever);
  CHECK_FALSE(helper.learner);
  // 1 listed + 3 learner replicas.
  CHECK(config.service.min_learners == 4);
}

TEST_CASE("Workers: omitted fields take their defaults", "[config][workers]") {
  AggregatorConfig config = Parse("workers:\n  - {name: w, command: [true]}\n");
  REQUIRE(config.workers.size() == 1);
  const WorkerSpec& w = config.workers[0];
  CHECK(w.command == std::vector<std::string>{"true"});
  CHECK(w.replicas == 1);
  CHECK(w.env.empty());
  CHECK(w.cwd.empty());
  CHECK(w.port_base == 0);
  CHECK(w.restart == RestartPolicy::kOnFailure);
  CHECK(w.backoff ==
        BackoffOptions{milliseconds(1000), 2.0, 0.0, milliseconds(30000)});
  CHECK(w.max_restarts == 5);
  CHECK(w.restart_window == milliseconds(60000));
  CHECK(w.min_uptime == milliseconds(1000));
  CHECK(w.stop_timeout == milliseconds(10000));
  CHECK_FALSE(w.learner);
  CHECK(std::string(RestartPolicyName(w.restart)) == "on-failure");
  CHECK(Parse("workers:\n").workers.empty());
  CHECK(Parse("workers: []\n").workers.empty());
  // replicas: 0 keeps the worker declared but runs nothing.
  CHECK(Parse("workers: [{name: w, command: [x], replicas: 0}]")
            .workers.at(0)
            .replicas == 0);
}

TEST_CASE("Workers: names are unique and made of safe characters",
          "[config][workers]") {
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x]\n"
              "  - name: a\n"
              "    command: [y]\n") ==
        "test.yaml:4:11: workers[1].name: duplicate worker name \"a\", first "
        "at 2:11");
  CHECK(Error("workers:\n  - name: \"a b\"\n    command: [x]\n") ==
        "test.yaml:2:11: workers[0].name: \"a b\" contains \" \"; a worker "
        "name may only contain letters, digits, '_', '.' and '-'");
  CHECK(Error("workers:\n  - name: a/b\n    command: [x]\n") ==
        "test.yaml:2:11: workers[0].name: \"a/b\" contains \"/\"; a worker "
        "name may only contain letters, digits, '_', '.' and '-'");
  CHECK(Error("workers:\n  - name: \"\"\n    command: [x]\n") ==
        "test.yaml:2:11: workers[0].name: must not be empty");
  CHECK(Error("workers:\n  - command: [x]\n") ==
        "test.yaml:2:5: workers[0]: missing \"name\" (a unique name of "
        "letters, digits, '_', '.' and '-')");
  CHECK(Error("workers:\n  - name: [a]\n    command: [x]\n") ==
        "test.yaml:2:11: workers[0].name: expected a string, got a list");
}

TEST_CASE("Workers: the command is a non-empty list of strings",
          "[config][workers]") {
  CHECK(Error("workers:\n  - name: a\n") ==
        "test.yaml:2:5: workers[0]: missing \"command\" (a list: the program, "
        "then its arguments)");
  CHECK(Error("workers:\n  - name: a\n    command: \"python3 l.py\"\n") ==
        "test.yaml:3:14: workers[0].command: expected a list: the program, "
        "then its arguments (e.g. [python3, learner.py, --port, \"{port}\"]), "
        "got \"python3 l.py\"");
  CHECK(Error("workers:\n  - name: a\n    command: []\n") ==
        "test.yaml:3:14: workers[0].command: must not be empty: give the "
        "program, then its arguments");
  CHECK(Error("workers:\n  - name: a\n    command: [x, {k: v}]\n") ==
        "test.yaml:3:18: workers[0].command[1]: expected a string, got a map");
  CHECK(Error("workers:\n  - name: a\n    command: [\"\", x]\n") ==
        "test.yaml:3:15: workers[0].command[0]: the program must not be "
        "empty");
  // An empty argument after the program is fine.
  CHECK(Parse("workers: [{name: a, command: [x, \"\"]}]").workers[0].command ==
        std::vector<std::string>{"x", ""});
}

TEST_CASE("Workers: wrong types and ranges point at the value",
          "[config][workers]") {
  const std::string head = "workers:\n  - name: a\n    command: [x]\n";
  // Line 4, column 5 + key length + 2: the value after "    <key>: ".
  CHECK(Error("workers: sleep\n") ==
        "test.yaml:1:10: workers: expected a list, got \"sleep\"");
  CHECK(Error("workers:\n  - sleep\n") ==
        "test.yaml:2:5: workers[0]: expected a map with \"name\" and "
        "\"command\", got \"sleep\"");
  CHECK(Error(head + "    replicas: -1\n") ==
        "test.yaml:4:15: workers[0].replicas: must be from 0 to 65535, got -1");
  CHECK(Error(head + "    replicas: many\n") ==
        "test.yaml:4:15: workers[0].replicas: expected an integer, got "
        "\"many\"");
  CHECK(Error(head + "    port_base: 0\n") ==
        "test.yaml:4:16: workers[0].port_base: must be from 1 to 65535, got 0");
  CHECK(Error(head + "    port_base: 65536\n") ==
        "test.yaml:4:16: workers[0].port_base: must be from 1 to 65535, got "
        "65536");
  CHECK(Error(head + "    restart: sometimes\n") ==
        "test.yaml:4:14: workers[0].restart: expected one of always, "
        "on-failure, never, got \"sometimes\"");
  CHECK(Error(head + "    restart: on_failure\n") ==
        "test.yaml:4:14: workers[0].restart: expected one of always, "
        "on-failure, never, got \"on_failure\"");
  CHECK(Error(head + "    learner: yes\n") ==
        "test.yaml:4:14: workers[0].learner: expected true or false, got "
        "\"yes\"");
  CHECK(Error(head + "    max_restarts: -1\n") ==
        "test.yaml:4:19: workers[0].max_restarts: must be from 0 to "
        "2147483647, got -1");
  CHECK(Error(head + "    min_uptime: 1\n") ==
        "test.yaml:4:17: workers[0].min_uptime: \"1\" has no unit; durations "
        "need one, e.g. \"1s\" or \"1ms\"");
  CHECK(Error(head + "    stop_timeout: 0s\n") ==
        "test.yaml:4:19: workers[0].stop_timeout: must be positive, got "
        "\"0s\"");
  CHECK_THAT(Error(head + "    restart_window: forever\n"),
             StartsWith("test.yaml:4:21: workers[0].restart_window: expected "
                        "a duration with a unit"));
  CHECK(Error(head + "    cwd: \"\"\n") ==
        "test.yaml:4:10: workers[0].cwd: must not be empty; omit it to keep "
        "the daemon's working directory");
  CHECK(Error(head + "    cwd: [a]\n") ==
        "test.yaml:4:10: workers[0].cwd: expected a string, got a list");
  CHECK(Error(head + "    replica: 2\n") ==
        "test.yaml:4:5: workers[0].replica: unknown key; allowed here: name, "
        "command, replicas, env, cwd, port_base, restart, backoff, "
        "max_restarts, restart_window, min_uptime, stop_timeout, learner, "
        "channel");
  CHECK(Error(head + "    replicas: 1\n    replicas: 2\n") ==
        "test.yaml:5:5: workers[0].replicas: duplicate key, first at 4:5");
}

TEST_CASE("Workers: env is a map of variable names to strings",
          "[config][workers]") {
  const std::string head = "workers:\n  - name: a\n    command: [x]\n";
  CHECK(Error(head + "    env: [A=1]\n") ==
        "test.yaml:4:10: workers[0].env: expected a map of variable names to "
        "values, got a list");
  CHECK(Error(head + "    env:\n      1X: a\n") ==
        "test.yaml:5:7: workers[0].env.1X: not a variable name: letters, "
        "digits and '_', not starting with a digit");
  CHECK(Error(head + "    env:\n      \"A=B\": a\n") ==
        "test.yaml:5:7: workers[0].env.A=B: not a variable name: letters, "
        "digits and '_', not starting with a digit");
  CHECK(Error(head + "    env:\n      A: [1]\n") ==
        "test.yaml:5:10: workers[0].env.A: expected a string, got a list");
  CHECK(Error(head + "    env:\n      A: x\n      A: y\n") ==
        "test.yaml:6:7: workers[0].env.A: duplicate key, first at 5:7");
  CHECK(Error(head + "    env:\n      A:\n") ==
        "test.yaml:5:7: workers[0].env.A: expected a string, got nothing");
  // Scalars are strings: numbers keep their text.
  CHECK(Parse(head + "    env: {N: 007}\n").workers[0].env ==
        std::vector<std::pair<std::string, std::string>>{{"N", "007"}});
}

TEST_CASE("Workers: backoff max must not be below initial",
          "[config][workers]") {
  const std::string head = "workers:\n  - name: a\n    command: [x]\n";
  CHECK(Error(head + "    backoff: {initial: 10s, max: 5s}\n") ==
        "test.yaml:4:34: workers[0].backoff.max: must be at least "
        "workers[0].backoff.initial (10s), got 5s");
  CHECK(Error(head + "    backoff: {initial: 1m}\n") ==
        "test.yaml:4:24: workers[0].backoff.initial: must be at most "
        "workers[0].backoff.max (30s, the default), got 1m");
  CHECK(Error(head + "    backoff: {multiplier: 0.9}\n") ==
        "test.yaml:4:27: workers[0].backoff.multiplier: must be at least 1, "
        "got 0.9");
  CHECK(Error(head + "    backoff: {jitter: 0.1}\n") ==
        "test.yaml:4:15: workers[0].backoff.jitter: unknown key; allowed "
        "here: initial, multiplier, max");
}

TEST_CASE("Workers: ports need port_base and must fit", "[config][workers]") {
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x, --port, \"{port}\"]\n") ==
        "test.yaml:3:26: workers[0].command[2]: uses {port}, which needs "
        "port_base (the port of replica 0; replica i gets port_base + i)");
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x]\n"
              "    env: {ADDR: \"127.0.0.1:{port}\"}\n") ==
        "test.yaml:4:17: workers[0].env.ADDR: uses {port}, which needs "
        "port_base (the port of replica 0; replica i gets port_base + i)");
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x]\n"
              "    cwd: /run/{port}\n") ==
        "test.yaml:4:10: workers[0].cwd: uses {port}, which needs port_base "
        "(the port of replica 0; replica i gets port_base + i)");
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x]\n"
              "    learner: true\n") ==
        "test.yaml:4:14: workers[0].learner: a learner worker needs "
        "port_base: replica i serves on 127.0.0.1:{port}, where {port} is "
        "port_base + i");
  // A bad port_base is reported once, not also as missing.
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x, \"{port}\"]\n"
              "    port_base: -5\n"
              "    learner: true\n") ==
        "test.yaml:4:16: workers[0].port_base: must be from 1 to 65535, got "
        "-5");
  CHECK(Error("workers:\n"
              "  - name: a\n"
              "    command: [x]\n"
              "    replicas: 2\n"
              "    port_base: 65535\n") ==
        "test.yaml:5:16: workers[0].port_base: port_base 65535 with 2 "
        "replicas needs ports up to 65536, beyond 65535");
  CHECK(Parse("workers: [{name: a, command: [x], replicas: 1, port_base: "
              "65535}]")
            .workers[0]
            .port_base == 65535);
  CHECK(Error("workers:\n"
              "  - {name: a, command: [x], replicas: 2, port_base: 22300}\n"
              "  - {name: b, command: [x], replicas: 1, port_base: 22301}\n") ==
        "test.yaml:3:53: workers[1].port_base: ports 22301-22301 overlap the "
        "ports of worker \"a\" (22300-22301, port_base at 2:53)");
  // Adjacent ranges and replicas: 0 do not overlap.
  CHECK(Parse("workers:\n"
              "  - {name: a, command: [x], replicas: 2, port_base: 22300}\n"
              "  - {name: b, command: [x], replicas: 1, port_base: 22302}\n"
              "  - {name: c, command: [x], replicas: 0, port_base: 22300}\n")
            .workers.size() == 3);
  // Braces that are not a placeholder are kept and need nothing.
  CHECK(Parse("workers: [{name: a, command: [sh, -c, \"f() { :; }; f\"]}]")
            .workers.size() == 1);
}

TEST_CASE("Workers: learner ids must not clash with learners",
          "[config][workers]") {
  CHECK(Error("learners:\n"
              "  - {id: learner-1, address: \"h:1\"}\n"
              "workers:\n"
              "  - name: learner\n"
              "    command: [x]\n"
              "    replicas: 2\n"
              "    port_base: 22300\n"
              "    learner: true\n") ==
        "test.yaml:4:11: workers[0].name: the learner id \"learner-1\" of one "
        "of its replicas is already the id of a learner in `learners`, at "
        "2:10");
  // Only ids of existing replicas, and only of learner workers, count.
  for (const char* ok : {"learner-2", "learner-01", "learner-", "learner"}) {
    INFO(ok);
    CHECK(Parse(std::string("learners: [{id: ") + ok +
                ", address: \"h:1\"}]\n"
                "workers: [{name: learner, command: [x], replicas: 2, "
                "port_base: 22300, learner: true}]\n")
              .workers.size() == 1);
  }
  CHECK(Parse("learners: [{id: w-0, address: \"h:1\"}]\n"
              "workers: [{name: w, command: [x]}]\n")
            .workers.size() == 1);
}

TEST_CASE("Workers: min_learners counts learner worker replicas",
          "[config][workers]") {
  const std::string yaml =
      "learners: [{id: r, address: \"h:1\"}]\n"
      "workers:\n"
      "  - {name: l, command: [x], replicas: 2, port_base: 22300, learner: "
      "true}\n"
      "  - {name: other, command: [x], replicas: 5}\n";
  CHECK(Parse(yaml + "min_learners: 3\n").service.min_learners == 3);
  CHECK(Error(yaml + "min_learners: 4\n") ==
        "test.yaml:5:15: min_learners: 4 is more than the number of learners "
        "(1 listed + 2 replicas of learner workers)");
}

TEST_CASE("Workers: every error is reported, in document order",
          "[config][workers]") {
  const std::vector<std::string> errors = Errors(
      "workers:\n"                               // 1
      "  - name: a\n"                            // 2
      "    command: [x, \"{port}\"]\n"           // 3: {port}, no port_base
      "    restart: maybe\n"                     // 4: bad policy
      "  - name: a\n"                            // 5: duplicate
      "    command: []\n"                        // 6: empty command
      "  - name: b\n"                            // 7
      "    command: [y]\n"                       // 8
      "    backoff: {initial: 2m, max: 1m}\n");  // 9: max < initial
  INFO(Catch::rangeToString(errors));
  REQUIRE(errors.size() == 5);
  CHECK_THAT(errors[0], StartsWith("test.yaml:3:18: workers[0].command[1]: "
                                   "uses {port}"));
  CHECK_THAT(errors[1],
             StartsWith("test.yaml:4:14: workers[0].restart: expected one"));
  CHECK_THAT(errors[2], StartsWith("test.yaml:5:11: workers[1].name: "
                                   "duplicate worker name"));
  CHECK_THAT(errors[3], StartsWith("test.yaml:6:14: workers[1].command: must "
                                   "not be empty"));
  CHECK_THAT(errors[4], StartsWith("test.yaml:9:33: workers[2].backoff.max: "
                                   "must be at least"));
}

TEST_CASE("Only one YAML document is allowed", "[config]") {
  CHECK(Error("listen: \"h:1\"\n---\nlisten: \"h:2\"\n") ==
        "test.yaml:3:1: only one YAML document is allowed; remove the \"---\" "
        "separator");
  // A trailing separator with nothing after it is harmless.
  CHECK(Parse("listen: \"127.0.0.1:1\"\n---\n").listen.ToString() ==
        "127.0.0.1:1");
}

// Found by tests/fuzz/config_loader_fuzzer: on a stray "," yaml-cpp 0.7's
// LoadAll returns empty documents forever (yaml-cpp issue 1040), which took
// all memory. The file is refused at once, naming where.
TEST_CASE("A stray comma is a syntax error, not an endless parse", "[config]") {
  CHECK(Error(",\n") ==
        "test.yaml:1:1: YAML syntax error: unexpected character; a value or a "
        "\"key: value\" was expected");
  CHECK_THAT(Error("# comment\n  , ms\nlisten: \"h:1\"\n"),
             StartsWith("test.yaml:2:3: YAML syntax error"));
  // After a document, the same input is a syntax error too.
  CHECK_THAT(Error("listen: \"h:1\"\n,\n"),
             StartsWith("test.yaml:2:1: YAML syntax error"));
}

TEST_CASE("LoadConfigFile reads a file and names it", "[config]") {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/aggregator.yaml";
  WriteText(path,
            "learners:\n  - id: only\n    address: \"unix:/tmp/only.sock\"\n");
  absl::StatusOr<AggregatorConfig> config = LoadConfigFile(path);
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->source == path);
  CHECK(Learners(*config) ==
        std::vector<LearnerText>{{"only", "unix:/tmp/only.sock"}});
  CHECK(config->service.min_learners == 1);

  WriteText(path, "call_timeout: 5\n");
  config = LoadConfigFile(path);
  REQUIRE(config.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(config.status().message() ==
        path +
            ":1:15: call_timeout: \"5\" has no unit; durations need one, "
            "e.g. \"5s\" or \"5ms\"");

  // The shipped default loads the same as the embedded copy.
  config = LoadConfigFile("config/aggregator.yaml");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->source == "config/aggregator.yaml");
  REQUIRE(config->workers.size() == 1);
  CHECK(config->workers[0].replicas == 2);
}

TEST_CASE("A FIFO at the config path is refused at once, never opened to read",
          "[config]") {
  // Regression: open() of a FIFO blocked until a writer came, hanging
  // --check and the signal thread of a SIGHUP reload.
  const std::string fifo = MakeTempDir() + "/aggregator.yaml";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<AggregatorConfig> config =
      LoadConfigFile(fifo, std::chrono::seconds(5));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(config.status().message() ==
        fifo + ": cannot read configuration: it is a FIFO, not a regular file");
}

TEST_CASE("LoadConfigFile reports a file it cannot read", "[config]") {
  const std::string dir = MakeTempDir();
  const std::string missing = dir + "/missing.yaml";
  absl::StatusOr<AggregatorConfig> config = LoadConfigFile(missing);
  CHECK(config.status().code() == absl::StatusCode::kNotFound);
  CHECK(config.status().message() ==
        missing + ": cannot read configuration: No such file or directory");

  config = LoadConfigFile(dir);
  CHECK_FALSE(config.ok());
  CHECK(
      config.status().message() ==
      dir +
          ": cannot read configuration: it is a directory, not a regular file");

  const std::string unreadable = dir + "/unreadable.yaml";
  WriteText(unreadable, "listen: \"h:1\"\n");
  REQUIRE(chmod(unreadable.c_str(), 0) == 0);
  config = LoadConfigFile(unreadable);
  if (geteuid() == 0) {
    WARN("running as root: every file is readable; permission check skipped");
  } else {
    CHECK(config.status().code() == absl::StatusCode::kPermissionDenied);
    CHECK(config.status().message() ==
          unreadable + ": cannot read configuration: Permission denied");
  }
}

// Found by tests/fuzz/config_loader_fuzzer: control characters of the text
// (here a newline in yaml-cpp's own message) went into the errors as they
// were, so a message was no longer one error per line, each naming its source.
TEST_CASE("Errors stay one per line: control characters are escaped",
          "[config]") {
  SECTION("as the fuzzer found it") {
    const std::string text("\xff\x00\n", 3);
    for (const std::string& line : Errors(text)) {
      CHECK_THAT(line, StartsWith("test.yaml:"));
    }
  }
  SECTION("a value with a newline and a terminal escape") {
    CHECK(Error("log:\n  level: \"in\\nfo\\e[31m\"\n") ==
          "test.yaml:2:10: log.level: expected one of trace, debug, info, "
          "warn, error, critical, off, got \"in\\nfo\\x1b[31m\"");
  }
}

TEST_CASE("tls, learner_tls and a learner's own tls are read",
          "[config][tls]") {
  const AggregatorConfig config = Parse(
      "tls: {cert: /s.crt, key: /s.key, client_ca: /ca.crt}\n"
      "learner_tls: {ca: /ca.crt, server_name: learners.internal}\n"
      "learners:\n"
      "  - {id: a, address: \"10.0.0.1:1\"}\n"
      "  - id: b\n"
      "    address: \"10.0.0.2:1\"\n"
      "    tls: {ca: /b-ca.crt, cert: /c.crt, key: /c.key}\n"
      "admin: {listen: \"0.0.0.0:22274\"}\n");
  REQUIRE(config.tls.has_value());
  CHECK(config.tls->cert.path == "/s.crt");
  CHECK(config.tls->key.path == "/s.key");
  CHECK(config.tls->client_ca.path == "/ca.crt");
  CHECK(config.tls->cert.pem.empty());  // ParseConfig reads no files
  // learner_tls is each learner's unless it has its own.
  REQUIRE(config.learners.at(0).tls.has_value());
  CHECK(config.learners[0].tls->ca.path == "/ca.crt");
  CHECK(config.learners[0].tls->server_name == "learners.internal");
  REQUIRE(config.learners.at(1).tls.has_value());
  CHECK(config.learners[1].tls->ca.path == "/b-ca.crt");
  CHECK(config.learners[1].tls->cert.path == "/c.crt");
  CHECK(config.learners[1].tls->server_name.empty());
  CHECK(config.admin.listen->ToString() == "0.0.0.0:22274");

  const AggregatorConfig defaults = Parse("");
  CHECK_FALSE(defaults.tls.has_value());
  CHECK_FALSE(defaults.allow_insecure);
  CHECK(defaults.admin.listen->ToString() == "127.0.0.1:22274");
  CHECK_FALSE(Parse("admin: {listen: \"\"}").admin.listen.has_value());
}

TEST_CASE("TLS sections are checked where they are written", "[config][tls]") {
  CHECK(Error("tls: {cert: /s.crt}") ==
        "test.yaml:1:6: tls: needs both \"cert\" and \"key\" (key is "
        "missing)");
  CHECK(Error("tls: {}") ==
        "test.yaml:1:6: tls: needs both \"cert\" and \"key\" (cert is "
        "missing)");
  CHECK(Error("learner_tls: {key: /c.key}") ==
        "test.yaml:1:14: learner_tls: needs both \"cert\" and \"key\" (cert "
        "is missing)");
  CHECK(Error("tls: {cert: \"\", key: /s.key}") ==
        "test.yaml:1:13: tls.cert: must not be empty (a PEM file's path)");
  CHECK(Error("tls: {cert: /s.crt, key: /s.key, ca: /ca.crt}") ==
        "test.yaml:1:34: tls.ca: unknown key; allowed here: cert, key, "
        "client_ca");
  // A tls section with an error is not taken for plaintext as well.
  CHECK(Errors("listen: \"0.0.0.0:1\"\ntls: {cert: /s.crt}").size() == 1);
  CHECK(Error("allow_insecure: yes") ==
        "test.yaml:1:17: allow_insecure: expected true or false, got \"yes\"");
}

TEST_CASE("Plaintext that other hosts can reach needs allow_insecure",
          "[config][tls]") {
  CHECK(Error("admin: {listen: \"0.0.0.0:1\"}") ==
        "test.yaml:1:17: admin.listen: plaintext on \"0.0.0.0:1\", which "
        "other hosts can reach: set tls (cert and key), or allow_insecure: "
        "true to accept it");
  CHECK(Error("listen: \"[::]:1\"").find("test.yaml:1:9: listen: plaintext") ==
        0);
  // Loopback and unix sockets are private; TLS or allow_insecure accept the
  // rest.
  for (const char* ok :
       {"listen: \"[::1]:1\"", "listen: \"localhost:1\"",
        "listen: \"unix:/run/a.sock\"",
        "listen: \"0.0.0.0:1\"\nallow_insecure: true",
        "listen: \"0.0.0.0:1\"\ntls: {cert: /s.crt, key: /s.key}"}) {
    INFO(ok);
    CHECK(ParseConfig(ok, kSource).ok());
  }
}

TEST_CASE("LoadConfigFile reads and checks the PEM files", "[config][tls]") {
  const testing::Certificates& certs = testing::Certs();
  const std::string dir = testing::TempDir();
  auto load = [&](const std::string& cert, const std::string& key) {
    return LoadConfigFile(testing::WriteFile(
        dir + "/tls.yaml", "tls:\n  cert: " + cert + "\n  key: " + key +
                               "\n  client_ca: " + certs.Path("ca.crt") +
                               "\n"));
  };
  auto good = load(certs.Path("server.crt"), certs.Path("server.key"));
  INFO(good.status().ToString());
  REQUIRE(good.ok());
  CHECK(good->tls->cert.pem == certs.Read("server.crt"));
  CHECK(good->tls->key.pem == certs.Read("server.key"));
  CHECK(good->tls->client_ca.pem == certs.Read("ca.crt"));

  auto mismatched = load(certs.Path("server.crt"), certs.Path("client.key"));
  REQUIRE_FALSE(mismatched.ok());
  CHECK_THAT(std::string(mismatched.status().message()),
             Contains(":3:8: tls.key: \"" + certs.Path("client.key") +
                      "\" with \"" + certs.Path("server.crt") +
                      "\": the private key does not belong to the "
                      "certificate"));

  const std::string garbage =
      testing::WriteFile(dir + "/garbage.crt", "not a certificate\n");
  auto bad_cert = load(garbage, certs.Path("server.key"));
  REQUIRE_FALSE(bad_cert.ok());
  CHECK_THAT(
      std::string(bad_cert.status().message()),
      Contains(":2:9: tls.cert: \"" + garbage + "\": no PEM certificate"));

  auto key_as_cert = load(certs.Path("server.key"), certs.Path("server.key"));
  REQUIRE_FALSE(key_as_cert.ok());
  CHECK_THAT(std::string(key_as_cert.status().message()),
             Contains("tls.cert: \"" + certs.Path("server.key") +
                      "\": no PEM certificate"));

  // Relative paths are relative to the configuration file.
  testing::WriteFile(dir + "/rel.crt", certs.Read("server.crt"));
  testing::WriteFile(dir + "/rel.key", certs.Read("server.key"));
  auto relative = load("rel.crt", "rel.key");
  INFO(relative.status().ToString());
  CHECK(relative.ok());

  auto missing = load(dir + "/absent.crt", certs.Path("server.key"));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()),
             Contains(":2:9: tls.cert: " + dir +
                      "/absent.crt: cannot read PEM file: No such file"));
}

}  // namespace
}  // namespace aggregator

TEST_CASE("drain_timeout and metrics.listen are read; \"\" turns metrics off",
          "[config]") {
  auto config = aggregator::ParseConfig(
      "drain_timeout: 5s\nmetrics: {listen: \"127.0.0.1:0\"}\n", "test.yaml");
  REQUIRE(config.ok());
  CHECK(config->drain_timeout == std::chrono::seconds(5));
  REQUIRE(config->metrics.listen.has_value());
  CHECK(config->metrics.listen->ToString() == "127.0.0.1:0");
  auto off = aggregator::ParseConfig("metrics: {listen: \"\"}\n", "test.yaml");
  REQUIRE(off.ok());
  CHECK_FALSE(off->metrics.listen.has_value());
  auto defaults = aggregator::ParseConfig("", "test.yaml");
  REQUIRE(defaults.ok());
  REQUIRE(defaults->metrics.listen.has_value());
  CHECK(defaults->metrics.listen->ToString() == "127.0.0.1:22273");
  CHECK(defaults->drain_timeout == std::chrono::seconds(30));
  // Regression: a unix socket passed --check, then the daemon exited 2.
  CHECK(aggregator::Error("metrics: {listen: \"unix:/run/m.sock\"}") ==
        "test.yaml:1:19: metrics.listen: the metrics endpoint is served on TCP "
        "only, not on a unix socket");
  auto bad = aggregator::ParseConfig("metrics:\n  listen: nope\n", "test.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Contains("test.yaml:2:11: metrics.listen:"));
}

namespace aggregator {
namespace {

// Issue 17, item 1: gRPC and cpp-httplib bound with SO_REUSEPORT, so clashing
// addresses all passed --check; with metrics.listen equal to listen every
// gRPC call reached the HTTP server.
TEST_CASE("Addresses that would collide on this host are refused") {
  const std::string quiet =
      "metrics: {listen: \"\"}\nadmin: {listen: \"\"}\nmin_learners: 0\n";
  SECTION("metrics.listen on listen's socket") {
    CHECK(Error("listen: \"127.0.0.1:9000\"\n"
                "metrics: {listen: \"127.0.0.1:9000\"}\n"
                "admin: {listen: \"\"}\nmin_learners: 0\n") ==
          "test.yaml:2:19: metrics.listen: the same socket as listen "
          "(\"127.0.0.1:9000\"): each listener needs its own");
  }
  SECTION("admin.listen on a wildcard listen's port") {
    CHECK_THAT(Error("listen: \"0.0.0.0:9000\"\nallow_insecure: true\n"
                     "admin: {listen: \"127.0.0.1:9000\"}\n"
                     "metrics: {listen: \"\"}\nmin_learners: 0\n"),
               StartsWith("test.yaml:3:17: admin.listen: the same socket as "
                          "listen (\"0.0.0.0:9000\")"));
  }
  SECTION("localhost and 127.0.0.1 are one host") {
    CHECK_THAT(Error("listen: \"localhost:9000\"\n"
                     "admin: {listen: \"127.0.0.1:9000\"}\n"
                     "metrics: {listen: \"\"}\nmin_learners: 0\n"),
               Contains("admin.listen: the same socket as listen"));
  }
  SECTION("a default listener is named as such") {
    CHECK(Error("listen: \"127.0.0.1:22273\"\nadmin: {listen: \"\"}\n"
                "min_learners: 0\n") ==
          "test.yaml:1:9: metrics.listen (default): the same socket as "
          "listen (\"127.0.0.1:22273\"): each listener needs its own");
  }
  SECTION("a worker's ports include listen's") {
    CHECK(Error("listen: \"127.0.0.1:9001\"\n" + quiet +
                "workers:\n  - {name: w, command: [x], replicas: 2, "
                "port_base: 9000}\n") ==
          "test.yaml:6:53: workers[0].port_base: ports 9000-9001 of worker "
          "\"w\" include the port of listen (\"127.0.0.1:9001\")");
  }
  SECTION("a learner at the aggregator's own listen") {
    CHECK(Error("listen: \"127.0.0.1:9000\"\n" + quiet +
                "learners:\n  - {id: me, address: \"127.0.0.1:9000\"}\n") ==
          "test.yaml:6:23: learners[0].address: \"127.0.0.1:9000\" is this "
          "aggregator's own listen: its calls would come back here; remove "
          "it");
    // A wildcard listener answers on every loopback address.
    CHECK_THAT(Error("listen: \"[::]:9000\"\nallow_insecure: true\n" + quiet +
                     "learners:\n  - {id: me, address: \"localhost:9000\"}\n"),
               Contains("is this aggregator's own listen"));
    CHECK_THAT(
        Error("listen: \"unix:/tmp/agg.sock\"\n" + quiet +
              "learners:\n  - {id: me, address: \"unix:/tmp/agg.sock\"}\n"),
        Contains("is this aggregator's own listen"));
  }
  SECTION("a learner that is a learner worker's replica") {
    CHECK(Error(quiet + "listen: \"127.0.0.1:0\"\n" +
                "workers:\n  - {name: l, command: [x], replicas: 2, "
                "port_base: 9000, learner: true}\n"
                "learners:\n  - {id: again, address: \"127.0.0.1:9001\"}\n") ==
          "test.yaml:8:26: learners[0].address: \"127.0.0.1:9001\" is replica "
          "1 of learner worker \"l\", which joins the learners by itself as "
          "\"l-1\"");
  }
  SECTION("what does not collide passes") {
    Parse(
        "listen: \"127.0.0.1:9000\"\nmetrics: {listen: \"127.0.0.2:9000\"}\n"
        "admin: {listen: \"127.0.0.1:9002\"}\nmin_learners: 0\n"
        "workers:\n  - {name: w, command: [x], replicas: 2, port_base: "
        "9003}\n"
        "learners:\n  - {id: remote, address: \"10.0.0.1:9000\"}\n"
        "  - {id: other, address: \"127.0.0.3:9000\"}\n");
    // Port 0 takes a free port: it collides with nothing.
    Parse(
        "listen: \"127.0.0.1:0\"\nmetrics: {listen: \"127.0.0.1:0\"}\n"
        "admin: {listen: \"127.0.0.1:0\"}\nmin_learners: 0\n");
  }
}

}  // namespace
}  // namespace aggregator

namespace aggregator {
namespace {

TEST_CASE("unix_socket.mode is octal permissions the daemon can use") {
  CHECK(Parse("").unix_socket.mode == 0660);
  CHECK(Parse("unix_socket: {mode: \"0600\"}").unix_socket.mode == 0600);
  CHECK(Parse("unix_socket: {mode: \"666\"}").unix_socket.mode == 0666);
  CHECK(Error("unix_socket: {mode: \"0860\"}") ==
        "test.yaml:1:21: unix_socket.mode: expected permissions in octal as a "
        "string, e.g. \"0660\", got \"0860\"");
  CHECK_THAT(Error("unix_socket: {mode: \"04770\"}"),
             Contains("expected permissions in octal"));
  CHECK_THAT(Error("unix_socket: {mode: [1]}"),
             Contains("expected permissions in octal as a string"));
  CHECK(Error("unix_socket: {mode: \"0060\"}") ==
        "test.yaml:1:21: unix_socket.mode: \"0060\" leaves the daemon's own "
        "user without read and write; give it at least 0600");
}

}  // namespace
}  // namespace aggregator

namespace aggregator {
namespace {

TEST_CASE("workers[].channel is a bool, false by default") {
  const std::string worker =
      "workers:\n  - {name: w, command: [x], port_base: 9000, learner: true";
  CHECK_FALSE(Parse(worker + "}\n").workers.at(0).channel);
  CHECK(Parse(worker + ", channel: true}\n").workers.at(0).channel);
  CHECK_THAT(Error(worker + ", channel: maybe}\n"),
             Contains("workers[0].channel: expected true or false"));
}

}  // namespace
}  // namespace aggregator

namespace aggregator {
namespace {

TEST_CASE("on_learner_failure and straggler are read and checked") {
  CHECK(Parse("").service.on_learner_failure == OnLearnerFailure::kFail);
  const AggregatorConfig shrink = Parse(
      "on_learner_failure: shrink\n"
      "straggler: {factor: 2.5, window: 8, action: shrink}\n");
  CHECK(shrink.service.on_learner_failure == OnLearnerFailure::kShrink);
  CHECK(shrink.service.straggler.factor == 2.5);
  CHECK(shrink.service.straggler.window == 8);
  CHECK(shrink.service.straggler.action == StragglerConfig::Action::kShrink);
  CHECK(Error("on_learner_failure: retry\n") ==
        "test.yaml:1:21: on_learner_failure: expected one of fail, shrink, got "
        "\"retry\"");
  CHECK_THAT(Error("straggler: {factor: 1}\n"),
             Contains("straggler.factor: expected a number above 1"));
  CHECK_THAT(Error("straggler: {window: 0}\n"), Contains("straggler.window"));
  CHECK(Error("straggler: {action: shrink}\n") ==
        "test.yaml:1:21: straggler.action: takes a straggler out of the plans "
        "as a failure would, which needs on_learner_failure: shrink");
}

TEST_CASE("straggler.late_after is auto, off or a duration") {
  using Mode = StragglerConfig::LateAfter::Mode;
  CHECK(Parse("").service.straggler.late_after.mode == Mode::kAuto);
  CHECK(Parse("straggler: {late_after: auto}\n")
            .service.straggler.late_after.mode == Mode::kAuto);
  CHECK(Parse("straggler: {late_after: off}\n")
            .service.straggler.late_after.mode == Mode::kOff);
  const StragglerConfig::LateAfter fixed =
      Parse("straggler:\n  late_after: 400ms\n").service.straggler.late_after;
  CHECK(fixed.mode == Mode::kFixed);
  CHECK(fixed.fixed == milliseconds(400));
  CHECK(Error("straggler:\n  late_after: sometimes\n") ==
        "test.yaml:2:15: straggler.late_after: expected auto, off or a "
        "duration with a unit, e.g. \"500ms\", got \"sometimes\"");
  CHECK(Error("straggler:\n  late_after: 300\n") ==
        "test.yaml:2:15: straggler.late_after: \"300\" has no unit; durations "
        "need one, e.g. \"300s\" or \"300ms\"");
  CHECK(Error("straggler:\n  late_after: 0s\n") ==
        "test.yaml:2:15: straggler.late_after: must be positive, got \"0s\"");
  CHECK(Error("straggler:\n  late_after: -1s\n") ==
        "test.yaml:2:15: straggler.late_after: must be positive, got \"-1s\"");
  CHECK_THAT(Error("straggler:\n  late_after: [1s]\n"),
             StartsWith("test.yaml:2:15: straggler.late_after: expected a "
                        "duration"));
}

}  // namespace
}  // namespace aggregator

namespace aggregator {
namespace {

TEST_CASE("resource_refresh is a duration, 1s by default") {
  CHECK(Parse("").connect.resource_refresh == milliseconds(1000));
  CHECK(Parse("resource_refresh: 250ms").connect.resource_refresh ==
        milliseconds(250));
  CHECK_THAT(Error("resource_refresh: 5"),
             Contains("resource_refresh: \"5\" has no unit"));
}

}  // namespace
}  // namespace aggregator

namespace aggregator {
namespace {

// Sets an environment variable for one scope (the tests run on one thread).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_CASE("learner_sources: dns and orchestrator entries, every field",
          "[config][sources]") {
  AggregatorConfig config = Parse(R"(
learner_sources:
  - dns:
      name: learners.training.svc.cluster.local
      port: 22300
      refresh: 2s
      timeout: 750ms
      nameserver: "127.0.0.1:5353"
  - dns: {name: "other.test.", port: 1}
  - orchestrator:
      url: "http://di-server.di-system:8080/"
      namespace: training
      name: aggregator-0
      refresh: 3s
      timeout: 1s
      report_failed_after: 90s
min_learners: 40
)");
  REQUIRE(config.learner_sources.size() == 3);
  const auto& dns = std::get<DnsSourceConfig>(config.learner_sources[0]);
  CHECK(dns.name == "learners.training.svc.cluster.local");
  CHECK(dns.port == 22300);
  CHECK(dns.refresh == milliseconds(2000));
  CHECK(dns.timeout == milliseconds(750));
  REQUIRE(dns.nameserver);
  CHECK(dns.nameserver->ToString() == "127.0.0.1:5353");
  const auto& other = std::get<DnsSourceConfig>(config.learner_sources[1]);
  CHECK(other.name == "other.test.");
  CHECK(other.refresh == milliseconds(5000));
  CHECK(other.timeout == milliseconds(5000));
  CHECK_FALSE(other.nameserver);
  const auto& orchestrator =
      std::get<OrchestratorSourceConfig>(config.learner_sources[2]);
  CHECK(orchestrator.url == "http://di-server.di-system:8080");
  CHECK(orchestrator.pod_namespace == "training");
  CHECK(orchestrator.name == "aggregator-0");
  CHECK(orchestrator.refresh == milliseconds(3000));
  CHECK(orchestrator.timeout == milliseconds(1000));
  CHECK(orchestrator.report_failed_after == milliseconds(90000));
  // Discovered learners are not known in advance: min_learners is unbounded.
  CHECK(config.service.min_learners == 40);
  CHECK(LearnerSourceKind(config.learner_sources[0]) == std::string("dns"));
  CHECK(LearnerSourceTarget(config.learner_sources[0]) ==
        "learners.training.svc.cluster.local:22300 via 127.0.0.1:5353");
  CHECK(LearnerSourceTarget(config.learner_sources[2]) ==
        "http://di-server.di-system:8080 training/aggregator-0");
  // A source is its name and port (or the orchestrator's url and pod),
  // whatever its other settings: the same name at another port is another.
  CHECK(LearnerSourceKey(config.learner_sources[0]) ==
        "dns learners.training.svc.cluster.local:22300");
  CHECK(LearnerSourceKey(config.learner_sources[2]) ==
        "orchestrator http://di-server.di-system:8080 training/aggregator-0");
  CHECK(Parse("learner_sources:\n  - dns: {name: a.b, port: 1}\n"
              "  - dns: {name: a.b, port: 2}\n")
            .learner_sources.size() == 2);
  // A nameserver without a port is at 53; IPv6 in brackets.
  CHECK(std::get<DnsSourceConfig>(
            Parse("learner_sources: [{dns: {name: a.b, port: 1, nameserver: "
                  "10.96.0.10}}]")
                .learner_sources[0])
            .nameserver->ToString() == "10.96.0.10:53");
  CHECK(std::get<DnsSourceConfig>(
            Parse("learner_sources: [{dns: {name: a.b, port: 1, nameserver: "
                  "\"[fd00::a]:5353\"}}]")
                .learner_sources[0])
            .nameserver->ToString() == "[fd00::a]:5353");
}

TEST_CASE("learner_sources: each problem names its field and position",
          "[config][sources]") {
  CHECK(Error("learner_sources: [{}]\n") ==
        "test.yaml:1:19: learner_sources[0]: expected a map of one key, dns "
        "or orchestrator (e.g. {dns: {name: learners.ns.svc.cluster.local, "
        "port: 22300}}), got a map of 0 keys");
  CHECK_THAT(Error("learner_sources:\n  - dns: {name: a, port: 1}\n"
                   "    orchestrator: {}\n"),
             StartsWith("test.yaml:2:5: learner_sources[0]: expected a map of "
                        "one key") &&
                 Contains("got a map of 2 keys"));
  CHECK(Error("learner_sources: [{static: []}]\n") ==
        "test.yaml:1:20: learner_sources[0].static: unknown key; allowed "
        "here: dns, orchestrator");
  CHECK(Error("learner_sources: [{dns: {port: 1}}]\n") ==
        "test.yaml:1:25: learner_sources[0].dns: missing \"name\" (the DNS "
        "name whose A and AAAA records are the learners, e.g. "
        "learners.ns.svc.cluster.local)");
  CHECK(Error("learner_sources: [{dns: {name: a.b}}]\n") ==
        "test.yaml:1:25: learner_sources[0].dns: missing \"port\" (the "
        "learners' port, 1 to 65535)");
  CHECK(Error("learner_sources: [{dns: {name: a.b, port: 70000}}]\n") ==
        "test.yaml:1:43: learner_sources[0].dns.port: must be from 1 to "
        "65535, got 70000");
  CHECK(Error("learner_sources: [{dns: {name: \"a..b\", port: 1}}]\n") ==
        "test.yaml:1:32: learner_sources[0].dns.name: not a DNS name: "
        "\"a..b\" (labels of letters, digits, '-' and '_', 1 to 63 "
        "characters each, separated by '.')");
  CHECK(Error("learner_sources: [{dns: {name: 10.0.0.1, port: 1}}]\n") ==
        "test.yaml:1:32: learner_sources[0].dns.name: \"10.0.0.1\" is an "
        "address, not a name: list it under learners instead");
  CHECK(Error("learner_sources: [{dns: {name: a, port: 1, refresh: 5}}]\n") ==
        "test.yaml:1:53: learner_sources[0].dns.refresh: \"5\" has no unit; "
        "durations need one, e.g. \"5s\" or \"5ms\"");
  CHECK_THAT(
      Error(
          "learner_sources: [{dns: {name: a, port: 1, nameserver: dns.local}}]"
          "\n"),
      StartsWith("test.yaml:1:56: learner_sources[0].dns.nameserver: expected "
                 "a DNS server's IP address with an optional port"));
  CHECK_THAT(
      Error("learner_sources:\n  - dns: {name: a.b, port: 1}\n"
            "  - dns: {name: a.b, port: 1, refresh: 1s}\n"),
      StartsWith("test.yaml:3:5: learner_sources[1]: the same source as the "
                 "one at 2:5 (a.b:1)"));
  CHECK(Error("learner_sources: {dns: {}}\n") ==
        "test.yaml:1:18: learner_sources: expected a list, got a map");
  CHECK_THAT(Error("learner_sources: [{orchestrator: {url: \"ftp://x\", "
                   "namespace: n, name: a}}]\n"),
             StartsWith("test.yaml:1:40: learner_sources[0].orchestrator.url: "
                        "expected an http:// or https:// URL with a host and "
                        "no query"));
  CHECK(Error("learner_sources: [{orchestrator: {url: \"http://x\", "
              "namespace: \"\", name: a}}]\n") ==
        "test.yaml:1:63: learner_sources[0].orchestrator.namespace: must not "
        "be empty");
  CHECK(Error("learner_sources: [{orchestrator: {url: \"http://x\", "
              "namespace: n, name: a, report_failed_after: 0s}}]\n") ==
        "test.yaml:1:96: learner_sources[0].orchestrator.report_failed_after: "
        "must be positive, got \"0s\"");
}

TEST_CASE(
    "learner_sources: the orchestrator's defaults come from the "
    "environment, as in DI-engine",
    "[config][sources]") {
  const char* kEntry = "learner_sources: [{orchestrator: {}}]\n";
  {
    ScopedEnv url("KUBERNETES_SERVER_URL", nullptr);
    ScopedEnv ns("KUBERNETES_POD_NAMESPACE", nullptr);
    ScopedEnv name("KUBERNETES_POD_NAME", nullptr);
    CHECK(Errors(kEntry) ==
          std::vector<std::string>{
              "test.yaml:1:34: learner_sources[0].orchestrator: missing "
              "\"url\" (the orchestrator's server, e.g. "
              "http://di-server.di-system:8080); or set KUBERNETES_SERVER_URL",
              "test.yaml:1:34: learner_sources[0].orchestrator: missing "
              "\"namespace\" (this aggregator's namespace); or set "
              "KUBERNETES_POD_NAMESPACE",
              "test.yaml:1:34: learner_sources[0].orchestrator: missing "
              "\"name\" (this aggregator's pod name); or set "
              "KUBERNETES_POD_NAME"});
  }
  ScopedEnv url("KUBERNETES_SERVER_URL", "http://di-server.di-system:8080");
  ScopedEnv ns("KUBERNETES_POD_NAMESPACE", "training");
  ScopedEnv name("KUBERNETES_POD_NAME", "aggregator-7");
  const auto from_env =
      std::get<OrchestratorSourceConfig>(Parse(kEntry).learner_sources[0]);
  CHECK(from_env.url == "http://di-server.di-system:8080");
  CHECK(from_env.pod_namespace == "training");
  CHECK(from_env.name == "aggregator-7");
  // What is written wins.
  const auto written = std::get<OrchestratorSourceConfig>(
      Parse("learner_sources: [{orchestrator: {name: agg}}]")
          .learner_sources[0]);
  CHECK(written.name == "agg");
  CHECK(written.pod_namespace == "training");
  {
    ScopedEnv bad("KUBERNETES_SERVER_URL", "di-server:8080");
    CHECK_THAT(Error(kEntry),
               StartsWith("test.yaml:1:34: learner_sources[0].orchestrator: "
                          "expected an http:// or https:// URL") &&
                   Contains("(from KUBERNETES_SERVER_URL)"));
  }
}

TEST_CASE("connect.keepalive: time at least 1s, and a timeout",
          "[config][keepalive]") {
  AggregatorConfig config =
      Parse("connect:\n  keepalive:\n    time: 2s\n    timeout: 500ms\n");
  CHECK(config.connect.keepalive_time == milliseconds(2000));
  CHECK(config.connect.keepalive_timeout == milliseconds(500));
  CHECK(Parse("connect: {keepalive: {timeout: 1s}}").connect.keepalive_time ==
        milliseconds(10000));
  CHECK(Error("connect:\n  keepalive:\n    time: 500ms\n") ==
        "test.yaml:3:11: connect.keepalive.time: must be at least 1s (gRPC "
        "servers take more frequent pings for abuse), got \"500ms\"");
  CHECK(Error("connect: {keepalive: {interval: 1s}}\n") ==
        "test.yaml:1:23: connect.keepalive.interval: unknown key; allowed "
        "here: time, timeout");
}

TEST_CASE(
    "LoadConfigFile refuses expired and not yet valid certificates, naming "
    "the key's file:line:column (issue 26 item 4)",
    "[config][tls]") {
  const testing::Certificates& certs = testing::Certs();
  const std::string dir = testing::TempDir();
  auto load = [&](const std::string& cert, const std::string& key,
                  const std::string& client_ca) {
    return LoadConfigFile(testing::WriteFile(
        dir + "/tls.yaml", "tls:\n  cert: " + cert + "\n  key: " + key +
                               "\n  client_ca: " + client_ca + "\n"));
  };
  const std::string ca = certs.Path("ca.crt");
  REQUIRE(load(certs.Path("server.crt"), certs.Path("server.key"), ca).ok());

  auto expired = load(certs.Path("expired.crt"), certs.Path("expired.key"), ca);
  REQUIRE_FALSE(expired.ok());
  CHECK_THAT(std::string(expired.status().message()),
             Contains(":2:9: tls.cert: \"" + certs.Path("expired.crt") +
                      "\": certificate 1 (CN=localhost) expired at "
                      "2021-01-01 00:00:00 UTC"));
  auto future = load(certs.Path("future.crt"), certs.Path("future.key"), ca);
  REQUIRE_FALSE(future.ok());
  CHECK_THAT(std::string(future.status().message()),
             Contains(":2:9: tls.cert: \"" + certs.Path("future.crt") +
                      "\": certificate 1 (CN=localhost) is not valid before "
                      "2099-12-01 00:00:00 UTC"));
  // A chain is checked whole: a valid leaf before an expired one.
  const std::string chain = testing::WriteFile(
      dir + "/chain.crt", certs.Read("server.crt") + certs.Read("expired.crt"));
  auto in_chain = load(chain, certs.Path("server.key"), ca);
  REQUIRE_FALSE(in_chain.ok());
  CHECK_THAT(std::string(in_chain.status().message()),
             Contains(":2:9: tls.cert: \"" + chain +
                      "\": certificate 2 (CN=localhost) expired at"));
  // A CA file with nothing valid in it; one with a valid CA beside an
  // expired one is taken (a bundle may carry an old root).
  auto old_ca = load(certs.Path("server.crt"), certs.Path("server.key"),
                     certs.Path("expired.crt"));
  REQUIRE_FALSE(old_ca.ok());
  CHECK_THAT(std::string(old_ca.status().message()),
             Contains(":4:14: tls.client_ca: \"" + certs.Path("expired.crt") +
                      "\": certificate 1 (CN=localhost) expired at"));
  const std::string bundle = testing::WriteFile(
      dir + "/bundle.crt", certs.Read("expired.crt") + certs.Read("ca.crt"));
  CHECK(load(certs.Path("server.crt"), certs.Path("server.key"), bundle).ok());
  // learner_tls and a learner's tls too.
  auto client = LoadConfigFile(testing::WriteFile(
      dir + "/client.yaml", "learner_tls:\n  ca: " + ca +
                                "\n  cert: " + certs.Path("future.crt") +
                                "\n  key: " + certs.Path("future.key") + "\n"));
  REQUIRE_FALSE(client.ok());
  CHECK_THAT(std::string(client.status().message()),
             Contains(":3:9: learner_tls.cert: \"" + certs.Path("future.crt") +
                      "\": certificate 1 (CN=localhost) is not valid before"));
}

TEST_CASE(
    "LoadConfigFile refuses a certificate file over 1 MiB or 1000 "
    "certificates, and a served chain over 16 (issue 26 item 16)",
    "[config][tls]") {
  const testing::Certificates& certs = testing::Certs();
  const std::string dir = testing::TempDir();
  auto load = [&](const std::string& cert, const std::string& client_ca) {
    return LoadConfigFile(testing::WriteFile(
        dir + "/tls.yaml", "tls:\n  cert: " + cert +
                               "\n  key: " + certs.Path("server.key") +
                               "\n  client_ca: " + client_ca + "\n"));
  };
  auto repeated = [&](const std::string& name, const std::string& pem,
                      int times) {
    std::string text;
    for (int i = 0; i < times; ++i) text += pem;
    return testing::WriteFile(dir + "/" + name, text);
  };
  const std::string server = certs.Read("server.crt");
  const std::string ca = certs.Path("ca.crt");

  const std::string sixteen = repeated("sixteen.crt", server, 16);
  CHECK(load(sixteen, ca).ok());
  const std::string seventeen = repeated("seventeen.crt", server, 17);
  auto long_chain = load(seventeen, ca);
  REQUIRE_FALSE(long_chain.ok());
  CHECK_THAT(std::string(long_chain.status().message()),
             Contains(":2:9: tls.cert: \"" + seventeen +
                      "\": a chain of 17 certificates, over the limit of 16"));

  // 15 MB of certificates (under ReadFile's 16 MiB) as the chain or the CA.
  const int copies = static_cast<int>(15'000'000 / server.size());
  const std::string huge = repeated("huge.crt", server, copies);
  const std::string huge_size = std::to_string(copies * server.size());
  for (const auto& [cert, client_ca, where] :
       {std::tuple<std::string, std::string, std::string>{huge, ca,
                                                          ":2:9: tls.cert: "},
        {certs.Path("server.crt"), huge, ":4:14: tls.client_ca: "}}) {
    auto refused = load(cert, client_ca);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(std::string(refused.status().message()),
               Contains(where + "\"" + huge + "\": " + huge_size +
                        " bytes, over the limit of 1048576 for a file of "
                        "certificates"));
  }
  // Small certificates: the count is bounded under the size.
  testing::Shell("cd " + dir +
                 " && openssl req -x509 -newkey ec -pkeyopt "
                 "ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=e "
                 "-keyout small.key -out small.crt >/dev/null");
  std::ifstream small_file(dir + "/small.crt");
  const std::string small((std::istreambuf_iterator<char>(small_file)),
                          std::istreambuf_iterator<char>());
  REQUIRE(1001 * small.size() < 1048576);
  const std::string many = repeated("many.crt", small, 1001);
  auto too_many = load(certs.Path("server.crt"), many);
  REQUIRE_FALSE(too_many.ok());
  CHECK_THAT(std::string(too_many.status().message()),
             Contains(":4:14: tls.client_ca: \"" + many +
                      "\": more than 1000 certificates"));
  CHECK(load(certs.Path("server.crt"), repeated("thousand.crt", small, 1000))
            .ok());
}

}  // namespace
}  // namespace aggregator

TEST_CASE("log.format is text or json, text by default", "[config]") {
  CHECK(aggregator::ParseConfig("", "test.yaml")->log.format == "text");
  auto json = aggregator::ParseConfig("log: {format: json}\n", "test.yaml");
  REQUIRE(json.ok());
  CHECK(json->log.format == "json");
  auto bad = aggregator::ParseConfig("log:\n  format: xml\n", "test.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "test.yaml:2:11: log.format: expected one of text, json, got \"xml\"");
}
