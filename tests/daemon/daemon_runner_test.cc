// aggregatord's life under an operator: systemd notifications (a real
// NOTIFY_SOCKET), reloads by SIGHUP and by AggregatorAdmin.Reload, and draining
// on SIGTERM. The daemon runs as a real process; learners are in-process peers.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/admin.grpc.pb.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;

namespace {

constexpr char kDaemon[] = "daemon/aggregatord";

// A systemd-style notification socket: datagrams of "KEY=VALUE\n..." lines.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof(addr.sun_path));
    std::copy(path.begin(), path.end(), addr.sun_path);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~NotifySocket() { close(fd_); }

  // The next datagram other than WATCHDOG=1 and STATUS=... (counted), or "" on
  // timeout.
  std::string Next(std::chrono::milliseconds timeout = kLongWait) {
    if (!pending_.empty()) {
      std::string message = pending_.front();
      pending_.erase(pending_.begin());
      return message;
    }
    return Receive(timeout);
  }

  // Waits until `count` watchdog pings have arrived in all; keeps other
  // messages for Next().
  bool AwaitWatchdogs(int count,
                      std::chrono::milliseconds timeout = kLongWait) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (watchdogs < count && std::chrono::steady_clock::now() < deadline) {
      std::string message = Receive(std::chrono::milliseconds(50));
      if (!message.empty()) pending_.push_back(message);
    }
    return watchdogs >= count;
  }

  // Sends datagrams to the socket itself until its queue is full, as if its
  // reader had stalled.
  void FillQueue() {
    const int sender = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(sender >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::copy(path_.begin(), path_.end(), addr.sun_path);
    int sent = 0;
    while (sendto(sender, "X=1", 3, MSG_DONTWAIT,
                  reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 3) {
      REQUIRE(++sent < 100000);
    }
    CHECK(errno == EAGAIN);
    close(sender);
  }

  int watchdogs = 0;
  std::string last_status;

 private:
  std::string Receive(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) continue;
      std::string message(buffer, n);
      if (message == "WATCHDOG=1") {
        ++watchdogs;
        continue;
      }
      if (message.rfind("STATUS=", 0) == 0) {
        last_status = message;
        continue;
      }
      return message;
    }
  }

  std::vector<std::string> pending_;
  std::string path_;
  int fd_ = -1;
};

// A learner's id and address.
using Learner = std::pair<std::string, std::string>;

std::string Config(const std::vector<Learner>& learners,
                   const std::string& extra = "") {
  std::string yaml = "listen: \"127.0.0.1:0\"\nlearners:\n";
  for (const auto& l : learners) {
    yaml += "  - {id: " + l.first + ", address: \"" + l.second + "\"}\n";
  }
  return yaml +
         "min_learners: 1\nconnect: {backoff: {initial: 50ms, max: 200ms}}\n"
         "metrics: {listen: \"127.0.0.1:0\"}\n"
         "admin: {listen: \"127.0.0.1:0\"}\n" +
         extra;
}

struct Daemon {
  Daemon(const std::string& config,
         std::vector<std::pair<std::string, std::string>> env = {}) {
    aggregator::SubprocessOptions options;
    options.argv = {kDaemon, "--config", config};
    options.env = std::move(env);
    auto started = aggregator::Subprocess::Start(options);
    REQUIRE(started.ok());
    process = std::move(*started);
    const std::string listening =
        WaitForLine(*process, "aggregatord listening on", /*from_stderr=*/true);
    address = WordAfter(listening, " on ");
    channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    admin_address = WordAfter(Log("admin on "), "admin on ");
    admin_channel =
        grpc::CreateChannel(admin_address, grpc::InsecureChannelCredentials());
  }

  // The log lines (stderr) not read yet, up to the end or `deadline`: for the
  // message of a failed check.
  std::string RestOfLog(std::chrono::steady_clock::time_point deadline) {
    std::string rest;
    for (;;) {
      auto line = process->ReadLine(deadline, /*from_stderr=*/true);
      if (!line.ok()) return rest;
      rest += *line + "\n";
    }
  }

