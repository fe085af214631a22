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

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

absl::StatusOr<RawBatch> RawBatch::Parse(const grpc::ByteBuffer& request) {
  RawBatch batch;
  if (!request.Valid()) return batch;  // no bytes at all: an empty message
  if (grpc::Status dumped = request.Dump(&batch.slices_); !dumped.ok()) {
    return absl::InternalError(absl::StrCat("cannot read the Learn request: ",
                                            dumped.error_message()));
  }
  size_t size = 0;
  for (const grpc::Slice& slice : batch.slices_) {
    batch.slice_starts_.push_back(size);
    size += slice.size();
  }
  Reader reader(batch.slices_, size);
  auto malformed = [&](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("Learn request is not a valid LearnRequest: ", what,
                     " at byte ", reader.position(), " of ", size));
  };
  while (!reader.done()) {
    const size_t start = reader.position();
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return malformed("truncated field tag");
    const uint64_t field = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    uint64_t length = 0;
    switch (wire_type) {
      case kVarint:
        if (!reader.ReadVarint(&length)) return malformed("truncated varint");
        break;
      case kFixed64:
        if (!reader.Skip(8)) return malformed("truncated fixed64");
        break;
      case kFixed32:
        if (!reader.Skip(4)) return malformed("truncated fixed32");
        break;
      case kLengthDelimited: {
        if (!reader.ReadVarint(&length)) return malformed("truncated length");
        std::string* keep = nullptr;
        if (field == kPlanIdField) {
          batch.plan_id_.clear();  // the last occurrence wins, as in protobuf
          keep = &batch.plan_id_;
        }
        if (!reader.Skip(length, keep)) return malformed("truncated field");
        if (field == kSamplesField) {
          batch.samples_.push_back(Range{start, reader.position()});
        }
        break;
      }
      default:
        return malformed("unsupported wire type");
    }
    if (field == 0) return malformed("field number 0");
  }
  return batch;
}

size_t RawBatch::SliceBytes(size_t first, size_t count) const {
  size_t bytes = 0;
  for (size_t i = first; i < first + count && i < samples_.size(); ++i) {
    bytes += samples_[i].end - samples_[i].begin;
  }
  return bytes;
}

grpc::ByteBuffer RawBatch::Slice(size_t first, size_t count,
                                 const std::string& plan_id) const {
  std::vector<grpc::Slice> parts;
  size_t i = first;
  const size_t last = std::min(first + count, samples_.size());
  while (i < last) {
    // Coalesce adjacent sample records into one byte range.
    const size_t begin = samples_[i].begin;
    size_t end = samples_[i].end;
    while (++i < last && samples_[i].begin == end) end = samples_[i].end;
    // The slices covering [begin, end), trimmed to it.
    size_t s =
        std::upper_bound(slice_starts_.begin(), slice_starts_.end(), begin) -
        slice_starts_.begin() - 1;
    for (; s < slices_.size() && slice_starts_[s] < end; ++s) {
      const size_t from = std::max(begin, slice_starts_[s]) - slice_starts_[s];
      const size_t to = std::min(end, slice_starts_[s] + slices_[s].size()) -
                        slice_starts_[s];
      if (to > from) parts.push_back(slices_[s].sub(from, to));
    }
  }
  if (!plan_id.empty()) {
    std::string field;
    AppendVarint(kPlanIdField << 3 | kLengthDelimited, &field);
    AppendVarint(plan_id.size(), &field);
    field += plan_id;
    parts.emplace_back(field.data(), field.size());
  }
  return grpc::ByteBuffer(parts.data(), parts.size());
}

}  // namespace aggregator
