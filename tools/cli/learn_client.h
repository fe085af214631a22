// How a coordinator sends a training batch: Learn, or LearnStream for a batch
// over a threshold, so that an aggregator can pass each learner its slice
// while the rest of the batch is still on its way (proto/learner.proto).
// Used by aggregatorctl and the tests; the bench has its own zero-copy client.
#ifndef TOOLS_CLI_LEARN_CLIENT_H_
#define TOOLS_CLI_LEARN_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "proto/learner.grpc.pb.h"

namespace aggregator {

struct LearnOptions {
  // Batches of more than this many bytes (serialized) go by LearnStream.
  int64_t stream_threshold_bytes = 1 << 20;
  // Each LearnStream message carries consecutive samples of at most this
  // many bytes (a larger sample goes alone).
  int64_t stream_message_bytes = 1 << 20;
};

// The messages LearnStream sends for `batch`: the samples in order, the
// plan_id in the first (which a batch without samples is alone).
std::vector<aggregator::v1::LearnRequest> StreamMessages(
    const aggregator::v1::LearnRequest& batch, int64_t message_bytes);

// `batch` by LearnStream, in StreamMessages.
grpc::Status LearnStreamed(aggregator::v1::Learner::Stub& stub,
                           grpc::ClientContext* context,
                           const aggregator::v1::LearnRequest& batch,
                           int64_t message_bytes,
                           aggregator::v1::LearnReply* reply);

// Learn, or LearnStream for a batch over options.stream_threshold_bytes; a
// target that does not serve LearnStream (a plain learner: UNIMPLEMENTED)
// gets a Learn. Each attempt gets a fresh `context()`. `*streamed` (if
// given): whether the batch went by LearnStream.
grpc::Status LearnBatch(
    aggregator::v1::Learner::Stub& stub,
    const std::function<std::unique_ptr<grpc::ClientContext>()>& context,
    const aggregator::v1::LearnRequest& batch, const LearnOptions& options,
    aggregator::v1::LearnReply* reply, bool* streamed = nullptr);

}  // namespace aggregator

#endif  // TOOLS_CLI_LEARN_CLIENT_H_