  // Waits for a log line (stderr) containing `needle`.
  std::string Log(const std::string& needle) {
    return WaitForLine(*process, needle, /*from_stderr=*/true);
  }

  grpc::Status Reload(pb::ReloadReply* reply) {
    auto admin = pb::AggregatorAdmin::NewStub(admin_channel);
    return admin->Reload(Deadline().get(), {}, reply);
  }

  pb::AggregatorStatus Status() {
    auto admin = pb::AggregatorAdmin::NewStub(admin_channel);
    pb::AggregatorStatus status;
    REQUIRE(admin->GetStatus(Deadline().get(), {}, &status).ok());
    return status;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckResponse response;
    auto status = health->Check(Deadline().get(), {}, &response);
    return status.ok() ? response.status()
                       : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }

  std::unique_ptr<aggregator::Subprocess> process;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::string admin_address;  // AggregatorAdmin's own listener
  std::shared_ptr<grpc::Channel> admin_channel;
};

int LearnerCount(Daemon& daemon) {
  pb::Resource resource;
  auto stub = LearnerStub(daemon.address);
  if (!stub->GetResource(Deadline().get(), {}, &resource).ok()) return -1;
  return resource.learners();
}

}  // namespace

TEST_CASE(
    "systemd hears READY, RELOADING, READY, STOPPING and watchdog pings") {
  const std::string dir = TempDir();
  auto learner = StartLearner();
  const std::string config =
      WriteFile(dir + "/a.yaml", Config({{"l0", learner->address}}));
  // A socket path must fit sockaddr_un (108 bytes): $TEST_TMPDIR is too deep.
  std::string short_dir = "/tmp/notifyXXXXXX";
  REQUIRE(mkdtemp(short_dir.data()) != nullptr);
  const std::string socket_path = short_dir + "/notify.sock";
  NotifySocket notify(socket_path);
  Daemon daemon(config,
                {{"NOTIFY_SOCKET", socket_path}, {"WATCHDOG_USEC", "200000"}});
  CHECK(notify.Next() == "READY=1");
  CHECK(notify.AwaitWatchdogs(2));  // every 100 ms: half of WATCHDOG_USEC
  REQUIRE(daemon.process->Signal(SIGHUP).ok());
  CHECK_THAT(notify.Next(), Catch::StartsWith("RELOADING=1\nMONOTONIC_USEC="));
  CHECK(notify.Next() == "READY=1");
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  CHECK(notify.Next() == "STOPPING=1");
  auto exit =
      daemon.process->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
  CHECK(notify.last_status ==
        "STATUS=learners 1 of 1 ready; workers 0 of 0 running; config "
        "generation 2");
}

