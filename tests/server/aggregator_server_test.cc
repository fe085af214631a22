// The aggregator's gRPC listener keeps its connections honest: a second
// aggregator cannot bind the same address, a connection that never speaks is
// closed after the handshake timeout, an idle one is sent GOAWAY; a learner
// worker at an address already taken is left out.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;

namespace {

std::unique_ptr<aggregator::AggregatorServer> StartWith(
    aggregator::ServerOptions options) {
  auto server = aggregator::AggregatorServer::Start(FastConfig({}, 0),
                                                    std::move(options));
  REQUIRE(server.ok());
  return *std::move(server);
}

// What a failed call says, for the failure output.
std::string Describe(const grpc::Status& status) {
  return "code " + std::to_string(status.error_code()) + " (" +
         absl::StatusCodeToString(
             static_cast<absl::StatusCode>(status.error_code())) +
         "): " + status.error_message();
}

// Up to 5 attempts for a call failed UNAVAILABLE (gRPC waits a random 0-50,
// then 0-100, then 0-200 ms between them).
constexpr char kRetryUnavailable[] = R"({"methodConfig": [{
  "name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.05s",
                  "maxBackoff": "0.2s", "backoffMultiplier": 2,
                  "retryableStatusCodes": ["UNAVAILABLE"]}}]})";

}  // namespace

TEST_CASE("A second aggregator on a bound address fails, naming it") {
  // Regression: gRPC bound with SO_REUSEPORT, so a second daemon on the same
  // listen started and took half of the new connections.
  auto first = StartAggregator(FastConfig({}, 0));
  aggregator::AggregatorConfig config = FastConfig({}, 0);
  config.listen = aggregator::HostPort::Tcp("127.0.0.1", first->port());
  auto second = aggregator::AggregatorServer::Start(config);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(
      std::string(second.status().message()),
      Catch::Contains(config.listen.ToString()) &&
          Catch::Contains("already in use by pid " + std::to_string(getpid())));
}

TEST_CASE("A connection that never speaks is closed at the handshake timeout") {
  aggregator::ServerOptions options;
  options.handshake_timeout = milliseconds(300);
  auto server = StartWith(options);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  // The server speaks first (its SETTINGS); then, with nothing from us, it
  // must hang up.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  bool closed = false;
  while (!closed && Clock::now() < deadline) {
    pollfd pfd = {fd, POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 100) >= 0);
    if (pfd.revents == 0) continue;
    char buffer[4096];
    closed = recv(fd, buffer, sizeof(buffer), 0) <= 0;
  }
  close(fd);
  CHECK(closed);
}

TEST_CASE("An idle connection is sent GOAWAY after the idle timeout") {
  aggregator::ServerOptions options;
  options.idle_timeout = milliseconds(300);
  auto server = StartWith(options);
  // A call can meet the GOAWAY in flight: the server's idle timer starts with
  // the connection, and a Check whose stream reaches it after the timer fired
  // fails UNAVAILABLE, 'enter idle' or 'GOAWAY received' (gRPC 1.51 sends
  // that GOAWAY, closes the connection, and does not retry the call
  // transparently). On a loaded machine a new connection's first call is
  // now and then 300 ms late. A real client retries UNAVAILABLE on a new
  // connection; so does this one.
  grpc::ChannelArguments arguments;
  arguments.SetServiceConfigJSON(kRetryUnavailable);
  auto channel = grpc::CreateCustomChannel(
      server->address(), grpc::InsecureChannelCredentials(), arguments);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status first = health->Check(Deadline().get(), {}, &response);
  INFO("first Check: " << Describe(first));
  REQUIRE(first.ok());
  // Connected for the Check. On a loaded machine this thread may only get
  // here after the 300 ms, with the GOAWAY already in (IDLE): that is the
  // point too. Without a GOAWAY the channel stays READY and the CHECK below
  // fails after 5 s.
  const grpc_connectivity_state after_check = channel->GetState(false);
  REQUIRE(
      (after_check == GRPC_CHANNEL_READY || after_check == GRPC_CHANNEL_IDLE));
  // GOAWAY takes a client channel from READY back to IDLE.
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(5);
  while (channel->GetState(false) == GRPC_CHANNEL_READY &&
         channel->WaitForStateChange(GRPC_CHANNEL_READY, deadline)) {
  }
  CHECK(channel->GetState(false) == GRPC_CHANNEL_IDLE);
  // And the next call simply reconnects (its connection has the same race).
  const grpc::Status again = health->Check(Deadline().get(), {}, &response);
  INFO("Check after the GOAWAY: " << Describe(again));
  CHECK(again.ok());
}

namespace {

// A fresh short directory (a unix socket path must fit 107 bytes).
std::string ShortTempDir() {
  char pattern[] = "/tmp/sockXXXXXX";
  REQUIRE(mkdtemp(pattern) != nullptr);
  return pattern;
}

bool Exists(const std::string& path) {
  struct stat found {};
  return lstat(path.c_str(), &found) == 0;
}

int ModeOf(const std::string& path) {
  struct stat found {};
  REQUIRE(lstat(path.c_str(), &found) == 0);
  REQUIRE(S_ISSOCK(found.st_mode));
  return static_cast<int>(found.st_mode & 07777);
}

aggregator::AggregatorConfig UnixConfig(const std::string& path) {
  aggregator::AggregatorConfig config = FastConfig({}, 0);
  config.listen = aggregator::HostPort::Unix(path);
  config.admin.listen.reset();
  return config;
}

bool Answers(const std::string& path) {
  auto channel =
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  return channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::seconds(5));
}

}  // namespace

