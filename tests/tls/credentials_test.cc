// TLS and mTLS on both sides, against real listeners on loopback: coordinator
// -> aggregator (the Learner listener and the admin listener), aggregator ->
// example learners, a certificate rotated on disk + reload, and the admin
// service only on its own listener. Certificates are made with the openssl
// command at test time.
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/config/config_loader.h"
#include "lib/server/aggregator_server.h"
#include "proto/admin.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/tls_certificates.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using testing::Certs;
using testing::Deadline;
using testing::kLongWait;
using testing::Shell;
using testing::Spawn;
using testing::WriteFile;

// A client of the aggregator: TLS trusting `ca`, presenting `cert` if set.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                          const std::string& ca,
                                          const std::string& cert = "") {
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = Certs().Read(ca + ".crt");
  if (!cert.empty()) {
    tls.pem_cert_chain = Certs().Read(cert + ".crt");
    tls.pem_private_key = Certs().Read(cert + ".key");
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

std::shared_ptr<grpc::Channel> PlainChannel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

grpc::Status GetResource(const std::shared_ptr<grpc::Channel>& channel) {
  pb::Resource resource;
  return pb::Learner::NewStub(channel)->GetResource(
      Deadline(std::chrono::milliseconds(3000)).get(), {}, &resource);
}

// An example learner serving TLS with `cert` (mTLS with `client_ca`).
std::unique_ptr<ExampleLearnerServer> TlsLearner(
    const std::string& cert, const std::string& client_ca = "",
    ExampleLearnerOptions options = {}) {
  grpc::SslServerCredentialsOptions tls(
      client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  tls.pem_key_cert_pairs.push_back(
      {Certs().Read(cert + ".key"), Certs().Read(cert + ".crt")});
  if (!client_ca.empty()) tls.pem_root_certs = Certs().Read(client_ca + ".crt");
  auto learner = StartExampleLearner(options, "127.0.0.1:0", int64_t{1} << 30,
                                     grpc::SslServerCredentials(tls));
  REQUIRE(learner.ok());
  return std::move(*learner);
}

// The aggregator on a configuration file (so its PEM files are read as the
// daemon reads them), listening and admin on free loopback ports.
struct Aggregator {
  explicit Aggregator(const std::string& body, int min_learners = 1) {
    path = WriteFile(testing::TempDir() + "/aggregator.yaml",
                     Yaml(body, min_learners));
    auto config = LoadConfigFile(path);
    INFO(config.status().ToString());
    REQUIRE(config.ok());
    auto started = AggregatorServer::Start(*config);
    INFO(started.status().ToString());
    REQUIRE(started.ok());
    server = std::move(*started);
  }

  static std::string Yaml(const std::string& body, int min_learners) {
    return "listen: \"127.0.0.1:0\"\nadmin: {listen: \"127.0.0.1:0\"}\n"
           "min_learners: " +
           std::to_string(min_learners) +
           "\nconnect: {timeout: 2s, attempt_timeout: 1s, backoff: "
           "{initial: 50ms, max: 200ms}}\n" +
           body;
  }

  // Rewrites the file and reloads it.
  absl::StatusOr<ReloadResult> Reload(const std::string& body,
                                      int min_learners = 1) {
    WriteFile(path, Yaml(body, min_learners));
    auto config = LoadConfigFile(path);
    if (!config.ok()) return config.status();
    return server->Reload(*config);
  }

  std::string path;
  std::unique_ptr<AggregatorServer> server;
};

std::string PlainLearners(const std::string& address) {
  return "learners:\n  - {id: l0, address: \"" + address + "\"}\n";
}

std::string ServerTls(const std::string& cert,
                      const std::string& client_ca = "") {
  std::string yaml = "tls:\n  cert: " + Certs().Path(cert + ".crt") +
                     "\n  key: " + Certs().Path(cert + ".key") + "\n";
  if (!client_ca.empty()) {
    yaml += "  client_ca: " + Certs().Path(client_ca + ".crt") + "\n";
  }
  return yaml;
}

TEST_CASE("A coordinator calls the aggregator over TLS; plaintext is refused") {
  auto learner = testing::StartLearner();
  Aggregator aggregator(ServerTls("server") + PlainLearners(learner->address));
  REQUIRE(aggregator.server->WaitUntilReady(testing::Clock::now() + kLongWait));
  const std::string address = aggregator.server->address();

  CHECK(GetResource(TlsChannel(address, "ca")).ok());
  const grpc::Status plain = GetResource(PlainChannel(address));
  CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA does not accept the aggregator.
  CHECK(GetResource(TlsChannel(address, "other-ca")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  // The admin listener has the same TLS.
  pb::AggregatorStatus status;
  CHECK(pb::AggregatorAdmin::NewStub(
            TlsChannel(aggregator.server->admin_address(), "ca"))
            ->GetStatus(Deadline().get(), {}, &status)
            .ok());
  CHECK_FALSE(pb::AggregatorAdmin::NewStub(
                  PlainChannel(aggregator.server->admin_address()))
                  ->GetStatus(Deadline().get(), {}, &status)
                  .ok());
}

TEST_CASE("With client_ca only clients with a certificate it signed get in") {
  auto learner = testing::StartLearner();
  Aggregator aggregator(ServerTls("server", "ca") +
                        PlainLearners(learner->address));
  REQUIRE(aggregator.server->WaitUntilReady(testing::Clock::now() + kLongWait));
  const std::string address = aggregator.server->address();

  CHECK(GetResource(TlsChannel(address, "ca", "client")).ok());
  CHECK(GetResource(TlsChannel(address, "ca")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);  // no certificate
  CHECK(GetResource(TlsChannel(address, "ca", "stranger")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);  // another CA's
  CHECK(GetResource(PlainChannel(address)).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("The aggregator calls learners over TLS and mTLS") {
  auto tls = TlsLearner("server");
  auto mtls = TlsLearner("server", /*client_ca=*/"ca");
  const std::string ca = Certs().Path("ca.crt");
  Aggregator aggregator(
      "learner_tls: {ca: " + ca +
          ", server_name: localhost}\n"
          "learners:\n"
          "  - {id: tls, address: \"" +
          tls->address +
          "\"}\n"
          "  - id: mtls\n"
          "    address: \"" +
          mtls->address + "\"\n    tls: {ca: " + ca +
          ", server_name: localhost, cert: " + Certs().Path("client.crt") +
          ", key: " + Certs().Path("client.key") + "}\n",
      /*min_learners=*/2);
  REQUIRE(aggregator.server->WaitUntilReady(testing::Clock::now() + kLongWait));
  auto stub = testing::LearnerStub(aggregator.server->address());
  pb::Resource resource;
  REQUIRE(stub->GetResource(Deadline().get(), {}, &resource).ok());
  CHECK(resource.learners() == 2);
}

// The status of learner `id` once it has failed at least once.
LearnerSnapshot FailedLearner(AggregatorServer& server, const std::string& id) {
  LearnerSnapshot found;
  REQUIRE(testing::Eventually(
      [&] {
        for (const LearnerSnapshot& learner : server.pool().Status()) {
          if (learner.id == id && !learner.last_error.empty()) {
            found = learner;
            return true;
          }
        }
        return false;
      },
      kLongWait));
  return found;
}

TEST_CASE("A learner whose certificate does not match is not ready, and why") {
  auto wrong_name = TlsLearner("wrong-name");
  auto other_ca = TlsLearner("stranger");
  auto needs_cert = TlsLearner("server", /*client_ca=*/"ca");
  const std::string ca = Certs().Path("ca.crt");
  Aggregator aggregator("learner_tls: {ca: " + ca +
                            ", server_name: localhost}\n"
                            "learners:\n"
                            "  - {id: name, address: \"" +
                            wrong_name->address +
                            "\"}\n"
                            "  - {id: ca, address: \"" +
                            other_ca->address +
                            "\"}\n"
                            "  - {id: cert, address: \"" +
                            needs_cert->address + "\"}\n",
                        /*min_learners=*/0);
  // What gRPC says about each: the name, the CA, or a peer that closes the
  // handshake because it wanted our certificate.
  const std::vector<std::pair<std::string, std::string>> reasons = {
      {"name", "Peer name localhost is not in peer certificate"},
      {"ca", "certificate verify failed"},
      {"cert", "Socket closed"}};
  for (const auto& [id, reason] : reasons) {
    const LearnerSnapshot learner = FailedLearner(*aggregator.server, id);
    INFO(id << ": " << learner.last_error);
    CHECK(learner.state != LearnerState::kReady);
    // (A learner that wants our certificate may reject its absence only once
    // the channel is up, under TLS 1.3: then the probe call reports it.)
    CHECK_THAT(learner.last_error, Catch::Contains(reason));
  }
  CHECK(aggregator.server->pool().ReadyCount() == 0);
}

TEST_CASE("A certificate rotated on disk is served after a reload") {
  const std::string dir = testing::TempDir();
  auto copy = [&](const std::string& from) {
    Shell("cp " + Certs().Path(from + ".crt") + " " + dir + "/tls.crt && cp " +
          Certs().Path(from + ".key") + " " + dir + "/tls.key");
  };
  copy("server");
  testing::CaptureSink& logs = testing::CapturedLogs();
  ExampleLearnerOptions slow;
  slow.delay = std::chrono::milliseconds(1500);
  slow.delay_on = "Learn";
  auto learner = testing::StartLearner(slow);
  const std::string tls =
      "tls: {cert: " + dir + "/tls.crt, key: " + dir + "/tls.key}\n";
  Aggregator aggregator(tls + PlainLearners(learner->address));
  REQUIRE(aggregator.server->WaitUntilReady(testing::Clock::now() + kLongWait));
  const std::string address = aggregator.server->address();
  // The fixture's certificates are valid for 2 days: a week's warning.
  const std::string expires_soon =
      "tls.cert " + dir + "/tls.crt: certificate 1 (CN=localhost) expires at ";
  CHECK(logs.Count(expires_soon) == 1);
  auto fingerprint = [&](const std::string& pem_file) {
    auto process = Spawn(
        {"/bin/sh", "-c", "openssl x509 -noout -fingerprint -in " + pem_file});
    return testing::ReadAll(*process, false);
  };

  // A Learn in flight on the old certificate's connection.
  auto channel = TlsChannel(address, "ca");
  auto stub = pb::Learner::NewStub(channel);
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  pb::LearnRequest request = testing::Batch(demand.batch_size(), "r");
  request.set_plan_id(demand.plan_id());
  grpc::Status learn_status;
  std::thread learn([&] {
    pb::LearnReply reply;
    learn_status = stub->Learn(Deadline().get(), request, &reply);
  });

  copy("server-b");
  auto reloaded = aggregator.Reload(tls + PlainLearners(learner->address));
  REQUIRE(reloaded.ok());
  CHECK_THAT(reloaded->summary, Catch::Contains("tls certificates"));
  CHECK(logs.Count(expires_soon) == 2);
  learn.join();
  CHECK(learn_status.ok());

  // A new connection gets the new certificate: read it off the wire.
  const std::string served = Certs().dir + "/served.pem";
  Shell("echo | openssl s_client -connect " + address +
        " -servername localhost 2>/dev/null | openssl x509 > " + served);
  CHECK(fingerprint(served) == fingerprint(Certs().Path("server-b.crt")));
  CHECK(GetResource(TlsChannel(address, "ca")).ok());

  // A bad file keeps the running certificate.
  Shell("echo garbage > " + dir + "/tls.crt");
  auto broken = aggregator.Reload(tls + PlainLearners(learner->address));
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(std::string(broken.status().message()),
             Catch::Contains(dir + "/tls.crt"));
  Shell("echo | openssl s_client -connect " + address +
        " -servername localhost 2>/dev/null | openssl x509 > " + served);
  CHECK(fingerprint(served) == fingerprint(Certs().Path("server-b.crt")));

  // So do an expired and a not yet valid one (issue 26 item 4: taken, then
  // every new client failed), named with the key's line and column.
  for (const std::string dated : {"expired", "future"}) {
    copy(dated);
    auto refused = aggregator.Reload(tls + PlainLearners(learner->address));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(
        std::string(refused.status().message()),
        Catch::Contains(":5:13: tls.cert: \"" + dir +
                        "/tls.crt\": certificate 1 (CN=localhost) ") &&
            Catch::Contains(dated == "expired" ? " expired at "
                                               : " is not valid before "));
    Shell("echo | openssl s_client -connect " + address +
          " -servername localhost 2>/dev/null | openssl x509 > " + served);
    CHECK(fingerprint(served) == fingerprint(Certs().Path("server-b.crt")));
  }
  CHECK(GetResource(TlsChannel(address, "ca")).ok());
}

TEST_CASE("AggregatorAdmin is served on the admin listener only") {
  auto learner = testing::StartLearner();
  bool reloaded = false;
  auto config =
      ParseConfig(Aggregator::Yaml(PlainLearners(learner->address), 1), "test");
  REQUIRE(config.ok());
  SECTION("on TCP") {}
  SECTION("on a unix socket") {
    // Under /tmp: a test's own directory is too long for a socket path.
    std::string dir = "/tmp/adminXXXXXX";
    REQUIRE(mkdtemp(dir.data()) != nullptr);
    config->admin.listen = HostPort::Unix(dir + "/admin.sock");
  }
  ServerOptions options;
  options.reload = [&]() -> absl::StatusOr<ReloadResult> {
    reloaded = true;
    return ReloadResult{2, "no changes"};
  };
  auto server = AggregatorServer::Start(*config, options);
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  pb::ReloadReply reply;
  const grpc::Status on_learner_port =
      pb::AggregatorAdmin::NewStub(PlainChannel((*server)->address()))
          ->Reload(Deadline().get(), {}, &reply);
  CHECK(on_learner_port.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  CHECK_FALSE(reloaded);
  const grpc::Status on_admin =
      pb::AggregatorAdmin::NewStub(PlainChannel((*server)->admin_address()))
          ->Reload(Deadline().get(), {}, &reply);
  CHECK(on_admin.ok());
  CHECK(reloaded);
  CHECK_THAT((*server)->admin_address(),
             Catch::StartsWith(config->admin.listen->is_unix() ? "unix:/"
                                                               : "127.0.0.1:"));
}

}  // namespace
}  // namespace aggregator
