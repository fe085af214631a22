// aggregatord, example_learner and aggregatorctl as real processes:
// configuration errors, a whole training loop from the command line, a learner
// killed mid-step, and a clean stop on SIGTERM.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/testing/loopback_listener.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/tls_certificates.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;

namespace {

constexpr char kDaemon[] = "daemon/aggregatord";
constexpr char kLearner[] = "tools/examples/example_learner";
constexpr char kCtl[] = "tools/cli/aggregatorctl";

struct LearnerProcess {
  std::unique_ptr<aggregator::Subprocess> process;
  std::string address;
};

LearnerProcess StartLearnerProcess(std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kLearner, "--listen", "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  LearnerProcess learner{Spawn(argv), ""};
  learner.address = LastWord(WaitForLine(*learner.process, "listening on"));
  return learner;
}

// Starts aggregatord on `config` and waits until min_learners are ready.
std::unique_ptr<aggregator::Subprocess> StartDaemon(
    const std::string& config, std::string* address,
    std::string* metrics_port = nullptr, std::string* admin_address = nullptr) {
  auto daemon = Spawn({kDaemon, "--config", config, "--listen", "127.0.0.1:0"});
  // The log says where it listens (Learner API, then admin), where metrics
  // are, and when it serves, the last two in either order.
  bool serving = false;
  bool metrics = false;
  bool admin = false;
  const auto deadline = std::chrono::steady_clock::now() + kLongWait;
  while (!serving || !metrics || !admin || address->empty()) {
    auto line = daemon->ReadLine(deadline, /*from_stderr=*/true);
    REQUIRE(line.ok());
    if (line->find("aggregatord listening on ") != std::string::npos) {
      *address = WordAfter(*line, "aggregatord listening on ");
    }
    if (line->find("admin on ") != std::string::npos) {
      admin = true;
      if (admin_address != nullptr) {
        *admin_address = WordAfter(*line, "admin on ");
      }
    }
    if (size_t at = line->find("metrics on http://"); at != std::string::npos) {
      metrics = true;
      const size_t colon = line->find(':', at + 18);
      if (metrics_port != nullptr) {
        *metrics_port =
            line->substr(colon + 1, line->find('/', colon) - colon - 1);
      }
    }
    serving = serving || line->find("serving:") != std::string::npos;
  }
  return daemon;
}

std::string TwoLearnerConfig(const std::string& dir, const LearnerProcess& a,
                             const LearnerProcess& b) {
  return WriteFile(dir + "/aggregator.yaml",
                   "learners:\n"
                   "  - {id: learner0, address: \"" +
                       a.address +
                       "\"}\n"
                       "  - {id: learner1, address: \"" +
                       b.address +
                       "\"}\n"
                       "min_learners: 2\n"
                       "connect: {backoff: {initial: 50ms, max: 200ms}}\n"
                       "call_timeout: 5s\n"
                       "metrics: {listen: \"127.0.0.1:0\"}\n"
                       "admin: {listen: \"127.0.0.1:0\"}\n");
}

struct BadConfig {
  const char* what;
  const char* yaml;
  const char* expected;  // after "<path>:"
};

}  // namespace

