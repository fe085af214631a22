#include "lib/aggregation/raw_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr uint32_t kSamplesField = 1;
constexpr uint32_t kPlanIdField = 2;
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;
// A plan id is a short token; anything longer is not one.
constexpr uint64_t kMaxPlanIdBytes = 1024;
// A client sends one plan_id and nothing else but samples. A few other fields
// (a newer client's) are skipped; millions would cost Cut a byte range each.
constexpr size_t kMaxOtherFields = 16;

// Reads the message's bytes across slice boundaries; only headers are read.
class Reader {
 public:
  Reader(const std::vector<grpc::Slice>& slices, size_t size)
      : slices_(slices), size_(size) {}

  size_t position() const { return position_; }
  bool done() const { return position_ >= size_; }

  bool ReadByte(uint8_t* byte) {
    while (slice_ < slices_.size() && offset_ >= slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    if (slice_ >= slices_.size()) return false;
    *byte = slices_[slice_].begin()[offset_++];
    ++position_;
    return true;
  }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // Moves `count` bytes forward, copying them into `out` when given.
  bool Skip(uint64_t count, std::string* out = nullptr) {
    if (count > size_ - position_) return false;
    while (count > 0) {
      if (offset_ >= slices_[slice_].size()) {
        ++slice_;
        offset_ = 0;
        continue;
      }
      const size_t take =
          std::min<uint64_t>(count, slices_[slice_].size() - offset_);
      if (out != nullptr) {
        out->append(
            reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_,
            take);
      }
      offset_ += take;
      position_ += take;
      count -= take;
    }
    return true;
  }

 private:
  const std::vector<grpc::Slice>& slices_;
  const size_t size_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  size_t position_ = 0;
};

// One field of the message: its number and where its record (header
// included) begins and ends, and where its body begins.
struct FieldRecord {
  uint64_t number;
  size_t begin;
  size_t body;
  size_t end;
};

// Calls `field` (bool(const FieldRecord&, Reader&)) for every field of the
// message, in order, until it returns false. Other fields than samples count
// against kMaxOtherFields: each splits a run of samples (and costs Cut a byte
// range). A template, not a std::function: it runs once per sample.
template <typename Visit>
absl::Status ForEachField(const std::vector<grpc::Slice>& slices, size_t size,
                          const Visit& field) {
  Reader reader(slices, size);
  auto malformed = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("Learn request is not a valid LearnRequest: ", what,
                     " at byte ", reader.position(), " of ", size));
  };
  size_t others = 0;
  while (!reader.done()) {
    const size_t begin = reader.position();
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return malformed("truncated field tag");
    const uint64_t number = tag >> 3;
    if (number == 0) return malformed("field number 0");
    if (number != kSamplesField && ++others > kMaxOtherFields) {
      return malformed(absl::StrCat("more than ", kMaxOtherFields,
                                    " fields other than samples"));
    }
    uint64_t length = 0;
    switch (static_cast<int>(tag & 7)) {
      case kVarint:
        if (!reader.ReadVarint(&length)) return malformed("truncated varint");
        length = 0;
        break;
      case kFixed64:
        length = 8;
        break;
      case kFixed32:
        length = 4;
        break;
      case kLengthDelimited:
        if (!reader.ReadVarint(&length)) return malformed("truncated length");
        break;
      default:
        return malformed("unsupported wire type");
    }
    if ((number == kSamplesField || number == kPlanIdField) &&
        (tag & 7) != kLengthDelimited) {
      return malformed(
          absl::StrCat("field ", number, " of wire type ", tag & 7));
    }
    if (number == kPlanIdField && length > kMaxPlanIdBytes) {
      return malformed(absl::StrCat("a plan_id of ", length, " bytes"));
    }
    const size_t body = reader.position();
    if (length > size - body) return malformed("truncated field");
    FieldRecord record{number, begin, body, body + static_cast<size_t>(length)};
    if (!field(record, reader)) return absl::OkStatus();
    // `field` may have read the body; skip what it left.
    if (reader.position() < record.end &&
        !reader.Skip(record.end - reader.position())) {
      return malformed("truncated field");
    }
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
      batch.slices_, batch.size_,
      [&](const FieldRecord& field, Reader& reader) {
        if (field.number == kPlanIdField) {
          batch.plan_id_.clear();  // the last one wins, as in protobuf
          return reader.Skip(field.end - reader.position(), &batch.plan_id_);
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
      ForEachField(slices_, size_, [&](const FieldRecord& field, Reader&) {
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
      field.push_back(static_cast<char>(kPlanIdField << 3 | kLengthDelimited));
      uint64_t length = plan_ids[i].size();
      while (length >= 0x80) {
        field.push_back(static_cast<char>((length & 0x7f) | 0x80));
        length >>= 7;
      }
      field.push_back(static_cast<char>(length));
      field += plan_ids[i];
      pieces.emplace_back(field.data(), field.size());
    }
    if (!trailer.empty()) pieces.emplace_back(trailer.data(), trailer.size());
    parts[i].request = grpc::ByteBuffer(pieces.data(), pieces.size());
    parts[i].sample_bytes = bytes[i];
  }
  return parts;
}

}  // namespace aggregator
