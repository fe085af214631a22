// RawBatch: a LearnRequest as it arrived, in gRPC slices, cut at sample
// boundaries without parsing or copying the samples.
//
// The aggregator never looks inside a sample, so Learn reads only the wire
// format's field headers (a few bytes per sample) to find where each sample
// record starts and ends, then sends each learner a request made of sub-slices
// of the received buffer plus its own plan_id field. The payload bytes are
// never copied: not on receipt (no parse), not per learner (sub-slices share
// the received memory).
//
// Memory is bounded by the request, not by its sample count: Scan only counts
// (and stops at `max_samples`), and Cut keeps one byte range per learner and
// per run of samples between other fields, so a request of millions of empty
// samples costs no more bookkeeping than one of a few large ones.
//
// Thread-safety: a RawBatch is immutable after Scan; Cut may be called from
// any thread. The slices are reference-counted and outlive the batch as needed.
#ifndef LIB_AGGREGATION_RAW_BATCH_H_
#define LIB_AGGREGATION_RAW_BATCH_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

class RawBatch {
 public:
  // One learner's share of a batch: a serialized LearnRequest.
  struct Part {
    grpc::ByteBuffer request;
    size_t sample_bytes = 0;  // of the samples it holds, headers included
  };

  // Reads the field headers of a serialized LearnRequest: counts its samples
  // (field 1) and keeps its plan_id (field 2; the last one wins, as in
  // protobuf); other fields are skipped (at most 16) and not passed on.
  // INVALID_ARGUMENT when the bytes are not a well-formed message or hold more
  // than `max_samples` samples (it stops reading there).
  static absl::StatusOr<RawBatch> Scan(const grpc::ByteBuffer& request,
                                       int64_t max_samples);
  // As Scan, but more than `max_samples` samples is not an error: the scan
  // stops at the first sample past them and exceeds() says so (such a batch
  // cannot be Cut). For callers that word that error themselves.
  static absl::StatusOr<RawBatch> ScanUpTo(const grpc::ByteBuffer& request,
                                           int64_t max_samples);

  bool exceeds() const { return exceeds_; }

  size_t sample_count() const { return sample_count_; }
  const std::string& plan_id() const { return plan_id_; }
  size_t size() const { return size_; }

  // Consecutive parts of `counts[i]` samples each (they must add up to
  // sample_count()), part i carrying plan_ids[i] (omitted when empty), then
  // `trailer` (serialized LearnRequest fields every part carries, e.g. its
  // membership). They share this batch's memory.
  absl::StatusOr<std::vector<Part>> Cut(
      const std::vector<size_t>& counts,
      const std::vector<std::string>& plan_ids,
      const std::string& trailer = "") const;

 private:
  std::vector<grpc::Slice> slices_;
  std::vector<size_t> slice_starts_;  // offset of each slice in the message
  size_t size_ = 0;
  size_t sample_count_ = 0;
  std::string plan_id_;
  bool exceeds_ = false;
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_RAW_BATCH_H_
