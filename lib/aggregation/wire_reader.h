// WireReader: walks the fields of a serialized protobuf message without
// parsing it: each field's number, wire type and where its record and body
// lie. The message may be held in several chunks (the gRPC slices it arrived
// in); bodies are never copied unless asked for.
//
// It accepts only what protobuf's own parser accepts (google/protobuf/
// parse_context.h), so bytes it passes on, or merges, parse where they go:
// a tag is at most 5 bytes and fits 32 bits with a field number of at least
// 1; a length is at most 5 bytes and below 2 GiB; a varint is at most 10
// bytes; the wire types are varint, fixed64, length-delimited and fixed32
// (groups are refused). Overlong encodings within those limits are accepted,
// as protobuf accepts them.
//
// Used by RawBatch (a LearnRequest's samples) and RawInfoMerger (learners'
// LearnReplies). Thread-safety: none; a reader is used by one thread.
#ifndef LIB_AGGREGATION_WIRE_READER_H_
#define LIB_AGGREGATION_WIRE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/attributes.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace aggregator {

class WireReader {
 public:
  enum WireType {
    kVarint = 0,
    kFixed64 = 1,
    kLengthDelimited = 2,
    kFixed32 = 5,
  };

  struct Field {
    uint32_t number = 0;
    int type = 0;
    size_t begin = 0;    // the record's first byte (its tag)
    size_t body = 0;     // the body's first byte (after the tag and a length)
    size_t end = 0;      // one past the record
    uint64_t value = 0;  // a varint field's value
  };

  // Over one contiguous message, which must outlive the reader.
  explicit WireReader(absl::string_view bytes);
  // Over a message in `chunks`, which must outlive the reader.
  explicit WireReader(absl::Span<const absl::string_view> chunks);
  WireReader(const WireReader&) = delete;
  WireReader& operator=(const WireReader&) = delete;

  bool done() const { return position() >= size_; }
  size_t position() const {
    return consumed_ + static_cast<size_t>(p_ - chunk_begin_);
  }
  size_t size() const { return size_; }

  // Reads the next field's tag and, for a length-delimited one, its length;
  // the reader is left at the body (SkipBody or ReadBody moves past it).
  // False, with error() saying why, when the bytes are not well formed.
  bool NextHeader(Field* field) {
    error_ = nullptr;
    field->begin = position();
    uint64_t tag;
    if (!ReadVarint(kMaxTagBytes, "a field tag over 5 bytes", &tag)) {
      return Fail(error_ != nullptr ? error_ : "truncated field tag");
    }
    if (tag > UINT32_MAX) return Fail("a field tag over 32 bits");
    field->number = static_cast<uint32_t>(tag >> 3);
    field->type = static_cast<int>(tag & 7);
    if (field->number == 0) return Fail("field number 0");
    uint64_t length = 0;
    field->value = 0;
    switch (field->type) {
      case kVarint:
        if (!ReadVarint(kMaxVarintBytes, "a varint over 10 bytes",
                        &field->value)) {
          return Fail(error_ != nullptr ? error_ : "truncated varint");
        }
        break;
      case kFixed64:
        length = 8;
        break;
      case kFixed32:
        length = 4;
        break;
      case kLengthDelimited:
        if (!ReadVarint(kMaxLengthBytes, "a length over 5 bytes", &length)) {
          return Fail(error_ != nullptr ? error_ : "truncated length");
        }
        if (length > kMaxLength) return Fail("a length over 2 GiB");
        break;
      default:
        return Fail("unsupported wire type");
    }
    field->body = position();
    if (length > size_ - field->body) return Fail("truncated field");
    field->end = field->body + static_cast<size_t>(length);
    return true;
  }

  // Moves past the body of the field NextHeader just read.
  void SkipBody(const Field& field) { Skip(field.end - position()); }
  // Appends the body to `out` and moves past it.
  void ReadBody(const Field& field, std::string* out);

  // NextHeader and SkipBody: the whole next field.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Next(Field* field) {
    if (!NextHeader(field)) return false;
    SkipBody(*field);
    return true;
  }

  // A field's body, for a reader over one contiguous message.
  absl::string_view Body(const Field& field) const {
    return absl::string_view(chunk_begin_ + field.body, field.end - field.body);
  }

  // Why the last NextHeader failed.
  const char* error() const { return error_; }

 private:
  static constexpr int kMaxTagBytes = 5;
  static constexpr int kMaxLengthBytes = 5;
  static constexpr int kMaxVarintBytes = 10;
  // protobuf refuses lengths this close to 2 GiB (its kSlopBytes margin).
  static constexpr uint64_t kMaxLength = INT32_MAX - 16;

  bool Fail(const char* why) {
    error_ = why;
    return false;
  }

  // At most `max_bytes` bytes; false when the bytes end first (error_ stays
  // null) or the varint is longer (error_ = `too_long`).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool ReadVarint(int max_bytes,
                                               const char* too_long,
                                               uint64_t* value) {
    // Tags and lengths are mostly one byte.
    if (p_ < chunk_end_ && static_cast<uint8_t>(*p_) < 0x80) {
      *value = static_cast<uint8_t>(*p_++);
      return true;
    }
    return ReadVarintSlow(max_bytes, too_long, value);
  }
  bool ReadVarintSlow(int max_bytes, const char* too_long, uint64_t* value);
  // The next byte, across chunks; false at the end.
  bool ReadByte(uint8_t* byte);
  // Moves `count` bytes forward (they are there: NextHeader checked).
  void Skip(size_t count) {
    if (count <= static_cast<size_t>(chunk_end_ - p_)) {
      p_ += count;
      return;
    }
    SkipSlow(count);
  }
  void SkipSlow(size_t count);
  // Makes the next non-empty chunk current; false when there is none.
  bool NextChunk();

  absl::string_view one_;  // the chunk of the contiguous constructor
  absl::Span<const absl::string_view> chunks_;
  size_t size_ = 0;
  size_t chunk_ = 0;     // the current chunk
  size_t consumed_ = 0;  // bytes of the chunks before it
  const char* chunk_begin_ = nullptr;
  const char* chunk_end_ = nullptr;
  const char* p_ = nullptr;  // the next byte
  const char* error_ = nullptr;
};

// The writing side, for the few fields the daemon writes itself: a varint,
// and a length-delimited field `number` holding `body`, appended to `out`.
inline void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}
inline void AppendField(uint32_t number, absl::string_view body,
                        std::string* out) {
  AppendVarint(number << 3 | WireReader::kLengthDelimited, out);
  AppendVarint(body.size(), out);
  out->append(body.data(), body.size());
}

}  // namespace aggregator

#endif  // LIB_AGGREGATION_WIRE_READER_H_
