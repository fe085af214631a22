// A learner's channel as LearnerPool makes it for each connection attempt:
// the C++ channel that calls use, and gRPC core's channel under it.
//
// The pool watches the connection on a callback completion queue, whose tags
// must be gRPC core functors. grpc::Channel::NotifyOnStateChange cannot take
// such a queue in gRPC 1.51 (it wraps the tag in one of its own), so the watch
// goes through core's grpc_channel_watch_connectivity_state, which needs the
// core channel: the channel is made the way grpc::CreateCustomChannel makes it
// (grpc_channel_create, then grpc::CreateChannelInternal from
// grpcpp/channel.h), keeping the core pointer.
#ifndef LIB_LEARNERS_LEARNER_CHANNEL_H_
#define LIB_LEARNERS_LEARNER_CHANNEL_H_

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <memory>

#include "lib/config/config.h"

namespace aggregator {

struct LearnerChannel {
  std::shared_ptr<grpc::Channel> channel;
  grpc_channel* core = nullptr;  // owned by `channel`, valid while it lives
};

// A channel to `endpoint` (plaintext, or its TLS) with `args`.
LearnerChannel MakeLearnerChannel(const LearnerEndpoint& endpoint,
                                  grpc::ChannelArguments args);

}  // namespace aggregator

#endif  // LIB_LEARNERS_LEARNER_CHANNEL_H_