TEST_CASE(
    "A bad aggregator.yaml stops the daemon before it serves, naming the "
    "spot") {
  const std::string dir = TempDir();
  const BadConfig cases[] = {
      {"YAML syntax error", "listen: [1, 2\n", "2:1: YAML syntax error"},
      {"unknown key", "listen: \"127.0.0.1:0\"\nbogus: 1\n",
       "2:1: bogus: unknown key"},
      {"wrong type", "min_learners: abc\n",
       "1:15: min_learners: expected an integer"},
      {"duplicate learner id",
       "learners:\n  - {id: a, address: \"127.0.0.1:1\"}\n"
       "  - {id: a, address: \"127.0.0.1:2\"}\n",
       "3:10: learners[1].id: duplicate learner id \"a\""},
      {"bad address", "learners:\n  - id: a\n    address: nohostport\n",
       "3:14: learners[0].address: bad address"},
      {"bad duration", "call_timeout: 10\n", "1:15: call_timeout:"},
      {"plaintext on every interface", "listen: \"0.0.0.0:0\"\n",
       "1:9: listen: plaintext on \"0.0.0.0:0\", which other hosts can reach: "
       "set tls (cert and key), or allow_insecure: true"},
      {"a certificate that cannot be read",
       "tls: {cert: /nonexistent/server.crt, key: /nonexistent/server.key}\n",
       "1:13: tls.cert: /nonexistent/server.crt: cannot read PEM file: No such "
       "file"},
  };
  for (const BadConfig& bad : cases) {
    SECTION(bad.what) {
      const std::string path = WriteFile(dir + "/bad.yaml", bad.yaml);
      for (bool check : {false, true}) {
        std::vector<std::string> argv = {kDaemon, "--config", path};
        if (check) argv.push_back("--check");
        auto daemon = Spawn(argv);
        const std::string err = ReadAll(*daemon, /*from_stderr=*/true);
        auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
        REQUIRE(exit.ok());
        CHECK(exit->exit_code == 1);
        CHECK_THAT(err, Catch::Contains(path + ":" + bad.expected));
        CHECK_THAT(err, !Catch::Contains("listening"));
      }
    }
  }
  SECTION("missing file") {
    auto daemon = Spawn({kDaemon, "--config", dir + "/absent.yaml"});
    const std::string err = ReadAll(*daemon, true);
    auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
    REQUIRE(exit.ok());
    CHECK(exit->exit_code == 1);
    CHECK_THAT(err, Catch::Contains(dir + "/absent.yaml: cannot read "
                                          "configuration: No such file"));
  }
}

TEST_CASE("--listen on every interface in plaintext is refused too") {
  auto daemon = Spawn({kDaemon, "--check", "--listen", "0.0.0.0:0"});
  const std::string err = ReadAll(*daemon, /*from_stderr=*/true);
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->exit_code == 1);
  CHECK_THAT(err, Catch::Contains("--listen: plaintext on \"0.0.0.0:0\", "
                                  "which other hosts can reach"));
}

// Issue 17, item 6: under journald, priorities were prefixed "<info>" and
// "<warning>", which journald does not read, so `journalctl -p err` showed
// nothing.
TEST_CASE(
    "With stderr on journald's stream, lines carry numeric priorities and no "
    "timestamp") {
  const std::string dir = TempDir();
  const std::string path =
      WriteFile(dir + "/quiet.yaml",
                "min_learners: 0\nmetrics: {listen: \"\"}\n"
                "admin: {listen: \"\"}\n");
  // A listener the daemon cannot take, so it logs critical and exits.
  int held_port = 0;
  const int held = ListenOnLoopback(1, &held_port);
  const std::string busy = "127.0.0.1:" + std::to_string(held_port);
  // JOURNAL_STREAM as systemd sets it: the device and inode of stderr (here
  // the pipe the test reads), or of something else.
  auto run = [&](bool matching) {
    const std::string stream =
        matching ? "$(stat -L -c %d:%i /proc/self/fd/2)" : "1:1";
    auto daemon = Spawn({"/bin/sh", "-c",
                         "JOURNAL_STREAM=" + stream + " exec \"$0\" \"$@\"",
                         kDaemon, "--config", path, "--listen", busy});
    const std::string err = ReadAll(*daemon, /*from_stderr=*/true);
    auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
    REQUIRE(exit.ok());
    CHECK(exit->exit_code == 2);
    return err;
  };
  const std::string journal = run(true);
  CHECK_THAT(journal, Catch::StartsWith("<6>info aggregatord "));
  CHECK_THAT(journal,
             Catch::Contains("\n<2>critical cannot listen on '" + busy + "'"));
  std::istringstream lines(journal);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(std::regex_search(line, std::regex("^<[0-7]>[a-z]+ ")));
  }
  // A JOURNAL_STREAM inherited from elsewhere: stderr is not the journal.
  const std::string plain = run(false);
  CHECK_THAT(plain, Catch::StartsWith("20") && !Catch::Contains("<6>"));
  close(held);
}

