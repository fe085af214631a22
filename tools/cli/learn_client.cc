#include "tools/cli/learn_client.h"

#include "proto/learner_names.h"

namespace aggregator {

namespace pb = aggregator::v1;

std::vector<pb::LearnRequest> StreamMessages(const pb::LearnRequest& batch,
                                             int64_t message_bytes) {
  std::vector<pb::LearnRequest> messages(1);
  messages[0].set_plan_id(batch.plan_id());
  int64_t bytes = 0;
  for (const pb::Sample& sample : batch.samples()) {
    const int64_t size = static_cast<int64_t>(sample.ByteSizeLong());
    if (messages.back().samples_size() > 0 && bytes + size > message_bytes) {
      messages.emplace_back();
      bytes = 0;
    }
    *messages.back().add_samples() = sample;
    bytes += size;
  }
  return messages;
}

grpc::Status LearnStreamed(pb::Learner::Stub& stub,
                           grpc::ClientContext* context,
                           const pb::LearnRequest& batch, int64_t message_bytes,
                           pb::LearnReply* reply) {
  std::unique_ptr<grpc::ClientWriter<pb::LearnRequest>> writer =
      stub.LearnStream(context, reply);
  for (const pb::LearnRequest& message : StreamMessages(batch, message_bytes)) {
    // A failed write means the call is over: Finish says why.
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status LearnBatch(
    pb::Learner::Stub& stub,
    const std::function<std::unique_ptr<grpc::ClientContext>()>& context,
    const pb::LearnRequest& batch, const LearnOptions& options,
    pb::LearnReply* reply, bool* streamed) {
  if (streamed != nullptr) *streamed = false;
  if (static_cast<int64_t>(batch.ByteSizeLong()) >
      options.stream_threshold_bytes) {
    std::unique_ptr<grpc::ClientContext> stream_context = context();
    const grpc::Status status = LearnStreamed(
        stub, stream_context.get(), batch, options.stream_message_bytes, reply);
    // An aggregator (it names itself in its metadata) serves LearnStream:
    // its UNIMPLEMENTED is a learner's answer, and the plan may have trained
    // some learners, so only a plain learner's is retried as a Learn.
    const bool aggregator =
        stream_context->GetServerInitialMetadata().count(kAggregatorIdKey) > 0;
    if (status.error_code() != grpc::StatusCode::UNIMPLEMENTED || aggregator) {
      if (streamed != nullptr) *streamed = true;
      return status;
    }
  }
  return stub.Learn(context().get(), batch, reply);
}

}  // namespace aggregator
