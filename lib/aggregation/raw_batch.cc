#include "lib/aggregation/raw_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/aggregation/wire_reader.h"

namespace aggregator {
namespace {

constexpr uint32_t kSamplesField = 1;
constexpr uint32_t kPlanIdField = 2;
// A plan id is a short token; anything longer is not one.
constexpr uint64_t kMaxPlanIdBytes = 1024;
// A client sends one plan_id and nothing else but samples. A few other fields
// (a newer client's) are skipped; millions would cost Cut a byte range each.
constexpr size_t kMaxOtherFields = 16;

// Calls `field` (bool(const WireReader::Field&, WireReader&), at the field's
// body, which it may read) for every field of the message, in order, until it
// returns false. Other fields than samples count against kMaxOtherFields:
// each splits a run of samples (and costs Cut a byte range). A template, not a
// std::function: it runs once per sample.
template <typename Visit>
absl::Status ForEachField(const std::vector<grpc::Slice>& slices,
                          const Visit& field) {
  std::vector<absl::string_view> chunks;
  chunks.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    chunks.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                        slice.size());
  }
  WireReader reader(chunks);
  auto malformed = [&](const std::string& what, size_t at) {
    return absl::InvalidArgumentError(
        absl::StrCat("Learn request is not a valid LearnRequest: ", what,
                     " at byte ", at, " of ", reader.size()));
  };
  size_t others = 0;
  WireReader::Field record;
  while (!reader.done()) {
    const size_t begin = reader.position();
    if (!reader.NextHeader(&record)) return malformed(reader.error(), begin);
    const uint32_t number = record.number;
    if (number != kSamplesField && ++others > kMaxOtherFields) {
      return malformed(absl::StrCat("more than ", kMaxOtherFields,
                                    " fields other than samples"),
                       begin);
    }
    if ((number == kSamplesField || number == kPlanIdField) &&
        record.type != WireReader::kLengthDelimited) {
      return malformed(
          absl::StrCat("field ", number, " of wire type ", record.type), begin);
    }
    if (number == kPlanIdField && record.end - record.body > kMaxPlanIdBytes) {
      return malformed(
          absl::StrCat("a plan_id of ", record.end - record.body, " bytes"),
          begin);
    }
    if (!field(record, reader)) return absl::OkStatus();
    // `field` may have read the body; skip what it left.
    if (reader.position() < record.end) reader.SkipBody(record);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RawBatch> RawBatch::Scan(const grpc::ByteBuffer& request,
                                        int64_t max_samples) {
  absl::StatusOr<RawBatch> batch = ScanUpTo(request, max_samples);
  if (batch.ok() && batch->exceeds()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Learn request holds more than ", max_samples,
        " samples, more than any plan demands; call GetData and send what it "
        "demands"));
  }
  return batch;
}

absl::StatusOr<RawBatch> RawBatch::ScanUpTo(const grpc::ByteBuffer& request,
                                            int64_t max_samples) {
  RawBatch batch;
  if (!request.Valid()) return batch;  // no bytes at all: an empty message
  if (grpc::Status dumped = request.Dump(&batch.slices_); !dumped.ok()) {
    return absl::InternalError(absl::StrCat("cannot read the Learn request: ",
                                            dumped.error_message()));
  }
  for (const grpc::Slice& slice : batch.slices_) {
    batch.slice_starts_.push_back(batch.size_);
    batch.size_ += slice.size();
  }
  absl::Status scanned = ForEachField(
      batch.slices_, [&](const WireReader::Field& field, WireReader& reader) {
        if (field.number == kPlanIdField) {
          batch.plan_id_.clear();  // the last one wins, as in protobuf
          reader.ReadBody(field, &batch.plan_id_);
          return true;
        }
        if (field.number != kSamplesField) return true;
        if (static_cast<int64_t>(++batch.sample_count_) > max_samples) {
          batch.exceeds_ = true;
          return false;
        }
        return true;
      });
  if (!scanned.ok()) return scanned;
  return batch;
}

absl::StatusOr<std::vector<RawBatch::Part>> RawBatch::Cut(
    const std::vector<size_t>& counts, const std::vector<std::string>& plan_ids,
    const std::string& trailer) const {
  size_t total = 0;
  for (size_t count : counts) total += count;
  if (exceeds_ || total != sample_count_ || plan_ids.size() != counts.size()) {
    return absl::InternalError(absl::StrCat(
        "RawBatch::Cut: parts of ", total, " samples for ", sample_count_, ", ",
        plan_ids.size(), " plan ids for ", counts.size(), " parts"));
  }
  // Byte ranges of each part: a run of consecutive sample records is one
  // range; a plan_id field between samples ends a run.
  std::vector<std::vector<std::pair<size_t, size_t>>> ranges(counts.size());
  std::vector<size_t> bytes(counts.size(), 0);
  size_t part = 0;
  size_t taken = 0;  // samples of `part` so far
  absl::Status cut =
      ForEachField(slices_, [&](const WireReader::Field& field, WireReader&) {
        if (field.number != kSamplesField) return true;
        while (part < counts.size() && taken == counts[part]) {
          ++part;
          taken = 0;
        }
        auto& runs = ranges[part];
        if (!runs.empty() && runs.back().second == field.begin) {
          runs.back().second = field.end;
        } else {
          runs.emplace_back(field.begin, field.end);
        }
        bytes[part] += field.end - field.begin;
        ++taken;
        return true;
      });
  if (!cut.ok()) return cut;

  std::vector<Part> parts(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    std::vector<grpc::Slice> pieces;
    for (const auto& [begin, end] : ranges[i]) {
      // The slices covering [begin, end), trimmed to it.
      size_t s =
          std::upper_bound(slice_starts_.begin(), slice_starts_.end(), begin) -
          slice_starts_.begin() - 1;
      for (; s < slices_.size() && slice_starts_[s] < end; ++s) {
        const size_t from =
            std::max(begin, slice_starts_[s]) - slice_starts_[s];
        const size_t to = std::min(end, slice_starts_[s] + slices_[s].size()) -
                          slice_starts_[s];
        if (to > from) pieces.push_back(slices_[s].sub(from, to));
      }
    }
    if (!plan_ids[i].empty()) {
      std::string field;
      AppendField(kPlanIdField, plan_ids[i], &field);
      pieces.emplace_back(field.data(), field.size());
    }
    if (!trailer.empty()) pieces.emplace_back(trailer.data(), trailer.size());
    parts[i].request = grpc::ByteBuffer(pieces.data(), pieces.size());
    parts[i].sample_bytes = bytes[i];
  }
  return parts;
}

}  // namespace aggregator
