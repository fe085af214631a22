// Helpers for tests that run real aggregators and example learners on loopback.
#ifndef TESTS_TESTING_TEST_CLUSTER_H_
#define TESTS_TESTING_TEST_CLUSTER_H_

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/config/config.h"
#include "lib/server/aggregator_server.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/example_learner_service.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/synthetic_batch.h"

namespace aggregator::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A learner at `address` ("host:port"), for configurations.
inline LearnerEndpoint Endpoint(std::string id, const std::string& address) {
  absl::StatusOr<HostPort> parsed =
      HostPort::Parse(address, /*allow_port_zero=*/false);
  REQUIRE(parsed.ok());
  return LearnerEndpoint{std::move(id), *std::move(parsed)};
}

// A configuration that reconnects fast, so tests finish in well under a second.
inline AggregatorConfig FastConfig(std::vector<LearnerEndpoint> learners,
                                   int min_learners) {
  AggregatorConfig config;
  config.source = "test";
  config.listen = HostPort::Tcp("127.0.0.1", 0);
  config.admin.listen = HostPort::Tcp("127.0.0.1", 0);
  config.learners = std::move(learners);
  config.service.min_learners = min_learners;
  config.connect.timeout = milliseconds(500);
  config.connect.attempt_timeout = milliseconds(1000);
  config.connect.backoff =
      BackoffOptions{milliseconds(50), 1.6, 0.0, milliseconds(200)};
  config.service.call_timeout = milliseconds(2000);
  return config;
}

inline std::unique_ptr<ExampleLearnerServer> StartLearner(
    ExampleLearnerOptions options = {},
    const std::string& address = "127.0.0.1:0") {
  auto learner = StartExampleLearner(options, address);
  REQUIRE(learner.ok());
  return std::move(*learner);
}

inline std::unique_ptr<AggregatorServer> StartAggregator(
    const AggregatorConfig& config) {
  auto server = AggregatorServer::Start(config);
  REQUIRE(server.ok());
  return std::move(*server);
}

// Starts and waits until min_learners are ready.
inline std::unique_ptr<AggregatorServer> StartReadyAggregator(
    const AggregatorConfig& config) {
  auto server = StartAggregator(config);
  REQUIRE(server->WaitUntilReady(Clock::now() + std::chrono::seconds(10)));
  return server;
}

inline std::unique_ptr<aggregator::v1::Learner::Stub> LearnerStub(
    const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return aggregator::v1::Learner::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

// A context whose deadline is `timeout` from now.
inline std::unique_ptr<grpc::ClientContext> Deadline(
    milliseconds timeout = milliseconds(5000)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

// `count` samples with meta.replay_unique_id "<prefix><i>" and `bytes` of data.
inline aggregator::v1::LearnRequest Batch(int count, const std::string& prefix,
                                          size_t bytes = 64) {
  return SyntheticBatch(count, static_cast<int64_t>(bytes), prefix);
}

inline std::vector<std::string> Ids(const std::string& prefix, int begin,
                                    int end) {
  std::vector<std::string> ids;
  for (int i = begin; i < end; ++i) ids.push_back(prefix + std::to_string(i));
  return ids;
}

// Serves `service` (a fake learner) on a free loopback port, with no message
// size limit; sets `*address` to where it listens.
inline std::unique_ptr<grpc::Server> ServeOnLoopback(grpc::Service* service,
                                                     std::string* address) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

// A loopback port nobody listens on (bound, then released).
inline int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

inline std::optional<LearnerState> StateOf(AggregatorServer& server,
                                           const std::string& id) {
  for (const LearnerSnapshot& status : server.pool().Status()) {
    if (status.id == id) return status.state;
  }
  return std::nullopt;
}

// The pool's learners in order, each id followed by " (not ready)" unless it
// is ready.
inline std::vector<std::string> PoolIds(AggregatorServer& server) {
  std::vector<std::string> ids;
  for (const LearnerSnapshot& learner : server.pool().Status()) {
    ids.push_back(learner.id + (learner.state == LearnerState::kReady
                                    ? ""
                                    : " (not ready)"));
  }
  return ids;
}

inline double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// aggregator_requests_total{rpc, code} of `server`'s metrics.
inline double RequestsCounted(AggregatorServer& server, const std::string& rpc,
                              const std::string& code) {
  for (const auto& family : server.metrics().collectable()->Collect()) {
    if (family.name != "aggregator_requests_total") continue;
    for (const auto& metric : family.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& label : metric.label) labels[label.name] = label.value;
      if (labels["rpc"] == rpc && labels["code"] == code) {
        return metric.counter.value;
      }
    }
  }
  return 0;
}

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_TEST_CLUSTER_H_
