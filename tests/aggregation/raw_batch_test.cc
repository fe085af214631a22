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

constexpr int64_t kAny = 1 << 30;

// The parts of `batch` for `counts`, which must cut.
std::vector<RawBatch::Part> CutOrDie(const RawBatch& batch,
                                     const std::vector<size_t>& counts,
                                     const std::vector<std::string>& plan_ids) {
  auto parts = batch.Cut(counts, plan_ids);
  INFO(parts.status().ToString());
  REQUIRE(parts.ok());
  return std::move(*parts);
}

TEST_CASE("Every part carries the trailer after its samples and plan id") {
  const pb::LearnRequest original = Request(3, "");
  auto batch = RawBatch::Scan(Chunked(original.SerializeAsString(), 5), kAny);
  REQUIRE(batch.ok());
  pb::LearnRequest stamp;
  stamp.mutable_membership()->set_generation(7);
  stamp.mutable_membership()->add_members("a");
  stamp.mutable_membership()->add_members("b");
  auto parts = batch->Cut({1, 2}, {"p0", ""}, stamp.SerializeAsString());
  REQUIRE(parts.ok());
  REQUIRE(parts->size() == 2);
  const pb::LearnRequest first = Decode((*parts)[0].request);
  CHECK(first.samples_size() == 1);
  CHECK(first.plan_id() == "p0");
  CHECK(first.membership().generation() == 7);
  CHECK(first.membership().members_size() == 2);
  const pb::LearnRequest second = Decode((*parts)[1].request);
  CHECK(second.samples_size() == 2);
  CHECK(second.plan_id().empty());
  CHECK(second.membership().members(1) == "b");
}

TEST_CASE("A batch cuts at sample boundaries whatever the slicing") {
  const pb::LearnRequest original = Request(6, "top-plan");
  const std::string bytes = original.SerializeAsString();
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, bytes.size()}) {
    INFO("chunk " << chunk);
    auto batch = RawBatch::Scan(Chunked(bytes, chunk), kAny);
    REQUIRE(batch.ok());
    CHECK(batch->sample_count() == 6);
    CHECK(batch->plan_id() == "top-plan");
    CHECK(batch->size() == bytes.size());
    auto parts = CutOrDie(*batch, {1, 3, 0, 2}, {"", "child-plan", "", "x"});
    REQUIRE(parts.size() == 4);
    const pb::LearnRequest middle = Decode(parts[1].request);
    CHECK(middle.plan_id() == "child-plan");
    REQUIRE(middle.samples_size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(middle.samples(i).SerializeAsString() ==
            original.samples(i + 1).SerializeAsString());
    }
    CHECK(parts[1].sample_bytes ==
          middle.ByteSizeLong() - (2 + std::string("child-plan").size()));
    const pb::LearnRequest none = Decode(parts[2].request);
    CHECK(none.samples_size() == 0);
    CHECK(none.plan_id().empty());
    const pb::LearnRequest last = Decode(parts[3].request);
    REQUIRE(last.samples_size() == 2);
    CHECK(last.samples(1).SerializeAsString() ==
          original.samples(5).SerializeAsString());
  }
}

TEST_CASE("Parts share the received memory: no payload is copied") {
  const std::string bytes = Request(4, "p").SerializeAsString();
  grpc::Slice whole(bytes.data(), bytes.size());
  grpc::ByteBuffer received(&whole, 1);
  auto batch = RawBatch::Scan(received, kAny);
  REQUIRE(batch.ok());
  std::vector<grpc::Slice> parts;
  REQUIRE(CutOrDie(*batch, {4}, {""})[0].request.Dump(&parts).ok());
  REQUIRE_FALSE(parts.empty());
  for (const grpc::Slice& part : parts) {
    CHECK(part.begin() >= whole.begin());
    CHECK(part.end() <= whole.end());
  }
}

TEST_CASE("Other fields are skipped; the last plan_id wins") {
  pb::LearnRequest request = Request(2, "first");
  std::string bytes = request.SerializeAsString();
  // field 9 varint 300, field 10 fixed64, field 11 fixed32, then plan_id again.
  bytes += std::string("\x48\xac\x02", 3) + "\x51" + std::string(8, '\0') +
           "\x5d" + std::string(4, '\0') + "\x12\x04last";
  auto batch = RawBatch::Scan(Chunked(bytes, 5), kAny);
  REQUIRE(batch.ok());
  CHECK(batch->sample_count() == 2);
  CHECK(batch->plan_id() == "last");
  const pb::LearnRequest part = Decode(CutOrDie(*batch, {2}, {""})[0].request);
  CHECK(part.samples_size() == 2);
  CHECK(part.plan_id().empty());
}

TEST_CASE("Scanning stops as soon as a batch holds more samples than allowed") {
  // 1 MiB of empty samples ("0a 00"): half a million samples.
  std::string bytes;
  for (int i = 0; i < (1 << 19); ++i) bytes += std::string("\x0a\x00", 2);
  auto batch = RawBatch::Scan(Chunked(bytes, 4096), 1000);
  REQUIRE_FALSE(batch.ok());
  CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(batch.status().message()),
             Catch::Contains("more than 1000 samples"));
  // Within the bound they are counted, and cut without a range each.
  auto all = RawBatch::Scan(Chunked(bytes, 4096), kAny);
  REQUIRE(all.ok());
  CHECK(all->sample_count() == (1u << 19));
  auto parts = CutOrDie(*all, {1u << 18, 1u << 18}, {"a", "b"});
  CHECK(parts[1].sample_bytes == (1u << 19));
}

TEST_CASE("Malformed requests are INVALID_ARGUMENT, saying where") {
  const std::string bytes = Request(2, "p").SerializeAsString();
  auto message = [](const std::string& bytes) {
    auto batch = RawBatch::Scan(Chunked(bytes, 8), kAny);
    REQUIRE_FALSE(batch.ok());
    CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(batch.status().message());
  };
  CHECK_THAT(message(bytes.substr(0, bytes.size() - 20)),
             Catch::Contains("truncated") && Catch::Contains("at byte"));
  CHECK_THAT(message("\x0b"), Catch::Contains("unsupported wire type"));
  CHECK_THAT(message("\x08\x01"), Catch::Contains("field 1 of wire type 0"));
  CHECK_THAT(message(std::string("\x12\x85\x08", 3) + std::string(1029, 'x')),
             Catch::Contains("a plan_id of 1029 bytes"));
  std::string many;
  for (int i = 0; i < 17; ++i) many += std::string("\x48\x01", 2);
  CHECK_THAT(message(many), Catch::Contains("more than 16 fields"));
  auto empty = RawBatch::Scan(grpc::ByteBuffer(), kAny);
  REQUIRE(empty.ok());
  CHECK(empty->sample_count() == 0);
}

TEST_CASE("Cut refuses counts that do not add up") {
  auto batch =
      RawBatch::Scan(Chunked(Request(3, "").SerializeAsString(), 16), kAny);
  REQUIRE(batch.ok());
  CHECK(batch->Cut({1, 1}, {"", ""}).status().code() ==
        absl::StatusCode::kInternal);
  CHECK(batch->Cut({3}, {"", ""}).status().code() ==
        absl::StatusCode::kInternal);
}
