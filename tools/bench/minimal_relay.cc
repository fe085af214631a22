// minimal_relay: the least a gRPC relay can do for aggregatord's fan-out, the
// bench's floor for section 1. Every call, whatever its method, goes to every
// learner (a Learn's samples cut into equal consecutive slices on the wire);
// the answers' bytes are concatenated (protobuf's merge: lists append, the last
// scalar wins) into the reply. No checks, no plans, no merge rules, no
// metrics: what is left is the cost any relay pays (a server call, N client
// calls, one reply), on gRPC's generic callback API. Not for production: a
// failed learner fails the call with its status, nothing more.
//
// Prints "minimal_relay listening on <address>" once it serves; stops on
// SIGTERM or SIGINT.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "proto/learner_names.h"

namespace aggregator::bench {
namespace {

constexpr auto kLearnerDeadline = std::chrono::seconds(10);

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// A LearnRequest (`request`, which must outlive the result) cut into `parts`
// requests: the samples (field 1) in equal consecutive runs, every other field
// in each. Read on the wire, as a relay that splits must at least do; each
// part's slices point into `request`, so no sample is copied.
std::vector<std::vector<grpc::Slice>> SplitLearn(const std::string& request,
                                                 int parts) {
  using google::protobuf::internal::WireFormatLite;
  using Range = std::pair<size_t, size_t>;  // offset, length
  std::vector<Range> samples, common;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(request.data()),
      static_cast<int>(request.size()));
  while (true) {
    const size_t start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0 || !WireFormatLite::SkipField(&in, tag)) break;
    const Range field(start, in.CurrentPosition() - start);
    (WireFormatLite::GetTagFieldNumber(tag) == 1 ? samples : common)
        .push_back(field);
  }
  // Adjacent fields go out as one slice.
  std::vector<std::vector<Range>> ranges(parts, common);
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<Range>& part = ranges[i * parts / samples.size()];
    if (!part.empty() &&
        part.back().first + part.back().second == samples[i].first) {
      part.back().second += samples[i].second;
    } else {
      part.push_back(samples[i]);
    }
  }
  std::vector<std::vector<grpc::Slice>> requests(parts);
  for (int i = 0; i < parts; ++i) {
    for (const Range& range : ranges[i]) {
      requests[i].emplace_back(request.data() + range.first, range.second,
                               grpc::Slice::STATIC_SLICE);
    }
  }
  return requests;
}

// One call: read the request, call every learner, reply with their answers'
// bytes. Deletes itself when gRPC is done with it.
class RelayedCall : public grpc::ServerGenericBidiReactor {
 public:
  RelayedCall(grpc::GenericCallbackServerContext* context,
              std::vector<std::unique_ptr<grpc::GenericStub>>* learners)
      : context_(context),
        learners_(*learners),
        calls_(learners->size()),
        remaining_(static_cast<int>(learners->size())) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request"));
      return;
    }
    const int parts = static_cast<int>(learners_.size());
    std::vector<std::vector<grpc::Slice>> requests;
    if (context_->method() == kLearnMethod) {
      learn_ = Flatten(request_);
      requests = SplitLearn(learn_, parts);
    }
    for (int i = 0; i < parts; ++i) {
      Upstream& call = calls_[i];
      call.context.set_deadline(std::chrono::system_clock::now() +
                                kLearnerDeadline);
      if (requests.empty()) {
        call.request = request_;
      } else {
        call.request = grpc::ByteBuffer(requests[i].data(), requests[i].size());
      }
      learners_[i]->UnaryCall(&call.context, context_->method(),
                              grpc::StubOptions(), &call.request,
                              &call.response, [this, i](grpc::Status status) {
                                calls_[i].status = std::move(status);
                                if (--remaining_ == 0) Reply();
                              });
    }
  }

  void OnWriteDone(bool /*ok*/) override {}
  void OnDone() override { delete this; }

 private:
  struct Upstream {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    grpc::Status status;
  };

  void Reply() {
    std::vector<grpc::Slice> slices;
    for (Upstream& call : calls_) {
      if (!call.status.ok()) {
        Finish(call.status);
        return;
      }
      std::vector<grpc::Slice> parts;
      (void)call.response.Dump(&parts);
      slices.insert(slices.end(), parts.begin(), parts.end());
    }
    reply_ = grpc::ByteBuffer(slices.data(), slices.size());
    StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
  }

  grpc::GenericCallbackServerContext* const context_;
  std::vector<std::unique_ptr<grpc::GenericStub>>& learners_;
  grpc::ByteBuffer request_;
  std::string learn_;  // a Learn's bytes, which its parts' slices point into
  grpc::ByteBuffer reply_;
  std::vector<Upstream> calls_;
  std::atomic<int> remaining_;
};

class MinimalRelay : public grpc::CallbackGenericService {
 public:
  explicit MinimalRelay(const std::vector<std::string>& addresses) {
    for (const std::string& address : addresses) {
      learners_.push_back(std::make_unique<grpc::GenericStub>(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    }
  }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new RelayedCall(context, &learners_);
  }

 private:
  std::vector<std::unique_ptr<grpc::GenericStub>> learners_;
};

}  // namespace
}  // namespace aggregator::bench

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::string listen = "127.0.0.1:0";
  std::vector<std::string> learners;
  CLI::App app{"minimal_relay: the least a gRPC relay does (tools/bench)"};
  app.add_option("--listen", listen, "address to serve on (port 0: any)");
  app.add_option("--learner", learners, "a learner's address (repeatable)")
      ->required();
  CLI11_PARSE(app, argc, argv);

  aggregator::bench::MinimalRelay relay(learners);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterCallbackGenericService(&relay);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "minimal_relay: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::cout << "minimal_relay listening on " << host << ":" << port
            << std::endl;
  int signo = 0;
  sigwait(&signals, &signo);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
