// WireReader accepts what protobuf's parser accepts, and no more: each case
// is checked against google.protobuf.Value's own parse.
#include "lib/aggregation/wire_reader.h"

#include <google/protobuf/struct.pb.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace {

using aggregator::WireReader;

// Reads every field of `bytes`; the error, or "" when all were well formed.
std::string ReadAll(const std::vector<absl::string_view>& chunks) {
  WireReader reader(chunks);
  WireReader::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return reader.error();
    if (field.end != reader.position()) return "not past the field";
  }
  return "";
}
std::string ReadAll(const std::string& bytes) {
  return ReadAll(std::vector<absl::string_view>{bytes});
}

bool ProtobufParses(const std::string& bytes) {
  google::protobuf::Value value;
  return value.ParseFromString(bytes);
}

// Value.bool_value (field 4, a varint) with its tag in `tag_bytes` bytes.
std::string BoolWithTag(int tag_bytes) {
  std::string bytes;
  uint8_t tag = 4 << 3;
  for (int i = 1; i < tag_bytes; ++i) {
    bytes.push_back(static_cast<char>(tag | 0x80));
    tag = 0;
  }
  bytes.push_back(static_cast<char>(tag));
  bytes.push_back(1);
  return bytes;
}

// Value.string_value (field 3) "ab", its length in `length_bytes` bytes.
std::string StringWithLength(int length_bytes) {
  std::string bytes = "\x1a";
  uint8_t length = 2;
  for (int i = 1; i < length_bytes; ++i) {
    bytes.push_back(static_cast<char>(length | 0x80));
    length = 0;
  }
  bytes.push_back(static_cast<char>(length));
  return bytes + "ab";
}

}  // namespace

TEST_CASE("WireReader takes tags and lengths up to protobuf's limits") {
  for (int bytes = 1; bytes <= 5; ++bytes) {
    INFO(bytes << "-byte tag and length");
    CHECK(ProtobufParses(BoolWithTag(bytes)));
    CHECK(ReadAll(BoolWithTag(bytes)).empty());
    CHECK(ProtobufParses(StringWithLength(bytes)));
    CHECK(ReadAll(StringWithLength(bytes)).empty());
  }
  // One byte more, which a plain varint reader would take: protobuf does not.
  CHECK_FALSE(ProtobufParses(BoolWithTag(6)));
  CHECK(ReadAll(BoolWithTag(6)) == "a field tag over 5 bytes");
  CHECK_FALSE(ProtobufParses(StringWithLength(6)));
  CHECK(ReadAll(StringWithLength(6)) == "a length over 5 bytes");
  // Five bytes, but more than 32 bits.
  CHECK(ReadAll(std::string("\xa0\x80\x80\x80\x10\x01", 6)) ==
        "a field tag over 32 bits");
  // A length of 2 GiB or more in five bytes.
  CHECK(ReadAll(std::string("\x1a\xff\xff\xff\xff\x07", 6)) ==
        "a length over 2 GiB");
}

TEST_CASE("WireReader reads varints of up to 10 bytes") {
  std::string ten = "\x20";  // bool_value
  for (int i = 0; i < 9; ++i) ten.push_back('\x81');
  ten.push_back('\x01');
  CHECK(ProtobufParses(ten));
  CHECK(ReadAll(ten).empty());
  std::string eleven = ten;
  eleven.back() = '\x81';
  eleven.push_back('\x01');
  CHECK_FALSE(ProtobufParses(eleven));
  CHECK(ReadAll(eleven) == "a varint over 10 bytes");
}

TEST_CASE("WireReader refuses what is not a message") {
  CHECK(ReadAll(std::string("\x00\x01", 2)) == "field number 0");
  CHECK(ReadAll("\x0b") == "unsupported wire type");  // a group
  CHECK(ReadAll("\x80") == "truncated field tag");
  CHECK(ReadAll("\x20\x80") == "truncated varint");
  CHECK(ReadAll("\x1a\x80") == "truncated length");
  CHECK(ReadAll("\x1a\x05"
                "ab") == "truncated field");
  CHECK(ReadAll("\x11"
                "1234567") == "truncated field");  // fixed64
  CHECK(ReadAll("\x15"
                "1234")
            .empty());  // fixed32
}

TEST_CASE("WireReader reads across chunks") {
  // Two fields, cut at every byte.
  const std::string bytes = StringWithLength(3) + BoolWithTag(4);
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    const std::string head = bytes.substr(0, cut);
    const std::string tail = bytes.substr(cut);
    INFO("cut at " << cut);
    CHECK(ReadAll({head, "", tail}).empty());
  }
  const std::string first = bytes.substr(0, 2);
  const std::string rest = bytes.substr(2);
  const std::vector<absl::string_view> chunks = {first, rest};
  WireReader reader(chunks);
  WireReader::Field field;
  REQUIRE(reader.NextHeader(&field));
  CHECK(field.number == 3);
  CHECK(field.type == WireReader::kLengthDelimited);
  std::string body;
  reader.ReadBody(field, &body);
  CHECK(body == "ab");
  REQUIRE(reader.Next(&field));
  CHECK(field.number == 4);
  CHECK(field.value == 1);
  CHECK(reader.done());
}
