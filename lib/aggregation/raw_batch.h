// RawBatch: a LearnRequest as it arrived, in gRPC slices, split at sample
// boundaries without parsing or copying the samples.
//
// The aggregator never looks inside a sample, so Learn reads only the wire
// format's field headers (a few bytes per sample) to find where each sample
// record starts and ends, then sends each learner a request made of sub-slices
// of the received buffer plus its own plan_id field. The payload bytes are
// never copied: not on receipt (no parse), not per learner (sub-slices share
// the received memory), so the aggregator holds about one copy of a batch
// however many learners there are.
//
// Thread-safety: a RawBatch is immutable after Parse; Slice may be called from
// any thread. The slices are reference-counted and outlive the batch as needed.
#ifndef LIB_AGGREGATION_RAW_BATCH_H_
#define LIB_AGGREGATION_RAW_BATCH_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

class RawBatch {
 public:
  // Finds the samples (field 1) and plan_id (field 2) of a serialized
  // LearnRequest; other fields are skipped. INVALID_ARGUMENT when the bytes are
  // not a well-formed message.
  static absl::StatusOr<RawBatch> Parse(const grpc::ByteBuffer& request);

  size_t sample_count() const { return samples_.size(); }
  const std::string& plan_id() const { return plan_id_; }
  // Bytes of samples [first, first + count), headers included.
  size_t SliceBytes(size_t first, size_t count) const;

  // A serialized LearnRequest holding samples [first, first + count) and
  // `plan_id` (omitted when empty), sharing this batch's memory.
  grpc::ByteBuffer Slice(size_t first, size_t count,
                         const std::string& plan_id) const;

 private:
  struct Range {
    size_t begin;  // offsets into the whole message
    size_t end;
  };

  std::vector<grpc::Slice> slices_;
  std::vector<size_t> slice_starts_;  // offset of each slice in the message
  std::vector<Range> samples_;
  std::string plan_id_;
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_RAW_BATCH_H_
