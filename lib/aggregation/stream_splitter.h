// StreamSplitter: routes a batch that arrives as a stream of LearnRequests
// (LearnStream) to the learners of its plan as it arrives: learner i takes
// the next counts[i] samples. Each message's samples are cut into per-learner
// pieces that share the message's received memory
// (lib/aggregation/raw_batch.h), so a learner's share can go on while later
// messages are still on their way.
//
// Thread-safety: none; a stream's messages arrive one at a time.
#ifndef LIB_AGGREGATION_STREAM_SPLITTER_H_
#define LIB_AGGREGATION_STREAM_SPLITTER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/aggregation/raw_batch.h"

namespace aggregator {

class StreamSplitter {
 public:
  // Some consecutive samples of one learner's share: LearnRequest field 1
  // records, ready to be sent as (part of) a LearnRequest.
  struct Piece {
    size_t learner = 0;  // index into the counts
    grpc::ByteBuffer samples;
    size_t count = 0;
    size_t bytes = 0;  // of the records, headers included
  };

  // `counts[i]`: the samples learner i takes, in learner order.
  explicit StreamSplitter(std::vector<size_t> counts);

  // Cuts the next message into pieces, in learner order. The message must
  // not hold more samples than remaining() (a scan up to that many tells,
  // RawBatch::ScanUpTo); INTERNAL otherwise.
  absl::StatusOr<std::vector<Piece>> Add(const RawBatch& message);

  size_t total() const { return total_; }
  size_t received() const { return received_; }
  size_t remaining() const { return total_ - received_; }
  // How many leading learners have their whole share (a learner with none
  // has it at once).
  size_t complete() const;

 private:
  const std::vector<size_t> counts_;
  size_t total_ = 0;
  size_t received_ = 0;
  size_t learner_ = 0;  // the learner the next sample goes to
  size_t taken_ = 0;    // samples of learner_'s share so far
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_STREAM_SPLITTER_H_