// Issue 17, items 1 and 9: --check validated the file but not the
// overrides, so a --listen on a port the file gives to something else passed.
TEST_CASE("--check refuses a --listen that clashes with the configuration") {
  struct Case {
    const char* listen;
    const char* expected;
  };
  for (const Case& c : {
           Case{"127.0.0.1:22273",
                "--listen \"127.0.0.1:22273\": clashes with metrics.listen in "
                "<embedded default>: the same socket as listen "
                "(\"127.0.0.1:22273\")"},
           Case{"127.0.0.1:22301",
                "--listen \"127.0.0.1:22301\": clashes with "
                "workers[0].port_base in <embedded default>: ports 22300-22301 "
                "of worker \"learner\" include the port of listen"},
           Case{"garbage", "--listen: bad address \"garbage\""},
       }) {
    INFO(c.listen);
    auto daemon = Spawn({kDaemon, "--check", "--listen", c.listen});
    const std::string err = ReadAll(*daemon, /*from_stderr=*/true);
    auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
    REQUIRE(exit.ok());
    CHECK(exit->exit_code == 1);
    CHECK_THAT(err, Catch::Contains(c.expected));
  }
}

// The signals `pid` blocks, from /proc (SigBlk); 0 when it cannot be read.
uint64_t BlockedSignals(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigBlk:", 0) == 0)
      return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

// Issue 17, item 9: a SIGHUP in the first ~16 ms after start took the
// default action and ended the daemon.
TEST_CASE(
    "A SIGHUP while the daemon starts waits for it instead of ending it") {
  const std::string dir = TempDir();
  // 4 MB of comments keep it reading its configuration for about a third of
  // a second of CPU: the signal arrives while it starts, not once it waits for
  // signals (which unblocks them in /proc's view). Not more: the whole read
  // must stay inside the daemon's 10 s limit on a loaded machine (12 MB, about
  // 1 s of CPU, once took over 10 s in CI at load 11).
  std::string yaml =
      "min_learners: 0\nmetrics: {listen: \"\"}\nadmin: {listen: \"\"}\n";
  const std::string comment = "# " + std::string(98, 'x') + "\n";
  for (int i = 0; i < 40000; ++i) yaml += comment;
  const std::string path = WriteFile(dir + "/slow.yaml", yaml);
  auto daemon = Spawn({kDaemon, "--config", path, "--listen", "127.0.0.1:0"});
  // Blocked as soon as this binary's own code runs, before it reads its flags.
  const uint64_t hup = uint64_t{1} << (SIGHUP - 1);
  REQUIRE(Eventually([&] { return (BlockedSignals(daemon->pid()) & hup) != 0; },
                     std::chrono::milliseconds(5000)));
  REQUIRE(daemon->Signal(SIGHUP).ok());
  REQUIRE(daemon->Signal(SIGHUP).ok());
  const std::string listening = WaitForLine(*daemon, "listening on", true);
  CHECK_THAT(listening, Catch::Contains("aggregatord listening on"));
  REQUIRE(daemon->Signal(SIGTERM).ok());
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE("allow_insecure: true serves plaintext on every interface, warning") {
  const std::string dir = TempDir();
  const std::string path =
      WriteFile(dir + "/open.yaml",
                "listen: \"0.0.0.0:0\"\nallow_insecure: true\nmin_learners: 0\n"
                "metrics: {listen: \"\"}\nadmin: {listen: \"\"}\n");
  auto daemon = Spawn({kDaemon, "--config", path});
  // The log names the address as bound, not a rewritten one.
  const std::string listening = WaitForLine(*daemon, "listening on", true);
  CHECK_THAT(listening, Catch::Contains("aggregatord listening on 0.0.0.0:") &&
                            Catch::Contains("(plaintext)"));
  CHECK_THAT(WaitForLine(*daemon, "allow_insecure", true),
             Catch::Contains("plaintext on an address other hosts can reach"));
  REQUIRE(daemon->Signal(SIGTERM).ok());
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE(
    "mTLS end to end: aggregatorctl -> aggregatord -> example learners, all "
    "with certificates") {
  const Certificates& certs = Certs();
  const std::string dir = TempDir();
  const std::vector<std::string> learner_tls = {
      "--tls-cert",      certs.Path("server.crt"),
      "--tls-key",       certs.Path("server.key"),
      "--tls-client-ca", certs.Path("ca.crt")};
  LearnerProcess a = StartLearnerProcess(learner_tls);
  LearnerProcess b = StartLearnerProcess(learner_tls);
  const std::string client = "ca: " + certs.Path("ca.crt") +
                             ", cert: " + certs.Path("client.crt") +
                             ", key: " + certs.Path("client.key");
  const std::string config = WriteFile(
      dir + "/tls.yaml",
      "listen: \"127.0.0.1:0\"\n"
      "tls: {cert: " +
          certs.Path("server.crt") + ", key: " + certs.Path("server.key") +
          ", client_ca: " + certs.Path("ca.crt") +
          "}\n"
          "learner_tls: {" +
          client +
          ", server_name: localhost}\n"
          "learners:\n"
          "  - {id: a, address: \"" +
          a.address + "\"}\n  - {id: b, address: \"" + b.address +
          "\"}\n"
          "min_learners: 2\n"
          "connect: {backoff: {initial: 50ms, max: 200ms}}\n"
          "metrics: {listen: \"\"}\nadmin: {listen: \"127.0.0.1:0\"}\n");
  auto daemon = Spawn({kDaemon, "--config", config});
  std::string listening = WaitForLine(*daemon, "listening on", true);
  CHECK_THAT(listening, Catch::Contains("(mTLS)"));
  const std::string address = WordAfter(listening, " on ");
  const std::string admin_address =
      WordAfter(WaitForLine(*daemon, "admin on ", true), "admin on ");
  WaitForLine(*daemon, "serving: 2 of 2", true);

  const std::vector<std::string> ctl_tls = {
      "--tls-ca",          certs.Path("ca.crt"),
      "--tls-cert",        certs.Path("client.crt"),
      "--tls-key",         certs.Path("client.key"),
      "--tls-server-name", "localhost"};
  const std::vector<std::string> no_cert = {"--tls-ca", certs.Path("ca.crt"),
                                            "--tls-server-name", "localhost"};
  auto ctl = [&](std::vector<std::string> args,
                 const std::vector<std::string>& tls) {
    std::vector<std::string> argv = {
        kCtl, "--target", address, "--admin", admin_address, "--timeout", "5"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    argv.insert(argv.end(), args.begin(), args.end());
    auto process = Spawn(argv);
    std::string out = ReadAll(*process, false) + ReadAll(*process, true);
    auto exit = process->Wait(std::chrono::steady_clock::now() + kLongWait);
    REQUIRE(exit.ok());
    return std::make_pair(exit->exit_code, out);
  };
  auto [run_code, run_out] =
      ctl({"run", "--steps", "2", "--bytes", "100"}, ctl_tls);
  INFO(run_out);
  CHECK(run_code == 0);
  CHECK_THAT(run_out, Catch::Contains("steps 2"));
  auto [status_code, status_out] = ctl({"status"}, ctl_tls);
  CHECK(status_code == 0);
  CHECK_THAT(status_out, Catch::Contains("ready"));
  // Without a certificate of the CA's (plaintext, or TLS without one) the
  // aggregator lets nobody in.
  CHECK(ctl({"resource"}, {}).first != 0);
  auto [refused_code, refused_out] = ctl({"resource"}, no_cert);
  CHECK(refused_code != 0);
  CHECK_THAT(refused_out, Catch::Contains("UNAVAILABLE"));

  REQUIRE(daemon->Signal(SIGTERM).ok());
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE("--check passes the default configuration, embedded and on disk") {
  for (std::vector<std::string> argv :
       {std::vector<std::string>{kDaemon, "--check"},
        std::vector<std::string>{kDaemon, "--check", "--config",
                                 "config/aggregator.yaml"}}) {
    auto daemon = Spawn(argv);
    const std::string out = ReadAll(*daemon, false);
    auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
    REQUIRE(exit.ok());
    CHECK(exit->ok());
    CHECK_THAT(out, Catch::Contains("' OK"));
  }
}

TEST_CASE(
    "A training loop from aggregatorctl through aggregatord, then SIGTERM") {
  const std::string dir = TempDir();
  LearnerProcess a = StartLearnerProcess();
  LearnerProcess b = StartLearnerProcess({"--batch-size", "16"});
  std::string address;
  std::string metrics_port;
  std::string admin_address;
  auto daemon = StartDaemon(TwoLearnerConfig(dir, a, b), &address,
                            &metrics_port, &admin_address);

  auto run = Spawn(
      {kCtl, "--target", address, "run", "--steps", "3", "--bytes", "1000"});
  const std::string out = ReadAll(*run, false);
  auto ran = run->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(ran.ok());
  CHECK(ran->ok());
  CHECK_THAT(out, Catch::Contains("steps 3  samples 144"));

  // A live scrape: the figures of the loop, in a format promtool accepts.
  httplib::Client client("127.0.0.1", std::stoi(metrics_port));
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto response = client.Get("/metrics");
  REQUIRE(response);
  const std::string metrics = response->body;
  const std::string scrape = WriteFile(dir + "/scrape.txt", metrics);
  auto promtool =
      Spawn({"/bin/sh", "-c", "promtool check metrics < " + scrape + " 2>&1"});
  const std::string checked_out = ReadAll(*promtool, false);
  auto checked = promtool->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(checked.ok());
  INFO(checked_out);
  CHECK(checked->ok());
  CHECK_THAT(metrics,
             Catch::Contains(
                 "aggregator_requests_total{code=\"OK\",rpc=\"Learn\"} 3"));
  CHECK_THAT(metrics,
             Catch::Contains("aggregator_learners{state=\"ready\"} 2"));
  CHECK_THAT(metrics,
             Catch::Contains("aggregator_learner_calls_total{code=\"OK\","
                             "learner=\"learner1\",rpc=\"Learn\"} 3"));

  auto status = Spawn({kCtl, "--admin", admin_address, "status"});
  const std::string table = ReadAll(*status, false);
  REQUIRE(status->Wait(std::chrono::steady_clock::now() + kLongWait).ok());
  CHECK_THAT(table, Catch::Contains("learner0") &&
                        Catch::Contains("learner1") &&
                        Catch::Contains("ready"));

  REQUIRE(daemon->Signal(SIGTERM).ok());
  const auto stopping = std::chrono::steady_clock::now();
  auto exit = daemon->Wait(stopping + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
  CHECK(Seconds(std::chrono::steady_clock::now() - stopping) < 2.0);
}

TEST_CASE(
    "A learner killed between GetData and Learn fails that Learn promptly") {
  const std::string dir = TempDir();
  LearnerProcess a = StartLearnerProcess();
  LearnerProcess b = StartLearnerProcess();
  std::string address;
  auto daemon = StartDaemon(TwoLearnerConfig(dir, a, b), &address);
  auto stub = LearnerStub(address);

  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  REQUIRE(b.process->Signal(SIGKILL).ok());
  REQUIRE(b.process->Wait(std::chrono::steady_clock::now() + kLongWait).ok());

  pb::LearnRequest batch = Batch(64, "k");
  batch.set_plan_id(demand.plan_id());
  pb::LearnReply reply;
  const auto started = std::chrono::steady_clock::now();
  const grpc::Status status = stub->Learn(Deadline().get(), batch, &reply);
  CHECK(Seconds(std::chrono::steady_clock::now() - started) < 2.5);
  CHECK_FALSE(status.ok());
  CHECK((status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
         status.error_code() == grpc::StatusCode::UNAVAILABLE));
  CHECK_THAT(status.error_message(), Catch::Contains("learner1 (" + b.address));
}

TEST_CASE("A learner that crashes mid-call is reported by name") {
  const std::string dir = TempDir();
  LearnerProcess a = StartLearnerProcess();
  // Answers GetData (GetResource is not counted), then dies on Learn.
  LearnerProcess b = StartLearnerProcess({"--crash-after", "1"});
  std::string address;
  auto daemon = StartDaemon(TwoLearnerConfig(dir, a, b), &address);
  auto stub = LearnerStub(address);
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  pb::LearnReply reply;
  const auto started = std::chrono::steady_clock::now();
  const grpc::Status status =
      stub->Learn(Deadline().get(), Batch(64, "c"), &reply);
  CHECK(Seconds(std::chrono::steady_clock::now() - started) < 2.5);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(), Catch::Contains("learner1 (" + b.address));
  auto crashed = b.process->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(crashed.ok());
  CHECK(crashed->exit_code == 70);
}

// Issue 27: which learners failed a call was only in the message text;
// aggregatorctl reads them from the error details and prints one line each.
TEST_CASE("aggregatorctl prints each failed learner after the error line") {
  const std::string dir = TempDir();
  LearnerProcess a = StartLearnerProcess();
  LearnerProcess b = StartLearnerProcess({"--fail-on", "StartTask"});
  std::string address;
  auto daemon = StartDaemon(TwoLearnerConfig(dir, a, b), &address);
  auto start = Spawn({kCtl, "--target", address, "--timeout", "5", "start"});
  const std::string err = ReadAll(*start, true);
  auto exit = start->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  INFO(err);
  CHECK(exit->exit_code == 1);
  // The error line as before, then the learner.
  CHECK(err ==
        "aggregatorctl: StartTask failed: INTERNAL: StartTask failed on 1 of 2 "
        "learner(s): learner1 (" +
            b.address +
            "): INTERNAL: injected failure in StartTask\n"
            "failed learner learner1 (" +
            b.address + "): INTERNAL: injected failure in StartTask\n");
}

// Issue 10, item 8: with a low soft limit, 500 half-open connections could
// lock new clients out. The daemon raises its soft limit to the hard one.
TEST_CASE("The open-files limit is raised to the hard limit, and logged") {
  struct rlimit limit {};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const rlim_t low = std::min<rlim_t>(limit.rlim_max, 128);
  const std::string config = WriteFile(
      TempDir() + "/a.yaml",
      "min_learners: 0\nmetrics: {listen: \"\"}\nadmin: {listen: \"\"}\n"
      "workers: []\n");
  auto daemon =
      Spawn({"/bin/sh", "-c",
             "ulimit -S -n " + std::to_string(low) + " && exec " + kDaemon +
                 " --config " + config + " --listen 127.0.0.1:0"});
  const std::string line =
      WaitForLine(*daemon, "open files limit", /*from_stderr=*/true);
  if (limit.rlim_max == low) {
    CHECK_THAT(line,
               Catch::EndsWith("open files limit " + std::to_string(low)));
  } else {
    CHECK_THAT(line, Catch::EndsWith("open files limit raised from " +
                                     std::to_string(low) + " to " +
                                     std::to_string(limit.rlim_max)));
  }
  // Its signal handling is in place once it listens.
  WaitForLine(*daemon, "aggregatord listening on", /*from_stderr=*/true);
  REQUIRE(daemon->Signal(SIGTERM).ok());
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}
