// KeepGrpcCallbackQueue: Debian's gRPC 1.51 (the epoll1 poller, no background
// polling) runs every callback-API completion (our reactors, our unary
// callbacks) on a few threads polling one completion queue that the whole
// process shares, and tears that queue down when its last user, a channel or
// server that has made or served a callback call, is destroyed. A callback
// that destroys that last user (a finished call dropping the LearnerHandle
// that was the last holder of a removed learner's channel) tears the queue
// down from one of its own threads: gRPC cannot join that thread, deletes the
// queue under it, and the thread then frees the queue a second time
// (grpc/grpc#32584, #37858; heap corruption under TSan, a double free under
// ASan: tests/learners/last_handle_in_callback_test).
#ifndef LIB_LEARNERS_CALLBACK_QUEUE_H_
#define LIB_LEARNERS_CALLBACK_QUEUE_H_

namespace aggregator {

// Makes the process one more user of that queue for as long as it runs, so
// the queue is never torn down. Idempotent and thread-safe; call it before
// the first callback call whose callback may drop a channel.
void KeepGrpcCallbackQueue();

}  // namespace aggregator

#endif  // LIB_LEARNERS_CALLBACK_QUEUE_H_
