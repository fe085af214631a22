// SliceSender: the call that sends one learner its share of a batch that
// arrives in pieces (LearnStream; lib/aggregation/stream_splitter.h).
//
// To a learner whose Resource says it serves LearnStream, each piece goes on
// as a message of its own as soon as it is given, the request's head (its
// plan_id and membership) leading the first; to any other learner the pieces
// are collected and sent as one Learn when the share is complete (Close).
// Either way the payload is never copied: pieces share the memory they were
// received in.
//
// Flow control: queued_bytes() counts what the sender was given and has not
// passed to the connection yet: a unary call's pieces until Close, a
// streamed call's until the connection takes them. A connection takes no
// more than its learner reads, so an owner that stops reading its own input
// while streamed senders hold too much holds no more than that.
//
// Thread-safety: Add and Close come from one thread at a time, in order;
// Cancel and queued_bytes() from any. The hooks run on gRPC threads, or
// within Add, Close or Cancel when gRPC completes an operation at once, never
// under the sender's lock. Ownership: the sender and its Call must outlive
// the call: once started() they may go only once on_done runs (within it is
// fine).
#ifndef LIB_LEARNERS_SLICE_SENDER_H_
#define LIB_LEARNERS_SLICE_SENDER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/learners/fan_out.h"
#include "proto/learner_names.h"

namespace aggregator {

class SliceSender final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  using Call = LearnerCall<grpc::ByteBuffer, grpc::ByteBuffer>;
  struct Hooks {
    // A streamed piece was taken by the connection: queued_bytes() fell.
    std::function<void()> on_sent;
    // The call is over: the Call holds its status, reply and times.
    std::function<void()> on_done;
    // What the Call's times are read from; null: SteadyClock(). Must outlive
    // the call.
    Clock* clock = nullptr;
  };

  // `call` names the learner and holds a fresh context (NewLearnerContext);
  // `head`: the serialized LearnRequest fields other than samples.
  SliceSender(Call* call, std::string head, Hooks hooks);

  // Whether the learner serves LearnStream (its Resource says so).
  bool streamed() const { return streamed_; }
  // Whether the call was started (then on_done will run).
  bool started() const;

  // The share's next samples (LearnRequest field 1 records), in order: sent
  // at once (streamed) or kept (unary). The first starts a streamed call.
  void Add(grpc::ByteBuffer samples, size_t bytes);
  // The share is complete: sends it (unary) or ends the stream. Starts the
  // call if no sample came (an empty share).
  void Close();
  // Cancels the call (its status: CANCELLED) and drops what is queued; one
  // not started yet never starts.
  void Cancel();

  size_t queued_bytes() const { return queued_bytes_.load(); }

 private:
  // The streamed call's reactions.
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // Starts a streamed call; `first` (its first message) is queued.
  void StartStream(grpc::ByteBuffer first, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts what the streamed call should do next: a write, the end of the
  // writes, the release of the hold that keeps it open for them. Not under
  // mu_: gRPC may run a reaction within it.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // The head followed by `samples`, as one message.
  grpc::ByteBuffer WithHead(const grpc::ByteBuffer& samples) const;
  void Finished(const grpc::Status& status);

  Call* const call_;
  const std::string head_;
  const Hooks hooks_;
  Clock& clock_;
  const bool streamed_;
  std::atomic<size_t> queued_bytes_{0};

  mutable Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Unary: the pieces so far, then the request (gRPC's until the call ends).
  std::vector<grpc::Slice> collected_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer request_;
  // Streamed: the messages waiting for the connection, the one being
  // written, and where the stream is.
  std::deque<std::pair<grpc::ByteBuffer, size_t>> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  size_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  // A write or the read failed: the call is over, nothing more is sent.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aggregator

#endif  // LIB_LEARNERS_SLICE_SENDER_H_
