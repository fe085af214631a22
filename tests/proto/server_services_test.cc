// An in-process server on 127.0.0.1:0 with the Learner service: gRPC reflection
// lists the services and grpc.health.v1 answers, as the daemon's server will.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "proto/learner.grpc.pb.h"

namespace {

class NullLearner final : public aggregator::v1::Learner::Service {};

struct TestServer {
  TestServer() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&learner);
    server = builder.BuildAndStart();
    REQUIRE(server);
    REQUIRE(port > 0);
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials());
  }
  ~TestServer() { server->Shutdown(std::chrono::system_clock::now()); }

  NullLearner learner;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
};

std::chrono::system_clock::time_point InFiveSeconds() {
  return std::chrono::system_clock::now() + std::chrono::seconds(5);
}

}  // namespace

TEST_CASE("Reflection lists the Learner service") {
  TestServer server;
  auto stub =
      grpc::reflection::v1alpha::ServerReflection::NewStub(server.channel);
  grpc::ClientContext context;
  context.set_deadline(InFiveSeconds());
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  REQUIRE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  REQUIRE(stream->Read(&response));
  std::set<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.insert(service.name());
  }
  while (stream->Read(&response)) {
  }
  REQUIRE(stream->Finish().ok());
  CHECK(names.count("aggregator.v1.Learner") == 1);
  CHECK(names.count("grpc.health.v1.Health") == 1);
  CHECK(names.count("grpc.reflection.v1alpha.ServerReflection") == 1);
}

TEST_CASE("grpc.health.v1 answers SERVING, then NOT_SERVING when told") {
  TestServer server;
  auto stub = grpc::health::v1::Health::NewStub(server.channel);
  auto check = [&] {
    grpc::ClientContext context;
    context.set_deadline(InFiveSeconds());
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = stub->Check(&context, request, &response);
    REQUIRE(status.ok());
    return response.status();
  };
  CHECK(check() == grpc::health::v1::HealthCheckResponse::SERVING);
  server.server->GetHealthCheckService()->SetServingStatus(false);
  CHECK(check() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST_CASE("An unimplemented Learner RPC fails promptly with UNIMPLEMENTED") {
  TestServer server;
  auto stub = aggregator::v1::Learner::NewStub(server.channel);
  grpc::ClientContext context;
  context.set_deadline(InFiveSeconds());
  aggregator::v1::Resource resource;
  const grpc::Status status = stub->GetResource(
      &context, aggregator::v1::GetResourceRequest(), &resource);
  CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
}
