#include "lib/learners/callback_queue.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>

namespace aggregator {
namespace {

// A channel that never connects, with one callback call made on it: gRPC
// counts a channel as a user of the shared queue from its first callback call
// until it is destroyed, which this one never is. The call is cancelled
// before it starts; its state is never freed either, as gRPC may still
// complete it at any time.
struct Keeper {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel("unix:/nonexistent/aggregator-callback-queue",
                          grpc::InsecureChannelCredentials());
  grpc::GenericStub stub{channel};
  grpc::ClientContext context;
  grpc::Slice empty;
  grpc::ByteBuffer request{&empty, 1};  // an empty message, but a message
  grpc::ByteBuffer reply;

  Keeper() {
    context.TryCancel();
    stub.UnaryCall(&context, "/aggregator.v1.Learner/GetResource",
                   grpc::StubOptions(), &request, &reply,
                   [](const grpc::Status&) {});
  }
};

}  // namespace

void KeepGrpcCallbackQueue() {
  static Keeper* const keeper = new Keeper();  // never destroyed
  (void)keeper;
}

}  // namespace aggregator