TEST_CASE("A notify socket whose queue is full never stalls the daemon") {
  // Regression: sd_notify() blocks while systemd's queue is full; the signal
  // loop sat in it and SIGTERM was never handled.
  const std::string dir = TempDir();
  auto learner = StartLearner();
  const std::string config =
      WriteFile(dir + "/a.yaml", Config({{"l0", learner->address}}));
  std::string short_dir = "/tmp/notifyXXXXXX";
  REQUIRE(mkdtemp(short_dir.data()) != nullptr);
  const std::string socket_path = short_dir + "/notify.sock";
  NotifySocket notify(socket_path);
  notify.FillQueue();
  Daemon daemon(config,
                {{"NOTIFY_SOCKET", socket_path}, {"WATCHDOG_USEC", "20000"}});
  daemon.Log("serving: 1 of 1 learner(s) ready");
  auto stub = LearnerStub(daemon.address);
  pb::Resource resource;
  CHECK(stub->GetResource(Deadline().get(), {}, &resource).ok());
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  auto exit =
      daemon.process->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE(
    "Reload adds a learner, keeps serving through a broken file, refuses "
    "listen") {
  const std::string dir = TempDir();
  auto first = StartLearner();
  auto second = StartLearner();
  const std::string config =
      WriteFile(dir + "/a.yaml", Config({{"l0", first->address}}));
  Daemon daemon(config);
  daemon.Log("serving:");
  CHECK(LearnerCount(daemon) == 1);

  SECTION("a learner added by SIGHUP joins") {
    WriteFile(config,
              Config({{"l0", first->address}, {"l1", second->address}}));
    REQUIRE(daemon.process->Signal(SIGHUP).ok());
    daemon.Log("configuration reloaded");
    REQUIRE(Eventually([&] { return LearnerCount(daemon) == 2; }));
    CHECK(daemon.Status().config_generation() == 2);
  }
  SECTION("a broken file keeps the old configuration, naming line and column") {
    WriteFile(config, Config({{"l0", first->address}}) + "call_timeout: [\n");
    pb::ReloadReply reply;
    const grpc::Status status = daemon.Reload(&reply);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(),
               Catch::Contains(config + ":9:1: YAML syntax error"));
    REQUIRE(daemon.process->Signal(SIGHUP).ok());
    CHECK_THAT(daemon.Log("reload failed"),
               Catch::Contains(config + ":9:1: YAML syntax error"));
    CHECK(LearnerCount(daemon) == 1);
    CHECK(daemon.Status().config_generation() == 1);
  }
  SECTION("a change of listen is rejected by name") {
    std::string moved = Config({{"l0", first->address}});
    moved.replace(moved.find("127.0.0.1:0"), 11, "127.0.0.1:1");
    WriteFile(config, moved);
    pb::ReloadReply reply;
    const grpc::Status status = daemon.Reload(&reply);
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(status.error_message(), Catch::Contains("listen"));
    CHECK(LearnerCount(daemon) == 1);
  }
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  REQUIRE(
      daemon.process->Wait(std::chrono::steady_clock::now() + kLongWait).ok());
}

TEST_CASE(
    "A learner removed by reload finishes the Learn in flight through it") {
  const std::string dir = TempDir();
  auto fast = StartLearner();
  aggregator::ExampleLearnerOptions slow_options;
  slow_options.delay = milliseconds(1500);
  slow_options.delay_on = "Learn";
  auto slow = StartLearner(slow_options);
  const std::string config =
      WriteFile(dir + "/a.yaml",
                Config({{"fast", fast->address}, {"slow", slow->address}}));
  Daemon daemon(config);
  REQUIRE(Eventually([&] { return LearnerCount(daemon) == 2; }));
  auto stub = LearnerStub(daemon.address);
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  const int64_t before = slow->learner->calls();
  auto learn = std::async(std::launch::async, [&] {
    pb::LearnReply reply;
    pb::LearnRequest batch = Batch(64, "r");
    batch.set_plan_id(demand.plan_id());
    return LearnerStub(daemon.address)->Learn(Deadline().get(), batch, &reply);
  });
  REQUIRE(Eventually([&] { return slow->learner->calls() > before; }));
  WriteFile(config, Config({{"fast", fast->address}}));
  pb::ReloadReply reply;
  REQUIRE(daemon.Reload(&reply).ok());
  CHECK(reply.config_generation() == 2);
  CHECK(LearnerCount(daemon) == 1);
  const grpc::Status learned = learn.get();
  INFO(learned.error_message());
  CHECK(learned.ok());
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  REQUIRE(
      daemon.process->Wait(std::chrono::steady_clock::now() + kLongWait).ok());
}

