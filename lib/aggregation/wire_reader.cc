#include "lib/aggregation/wire_reader.h"

#include <algorithm>

namespace aggregator {

WireReader::WireReader(absl::string_view bytes)
    : one_(bytes), chunks_(&one_, 1), size_(bytes.size()) {
  chunk_begin_ = p_ = one_.data();
  chunk_end_ = one_.data() + one_.size();
}

WireReader::WireReader(absl::Span<const absl::string_view> chunks)
    : chunks_(chunks) {
  for (absl::string_view chunk : chunks_) size_ += chunk.size();
  if (!chunks_.empty()) {
    chunk_begin_ = p_ = chunks_[0].data();
    chunk_end_ = chunks_[0].data() + chunks_[0].size();
  }
}

bool WireReader::NextChunk() {
  while (chunk_ + 1 < chunks_.size()) {
    consumed_ += static_cast<size_t>(chunk_end_ - chunk_begin_);
    const absl::string_view next = chunks_[++chunk_];
    chunk_begin_ = p_ = next.data();
    chunk_end_ = next.data() + next.size();
    if (!next.empty()) return true;
  }
  return false;
}

bool WireReader::ReadByte(uint8_t* byte) {
  if (p_ == chunk_end_ && !NextChunk()) return false;
  *byte = static_cast<uint8_t>(*p_++);
  return true;
}

bool WireReader::ReadVarintSlow(int max_bytes, const char* too_long,
                                uint64_t* value) {
  *value = 0;
  for (int i = 0; i < max_bytes; ++i) {
    uint8_t byte;
    if (!ReadByte(&byte)) return false;  // truncated: the caller says so
    // A tenth byte's bits past 64 are dropped, as protobuf drops them.
    *value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) return true;
  }
  error_ = too_long;
  return false;
}

void WireReader::SkipSlow(size_t count) {
  while (count > 0) {
    if (p_ == chunk_end_ && !NextChunk()) return;
    const size_t take = std::min(count, static_cast<size_t>(chunk_end_ - p_));
    p_ += take;
    count -= take;
  }
}

void WireReader::ReadBody(const Field& field, std::string* out) {
  size_t count = field.end - position();
  while (count > 0) {
    if (p_ == chunk_end_ && !NextChunk()) return;
    const size_t take = std::min(count, static_cast<size_t>(chunk_end_ - p_));
    out->append(p_, take);
    p_ += take;
    count -= take;
  }
}

}  // namespace aggregator
