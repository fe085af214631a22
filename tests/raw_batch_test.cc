#include "lib/aggregation/raw_batch.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <catch2/catch.hpp>

#include "proto/learner.pb.h"

namespace {

using aggregator::RawBatch;
namespace pb = aggregator::v1;

pb::LearnRequest Request(int samples, const std::string& plan_id) {
  pb::LearnRequest request;
  for (int i = 0; i < samples; ++i) {
    auto* sample = request.add_samples();
    sample->set_data(std::string(100 + i * 37, static_cast<char>('a' + i)));
    (*sample->mutable_meta()->mutable_fields())["replay_unique_id"]
        .set_string_value("id" + std::to_string(i));
  }
  request.set_plan_id(plan_id);
  return request;
}

// The message's bytes cut into slices of `chunk` bytes, as the network may
// deliver.
grpc::ByteBuffer Chunked(const std::string& bytes, size_t chunk) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const std::string part = bytes.substr(at, chunk);
    slices.emplace_back(part.data(), part.size());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

pb::LearnRequest Decode(grpc::ByteBuffer buffer) {
  pb::LearnRequest request;
  REQUIRE(grpc::SerializationTraits<pb::LearnRequest>::Deserialize(&buffer,
                                                                   &request)
              .ok());
  return request;
}

}  // namespace

TEST_CASE("A batch splits at sample boundaries whatever the slicing") {
  const pb::LearnRequest original = Request(6, "top-plan");
  const std::string bytes = original.SerializeAsString();
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, bytes.size()}) {
    INFO("chunk " << chunk);
    auto batch = RawBatch::Parse(Chunked(bytes, chunk));
    REQUIRE(batch.ok());
    CHECK(batch->sample_count() == 6);
    CHECK(batch->plan_id() == "top-plan");
    const pb::LearnRequest middle = Decode(batch->Slice(1, 3, "child-plan"));
    CHECK(middle.plan_id() == "child-plan");
    REQUIRE(middle.samples_size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(middle.samples(i).SerializeAsString() ==
            original.samples(i + 1).SerializeAsString());
    }
    CHECK(batch->SliceBytes(1, 3) ==
          middle.ByteSizeLong() - (2 + std::string("child-plan").size()));
    const pb::LearnRequest none = Decode(batch->Slice(6, 0, ""));
    CHECK(none.samples_size() == 0);
    CHECK(none.plan_id().empty());
  }
}

TEST_CASE("Slices share the received memory: no payload is copied") {
  const std::string bytes = Request(4, "p").SerializeAsString();
  grpc::Slice whole(bytes.data(), bytes.size());
  grpc::ByteBuffer received(&whole, 1);
  auto batch = RawBatch::Parse(received);
  REQUIRE(batch.ok());
  std::vector<grpc::Slice> parts;
  REQUIRE(batch->Slice(0, 4, "").Dump(&parts).ok());
  REQUIRE_FALSE(parts.empty());
  for (const grpc::Slice& part : parts) {
    CHECK(part.begin() >= whole.begin());
    CHECK(part.end() <= whole.end());
  }
}

TEST_CASE("Unknown fields are skipped; the last plan_id wins") {
  pb::LearnRequest request = Request(2, "first");
  std::string bytes = request.SerializeAsString();
  // field 9 varint 300, field 10 fixed64, field 11 fixed32, then plan_id again.
  bytes += std::string("\x48\xac\x02", 3) + "\x51" + std::string(8, '\0') +
           "\x5d" + std::string(4, '\0') + "\x12\x04last";
  auto batch = RawBatch::Parse(Chunked(bytes, 5));
  REQUIRE(batch.ok());
  CHECK(batch->sample_count() == 2);
  CHECK(batch->plan_id() == "last");
}

TEST_CASE("Malformed requests are INVALID_ARGUMENT, saying where") {
  const std::string bytes = Request(2, "p").SerializeAsString();
  SECTION("truncated inside a sample") {
    auto batch =
        RawBatch::Parse(Chunked(bytes.substr(0, bytes.size() - 20), 8));
    REQUIRE_FALSE(batch.ok());
    CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(batch.status().message()),
               Catch::Contains("truncated") && Catch::Contains("at byte"));
  }
  SECTION("a group wire type") {
    auto batch = RawBatch::Parse(Chunked("\x0b", 1));
    REQUIRE_FALSE(batch.ok());
    CHECK_THAT(std::string(batch.status().message()),
               Catch::Contains("unsupported wire type"));
  }
  SECTION("an empty message is an empty batch") {
    auto batch = RawBatch::Parse(grpc::ByteBuffer());
    REQUIRE(batch.ok());
    CHECK(batch->sample_count() == 0);
  }
}