// Issue 17, item 2: gRPC unlinks a unix socket's path before it binds, so a
// second daemon took over a live socket and the first ran on, reachable by
// nobody; the socket's mode was left to the umask, and it stayed after exit.
TEST_CASE(
    "A unix socket another daemon listens on is refused, a stale one "
    "replaced; it gets unix_socket.mode and is removed at the end") {
  const std::string dir = ShortTempDir();
  const std::string path = dir + "/aggregator.sock";
  {
    auto first = StartAggregator(UnixConfig(path));
    CHECK(ModeOf(path) == 0660);
    auto second = aggregator::AggregatorServer::Start(UnixConfig(path));
    REQUIRE_FALSE(second.ok());
    CHECK(second.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(second.status().message()),
               Catch::Contains("listen \"unix:" + path +
                               "\": another process is listening on it"));
    // The first one still has its socket.
    CHECK(Answers(path));
  }
  CHECK_FALSE(Exists(path));

  // A socket file nobody listens on, as a crashed daemon leaves it.
  const int stale = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  REQUIRE(bind(stale, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  close(stale);
  REQUIRE(Exists(path));
  {
    aggregator::AggregatorConfig config = UnixConfig(path);
    config.unix_socket.mode = 0600;
    auto replaced = StartAggregator(config);
    CHECK(ModeOf(path) == 0600);
    CHECK(Answers(path));
  }
  CHECK_FALSE(Exists(path));

  // Something that is not a socket is never removed.
  { std::ofstream(path) << "precious"; }
  auto refused = aggregator::AggregatorServer::Start(UnixConfig(path));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("exists and is not a socket"));
  CHECK(Exists(path));
  unlink(path.c_str());
  rmdir(dir.c_str());
}

// Issue 17, item 9: with min_learners 0 and no learners, health said SERVING
// while every call was UNAVAILABLE ("1 needed").
TEST_CASE("Health agrees with the calls when min_learners is 0") {
  aggregator::AggregatorConfig config = FastConfig({}, 0);
  auto server = StartAggregator(config);
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  auto status_of = [&] {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("aggregator.v1.Learner");
    grpc::health::v1::HealthCheckResponse response;
    REQUIRE(health->Check(Deadline().get(), request, &response).ok());
    return response.status();
  };
  // Started (what systemd is told), but no call can be served yet.
  CHECK(server->WaitUntilReady(Clock::now()));
  CHECK(status_of() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  CHECK_FALSE(server->ready());
  aggregator::v1::DataDemand demand;
  CHECK(LearnerStub(server->address())
            ->GetData(Deadline().get(), {}, &demand)
            .error_code() == grpc::StatusCode::UNAVAILABLE);
  // One learner: both say yes.
  auto learner = StartLearner();
  config.learners.push_back(Endpoint("l", learner->address));
  REQUIRE(server->Reload(config).ok());
  REQUIRE(Eventually([&] {
    return status_of() == grpc::health::v1::HealthCheckResponse::SERVING;
  }));
  CHECK(server->ready());
  CHECK(LearnerStub(server->address())
            ->GetData(Deadline().get(), {}, &demand)
            .ok());
}

TEST_CASE(
    "A channel worker that announces another learner's address is left out, "
    "not a second learner on one process (issue 26 item 7)") {
  CaptureSink& logs = CapturedLogs();
  auto learner = StartLearner();
  const std::string port =
      learner->address.substr(learner->address.rfind(':') + 1);
  REQUIRE(learner->address == "127.0.0.1:" + port);
  aggregator::AggregatorConfig config =
      FastConfig({Endpoint("l0", learner->address)}, 1);
  // Two liars: one says l0's port; the other the same, a worker after it.
  for (const char* name : {"liar", "echo"}) {
    aggregator::WorkerSpec worker;
    worker.name = name;
    worker.command = {"tests/testing/announcing_worker", port};
    worker.port_base = ClosedPort();
    worker.learner = true;
    worker.channel = true;
    worker.stop_timeout = milliseconds(2000);
    config.workers.push_back(worker);
  }
  auto server = StartAggregator(config);
  for (const char* id : {"liar-0", "echo-0"}) {
    const std::string announced = std::string("worker ") + id +
                                  ": listening on port " + port +
                                  " (announced)";
    REQUIRE(Eventually([&] { return logs.Count(announced) == 1; },
                       milliseconds(10000)));
    const std::string refused = std::string("worker learner ") + id +
                                " is at " + learner->address +
                                ", already learner l0's: left out";
    CHECK(Eventually([&] { return logs.Count(refused) == 1; }));
  }
  REQUIRE(server->WaitUntilReady(Clock::now() + kLongWait));
  aggregator::v1::DataDemand demand;
  REQUIRE(LearnerStub(server->address())
              ->GetData(Deadline().get(), {}, &demand)
              .ok());
  CHECK(PoolIds(*server) == std::vector<std::string>{"l0"});
}