TEST_CASE(
    "SIGTERM drains: the Learn in flight completes, health says NOT_SERVING") {
  const std::string dir = TempDir();
  aggregator::ExampleLearnerOptions slow_options;
  slow_options.delay = milliseconds(1500);
  slow_options.delay_on = "Learn";
  auto slow = StartLearner(slow_options);
  const std::string config =
      WriteFile(dir + "/a.yaml",
                Config({{"slow", slow->address}}, "drain_timeout: 5s\n"));
  Daemon daemon(config);
  daemon.Log("serving:");
  CHECK(daemon.Health() == grpc::health::v1::HealthCheckResponse::SERVING);
  auto stub = LearnerStub(daemon.address);
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  const int64_t before = slow->learner->calls();
  auto learn = std::async(std::launch::async, [&] {
    pb::LearnReply reply;
    pb::LearnRequest batch = Batch(32, "d");
    return LearnerStub(daemon.address)->Learn(Deadline().get(), batch, &reply);
  });
  REQUIRE(Eventually([&] { return slow->learner->calls() > before; }));
  const auto signalled = std::chrono::steady_clock::now();
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  REQUIRE(Eventually([&] {
    return daemon.Health() ==
           grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }));
  pb::DataDemand refused;
  CHECK(stub->GetData(Deadline().get(), {}, &refused).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  const grpc::Status learned = learn.get();
  INFO(learned.error_message());
  CHECK(learned.ok());
  auto exit = daemon.process->Wait(signalled + std::chrono::seconds(5));
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE("Reload scales workers and changes the log level") {
  const std::string dir = TempDir();
  // An unreachable learner: the pool logs each failed attempt at debug level.
  const std::string ghost = "127.0.0.1:" + std::to_string(ClosedPort());
  auto worker_config = [&](int replicas, const std::string& level) {
    return "listen: \"127.0.0.1:0\"\nmetrics: {listen: \"\"}\n"
           "admin: {listen: \"127.0.0.1:0\"}\nmin_learners: 0\n"
           "learners: [{id: ghost, address: \"" +
           ghost +
           "\"}]\n"
           "log: {level: " +
           level +
           "}\n"
           "workers:\n  - {name: sleeper, command: [sleep, \"1000\"], "
           "replicas: " +
           std::to_string(replicas) + ", stop_timeout: 2s}\n";
  };
  const std::string config =
      WriteFile(dir + "/a.yaml", worker_config(1, "info"));
  Daemon daemon(config);
  auto running = [&] {
    int count = 0;
    const pb::AggregatorStatus status = daemon.Status();
    for (const auto& worker : status.workers()) {
      if (worker.state() == pb::WORKER_STATE_RUNNING ||
          worker.state() == pb::WORKER_STATE_STARTING) {
        ++count;
      }
    }
    return count;
  };
  REQUIRE(Eventually([&] { return running() == 1; }));

  WriteFile(config, worker_config(2, "debug"));
  pb::ReloadReply reply;
  const grpc::Status status = daemon.Reload(&reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK_THAT(reply.summary(), Catch::Contains("workers ~sleeper") &&
                                  Catch::Contains("log.level info -> debug"));
  REQUIRE(Eventually([&] { return running() == 2; }));
  // Debug lines appear only at the new level.
  CHECK_THAT(daemon.Log(" debug "), Catch::Contains("ghost"));

  WriteFile(config, worker_config(0, "debug"));
  REQUIRE(daemon.Reload(&reply).ok());
  REQUIRE(Eventually([&] { return running() == 0; }));
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  auto exit =
      daemon.process->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}

TEST_CASE("A slow metrics client cannot hold the daemon's exit") {
  // Regression: one connection to the metrics port that sent a header line
  // every 2 s kept the daemon from exiting for 40+ s after SIGTERM.
  const std::string dir = TempDir();
  auto learner = StartLearner();
  const std::string config =
      WriteFile(dir + "/a.yaml", Config({{"l0", learner->address}}));
  Daemon daemon(config);
  const std::string line = daemon.Log("metrics on http://127.0.0.1:");
  const size_t at = line.find("127.0.0.1:") + 10;
  const int port = std::stoi(line.substr(at));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  // A request that never ends: a header line, then another every 200 ms, for
  // as long as the test runs.
  std::atomic<bool> done{false};
  std::thread slow_client([&] {
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // pacing
      send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
    }
  });
  REQUIRE(daemon.process->Signal(SIGTERM).ok());
  const auto signalled = std::chrono::steady_clock::now();
  auto exit = daemon.process->Wait(signalled + kLongWait);
  done = true;
  slow_client.join();
  close(fd);
  REQUIRE(exit.ok());
  INFO(exit->ToString() << "; the daemon's log after SIGTERM:\n"
                        << daemon.RestOfLog(std::chrono::steady_clock::now() +
                                            std::chrono::seconds(2)));
  CHECK(exit->ok());
  // Drain (nothing in flight) plus the metrics stop's 2 s deadline.
  CHECK(std::chrono::steady_clock::now() - signalled < std::chrono::seconds(6));
}
