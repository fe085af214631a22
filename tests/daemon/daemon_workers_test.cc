// Local workers in the running aggregator: example learners started as learner
// workers join the pool and serve through the aggregator, a killed one is
// restarted and the pool recovers; the aggregatord binary's workers die with
// it (SIGKILL) or are stopped by it (SIGTERM); the default configuration finds
// tools/examples/example_learner through aggregatord's runfiles. Every wait has
// a deadline: health watches, log lines and pidfds, never sleeps.
#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/config/config.h"
#include "lib/process/subprocess.h"
#include "lib/server/aggregator_server.h"
#include "proto/admin.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/loopback_listener.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Starting processes and connecting to them on a loaded machine.
constexpr seconds kLongWait(20);

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + kLongWait;
}

// A port p with p and p + 1 both free on loopback right now (bound, then
// released for the workers to take).
int FreePortPair() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int first = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int second = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(first >= 0);
    REQUIRE(second >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(first, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(getsockname(first, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    const int port = ntohs(addr.sin_port);
    addr.sin_port = htons(port + 1);
    const bool both =
        port < 65535 &&
        bind(second, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(first);
    close(second);
    if (both) return port;
  }
  FAIL("no two consecutive free loopback ports in 100 attempts");
  return 0;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

std::string WorkingDirectory() {
  char cwd[PATH_MAX];
  REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
  return cwd;
}

int64_t GetDataBatchSize(pb::Learner::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(RpcDeadline());
  pb::DataDemand demand;
  const grpc::Status status =
      stub.GetData(&context, pb::GetDataRequest(), &demand);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return demand.batch_size();
}

pb::AggregatorStatus GetStatus(const std::string& address) {
  auto admin = pb::AggregatorAdmin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(RpcDeadline());
  pb::AggregatorStatus status;
  const grpc::Status rpc =
      admin->GetStatus(&context, pb::GetStatusRequest(), &status);
  INFO(rpc.error_message());
  REQUIRE(rpc.ok());
  return status;
}

// Reads health updates of the Learner service until one says `wanted`.
void WaitForHealth(grpc::ClientReaderInterface<HealthCheckResponse>& stream,
                   HealthCheckResponse::ServingStatus wanted) {
  HealthCheckResponse response;
  while (stream.Read(&response)) {
    if (response.status() == wanted) return;
  }
  FAIL("the health watch ended before "
       << HealthCheckResponse::ServingStatus_Name(wanted));
}

TEST_CASE("Learner workers serve through the aggregator and are restarted") {
  testing::CapturedLogs();
  const int port_base = FreePortPair();
  AggregatorConfig config;
  config.source = "daemon_workers_test";
  config.listen = HostPort::Tcp("127.0.0.1", 0);
  config.admin.listen = HostPort::Tcp("127.0.0.1", 0);
  config.service.min_learners = 2;
  config.connect.timeout = milliseconds(10000);
  config.connect.backoff =
      BackoffOptions{milliseconds(50), 1.6, 0.0, milliseconds(200)};
  config.service.call_timeout = milliseconds(5000);
  WorkerSpec learner;
  learner.name = "learner";
  // A data dependency: in the test's runfiles, the working directory.
  learner.command = {"tools/examples/example_learner", "--listen",
                     "127.0.0.1:{port}"};
  learner.replicas = 2;
  learner.port_base = port_base;
  learner.learner = true;
  // Long enough for the pool to see the old connection drop first.
  learner.backoff = {milliseconds(500), 2.0, 0.0, milliseconds(5000)};
  learner.min_uptime = milliseconds(200);
  learner.stop_timeout = milliseconds(5000);
  config.workers = {learner};

  absl::StatusOr<std::unique_ptr<AggregatorServer>> started =
      AggregatorServer::Start(config);
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  AggregatorServer& server = **started;
  REQUIRE(server.WaitUntilReady(Steady::now() + kLongWait));
  auto channel =
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = pb::Learner::NewStub(channel);
  CHECK(GetDataBatchSize(*stub) == 64);

  pb::AggregatorStatus status = GetStatus(server.admin_address());
  REQUIRE(status.workers_size() == 2);
  REQUIRE(status.learners_size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(status.workers(i).name() == "learner");
    CHECK(status.workers(i).index() == i);
    CHECK(status.workers(i).pid() > 0);
    CHECK(status.workers(i).restarts() == 0);
    CHECK(status.learners(i).id() == absl::StrCat("learner-", i));
    CHECK(status.learners(i).address() ==
          absl::StrCat("127.0.0.1:", port_base + i));
    CHECK(status.learners(i).state() == pb::LEARNER_STATE_READY);
  }
  const pid_t killed = status.workers(1).pid();

  // Watch readiness: SERVING now, NOT_SERVING when the pool loses the killed
  // learner, SERVING again once its restarted replica is connected.
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch;
  watch.set_deadline(RpcDeadline());
  HealthCheckRequest request;
  request.set_service("aggregator.v1.Learner");
  auto stream = health->Watch(&watch, request);
  WaitForHealth(*stream, HealthCheckResponse::SERVING);
  REQUIRE(kill(killed, SIGKILL) == 0);
  WaitForHealth(*stream, HealthCheckResponse::NOT_SERVING);
  WaitForHealth(*stream, HealthCheckResponse::SERVING);
  watch.TryCancel();
  (void)stream->Finish();

  CHECK(GetDataBatchSize(*stub) == 64);
  status = GetStatus(server.admin_address());
  REQUIRE(status.workers_size() == 2);
  CHECK(status.workers(0).restarts() == 0);
  CHECK(status.workers(1).restarts() == 1);
  CHECK(status.workers(1).pid() > 0);
  CHECK(status.workers(1).pid() != killed);
  CHECK_THAT(status.workers(1).last_error(),
             Catch::Matchers::StartsWith("killed by SIGKILL after "));
  CHECK(testing::CapturedLogs()
            .WaitFor(absl::StrCat("[learner-1] example_learner listening on "
                                  "127.0.0.1:",
                                  port_base + 1),
                     1, Steady::now() + kLongWait)
            .size() > 0);

  const std::vector<WorkerSnapshot> workers = server.workers().Status();
  server.Shutdown(std::chrono::system_clock::now() + seconds(5));
  for (const WorkerSnapshot& worker : workers) {
    CHECK(testing::ExitsWithin(worker.pid, milliseconds(0)));
  }
  for (const WorkerSnapshot& worker : server.workers().Status()) {
    CHECK(worker.state == WorkerState::kStopped);
    CHECK(worker.pid == 0);
  }
}

// aggregatord (a data dependency) run as a child with `args`, in `cwd`.
std::unique_ptr<Subprocess> StartDaemon(const std::vector<std::string>& args,
                                        const std::string& cwd) {
  SubprocessOptions options;
  options.argv = {WorkingDirectory() + "/daemon/aggregatord"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.cwd = cwd;
  absl::StatusOr<std::unique_ptr<Subprocess>> daemon =
      Subprocess::Start(options);
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return *std::move(daemon);
}

// Reads the daemon's log (stderr) until, for each of `texts`, a line has
// contained it (in any order); returns those lines, in the order of `texts`.
std::vector<std::string> ReadLogUntilAll(
    Subprocess& daemon, const std::vector<std::string>& texts) {
  const Steady::time_point deadline = Steady::now() + kLongWait;
  std::vector<std::string> found(texts.size());
  size_t missing = texts.size();
  while (missing > 0) {
    absl::StatusOr<std::string> line =
        daemon.ReadLine(deadline, /*from_stderr=*/true);
    INFO("waiting for " << Catch::rangeToString(texts) << ": "
                        << line.status().ToString());
    REQUIRE(line.ok());
    UNSCOPED_INFO("aggregatord: " << *line);
    for (size_t i = 0; i < texts.size(); ++i) {
      if (found[i].empty() && line->find(texts[i]) != std::string::npos) {
        found[i] = *line;
        --missing;
      }
    }
  }
  return found;
}

std::string ReadLogUntil(Subprocess& daemon, const std::string& text) {
  return ReadLogUntilAll(daemon, {text})[0];
}

// The pid in a "... (pid N) ..." line.
pid_t PidIn(const std::string& line) {
  const std::string marker = "(pid ";
  const size_t start = line.find(marker);
  REQUIRE(start != std::string::npos);
  const size_t end = line.find(')', start);
  int pid = 0;
  REQUIRE(absl::SimpleAtoi(
      line.substr(start + marker.size(), end - start - marker.size()), &pid));
  return pid;
}

std::vector<pid_t> StartSleepers(Subprocess& daemon) {
  std::vector<pid_t> pids;
  for (const std::string& line : ReadLogUntilAll(
           daemon, {"worker sleeper-0 started", "worker sleeper-1 started"})) {
    pids.push_back(PidIn(line));
  }
  for (pid_t pid : pids) REQUIRE(kill(pid, 0) == 0);
  return pids;
}

constexpr char kSleepersConfig[] =
    "listen: \"127.0.0.1:0\"\n"
    "metrics: {listen: \"127.0.0.1:0\"}\n"
    "admin: {listen: \"127.0.0.1:0\"}\n"
    "min_learners: 0\n"
    "workers:\n"
    "  - name: sleeper\n"
    "    command: [sleep, \"1000\"]\n"
    "    replicas: 2\n";

TEST_CASE("Workers die with a SIGKILLed aggregatord") {
  const std::string dir = testing::TempDir();
  WriteText(dir + "/aggregator.yaml", kSleepersConfig);
  std::unique_ptr<Subprocess> daemon =
      StartDaemon({"--config", dir + "/aggregator.yaml"}, dir);
  const std::vector<pid_t> workers = StartSleepers(*daemon);

  // Only the daemon: the workers lead process groups of their own.
  REQUIRE(daemon->Signal(SIGKILL).ok());
  absl::StatusOr<ExitStatus> exit = daemon->Wait(Steady::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->signal == SIGKILL);
  for (pid_t pid : workers) {
    INFO("worker pid " << pid);
    CHECK(testing::ExitsWithin(pid, kLongWait));
  }
}

TEST_CASE("A SIGTERMed aggregatord stops its workers and exits 0") {
  const std::string dir = testing::TempDir();
  WriteText(dir + "/aggregator.yaml", kSleepersConfig);
  std::unique_ptr<Subprocess> daemon =
      StartDaemon({"--config", dir + "/aggregator.yaml"}, dir);
  const std::vector<pid_t> workers = StartSleepers(*daemon);
  REQUIRE(daemon->Signal(SIGTERM).ok());
  ReadLogUntil(*daemon, "all workers stopped");
  absl::StatusOr<ExitStatus> exit = daemon->Wait(Steady::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
  for (pid_t pid : workers) {
    INFO("worker pid " << pid);
    CHECK(testing::ExitsWithin(pid, milliseconds(0)));
  }
}

// A worker with two descendants: one in its process group that ignores
// SIGTERM, and one that left it with setsid(). The worker prints their pids.
std::string FamilyConfig(const std::string& dir) {
  WriteText(dir + "/family.sh",
            "sh -c 'trap \"\" TERM; exec sleep 1000' &\n"
            "echo \"group pid $!\"\n"
            "setsid sleep 1000 &\n"
            "echo \"session pid $!\"\n"
            "exec sleep 1000\n");
  return absl::StrCat(
      "listen: \"127.0.0.1:0\"\n"
      "metrics: {listen: \"127.0.0.1:0\"}\n"
      "admin: {listen: \"127.0.0.1:0\"}\n"
      "min_learners: 0\n"
      "workers:\n"
      "  - name: family\n"
      "    command: [sh, \"",
      dir, "/family.sh\"]\n");
}

struct Family {
  std::unique_ptr<Subprocess> daemon;
  std::string dir;
  std::vector<pid_t> descendants;  // in the worker's group, and setsid()ed
};

Family StartFamily() {
  Family family;
  family.dir = testing::TempDir();
  WriteText(family.dir + "/aggregator.yaml", FamilyConfig(family.dir));
  family.daemon =
      StartDaemon({"--config", family.dir + "/aggregator.yaml"}, family.dir);
  auto pid_after = [](const std::string& line, const std::string& marker) {
    int pid = 0;
    REQUIRE(
        absl::SimpleAtoi(line.substr(line.find(marker) + marker.size()), &pid));
    return pid;
  };
  const std::vector<std::string> lines = ReadLogUntilAll(
      *family.daemon, {"[family-0] group pid ", "[family-0] session pid "});
  family.descendants = {pid_after(lines[0], "group pid "),
                        pid_after(lines[1], "session pid ")};
  // The second has left the worker's session (or is about to: setsid runs
  // right after the fork).
  const pid_t session_leader = family.descendants[1];
  const Steady::time_point deadline = Steady::now() + kLongWait;
  while (getsid(session_leader) != session_leader) {
    REQUIRE(Steady::now() < deadline);
    std::this_thread::yield();
  }
  for (pid_t pid : family.descendants) REQUIRE(kill(pid, 0) == 0);
  return family;
}

void CheckDescendantsGone(const Family& family) {
  for (pid_t pid : family.descendants) {
    INFO("descendant pid " << pid);
    CHECK(testing::ExitsWithin(pid, kLongWait));
  }
}

TEST_CASE("No descendant of a worker outlives a SIGKILLed aggregatord") {
  // Regression: a grandchild in the worker's group, and one that called
  // setsid(), survived the daemon's SIGKILL (reparented to init).
  Family family = StartFamily();
  REQUIRE(family.daemon->Signal(SIGKILL).ok());
  REQUIRE(family.daemon->Wait(Steady::now() + kLongWait).ok());
  CheckDescendantsGone(family);
}

TEST_CASE("No descendant of a worker outlives a SIGTERMed aggregatord") {
  Family family = StartFamily();
  REQUIRE(family.daemon->Signal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit =
      family.daemon->Wait(Steady::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
  CheckDescendantsGone(family);
}

TEST_CASE("No descendant of a worker outlives the worker's stop") {
  // A reload that removes the worker stops it; the daemon runs on.
  Family family = StartFamily();
  WriteText(family.dir + "/aggregator.yaml",
            "listen: \"127.0.0.1:0\"\n"
            "metrics: {listen: \"127.0.0.1:0\"}\n"
            "admin: {listen: \"127.0.0.1:0\"}\n"
            "min_learners: 0\n");
  REQUIRE(family.daemon->Signal(SIGHUP).ok());
  ReadLogUntil(*family.daemon, "worker family-0 (pid");
  CheckDescendantsGone(family);
  REQUIRE(kill(family.daemon->pid(), 0) == 0);
  REQUIRE(family.daemon->Signal(SIGTERM).ok());
  REQUIRE(family.daemon->Wait(Steady::now() + kLongWait).ok());
}

// A loopback port held (bound and listening) by this test.
struct HeldPort {
  int port = 0;
  const int fd = testing::ListenOnLoopback(1, &port);
  ~HeldPort() { close(fd); }
};

// Issue 26 item 3: with 300 replicas a start that failed closed the
// listeners at 30 s with nothing logged, and the process lingered. A start
// that fails once the workers are starting (here metrics.listen is taken;
// it opens after the workers' Apply) must log why and exit, leaving no worker.
TEST_CASE(
    "A start that fails while 200 worker replicas start says why and exits 2, "
    "leaving no worker running") {
  const HeldPort busy;
  const std::string metrics = absl::StrCat("127.0.0.1:", busy.port);
  const std::string dir = testing::TempDir();
  WriteText(dir + "/aggregator.yaml",
            absl::StrCat("listen: \"127.0.0.1:0\"\n"
                         "metrics: {listen: \"",
                         metrics,
                         "\"}\n"
                         "admin: {listen: \"\"}\n"
                         "min_learners: 0\n"
                         "workers:\n"
                         "  - name: many\n"
                         "    command: [sleep, \"1000\"]\n"
                         "    replicas: 200\n"));
  std::unique_ptr<Subprocess> daemon =
      StartDaemon({"--config", dir + "/aggregator.yaml"}, dir);
  // The whole log, to its end (the daemon's exit), within one deadline.
  const Steady::time_point deadline = Steady::now() + kLongWait;
  std::string critical;
  std::vector<pid_t> started;
  for (;;) {
    absl::StatusOr<std::string> line =
        daemon->ReadLine(deadline, /*from_stderr=*/true);
    if (!line.ok()) {
      INFO("the log ended with: " << line.status().ToString());
      CHECK(absl::IsOutOfRange(line.status()));  // EOF, not the deadline
      break;
    }
    UNSCOPED_INFO("aggregatord: " << *line);
    if (line->find(" critical ") != std::string::npos) critical = *line;
    if (line->find("worker many-") != std::string::npos &&
        line->find(" started (pid ") != std::string::npos) {
      started.push_back(PidIn(*line));
    }
  }
  CHECK(critical.find("cannot serve metrics on '" + metrics + "'") !=
        std::string::npos);
  absl::StatusOr<ExitStatus> exit = daemon->Wait(deadline);
  INFO(exit.status().ToString());
  REQUIRE(exit.ok());
  CHECK(exit->exit_code == 2);
  INFO(started.size() << " replica(s) had started");
  for (pid_t pid : started) {
    INFO("worker pid " << pid);
    CHECK(testing::ExitsWithin(pid, milliseconds(0)));
  }
}

TEST_CASE("The default configuration finds example_learner in the runfiles") {
  // The shipped default with free ports, run from a directory that has no
  // tools/examples/example_learner: the program comes from aggregatord's
  // runfiles.
  const int port_base = FreePortPair();
  const std::string dir = testing::TempDir();
  const std::string yaml = ReadText("config/aggregator.yaml");
  REQUIRE(yaml.find("port_base: 22300\n") != std::string::npos);
  WriteText(
      dir + "/aggregator.yaml",
      absl::StrReplaceAll(
          yaml,
          {{"port_base: 22300\n", absl::StrCat("port_base: ", port_base, "\n")},
           {"listen: \"127.0.0.1:22273\"", "listen: \"127.0.0.1:0\""},
           {"listen: \"127.0.0.1:22274\"", "listen: \"127.0.0.1:0\""}}));
  std::unique_ptr<Subprocess> daemon = StartDaemon(
      {"--config", dir + "/aggregator.yaml", "--listen", "127.0.0.1:0"}, dir);
  const std::vector<std::string> lines = ReadLogUntilAll(
      *daemon,
      {"worker learner-0 started",
       absl::StrCat("[learner-0] example_learner listening on 127.0.0.1:",
                    port_base),
       absl::StrCat("[learner-1] example_learner listening on 127.0.0.1:",
                    port_base + 1),
       "serving:"});
  CHECK(lines[0].find(
            ".runfiles/learner_aggregator/tools/examples/example_learner "
            "--listen 127.0.0.1:" +
            std::to_string(port_base)) != std::string::npos);
  REQUIRE(daemon->Signal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit = daemon->Wait(Steady::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

}  // namespace
}  // namespace aggregator
