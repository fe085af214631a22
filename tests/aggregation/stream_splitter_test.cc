#include "lib/aggregation/stream_splitter.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <catch2/catch.hpp>
#include <map>

#include "proto/learner.pb.h"

namespace {

using aggregator::RawBatch;
using aggregator::StreamSplitter;
namespace pb = aggregator::v1;

// Samples [begin, end), each named "s<i>", as one message.
RawBatch Message(int begin, int end) {
  pb::LearnRequest request;
  for (int i = begin; i < end; ++i) {
    auto* sample = request.add_samples();
    sample->set_data(std::string(10 + i, 'x'));
    (*sample->mutable_meta()->mutable_fields())["replay_unique_id"]
        .set_string_value("s" + std::to_string(i));
  }
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  auto batch = RawBatch::ScanUpTo(grpc::ByteBuffer(&slice, 1), 1 << 20);
  REQUIRE(batch.ok());
  return *std::move(batch);
}

std::vector<std::string> Ids(grpc::ByteBuffer buffer) {
  pb::LearnRequest request;
  REQUIRE(grpc::SerializationTraits<pb::LearnRequest>::Deserialize(&buffer,
                                                                   &request)
              .ok());
  std::vector<std::string> ids;
  for (const auto& sample : request.samples()) {
    ids.push_back(sample.meta().fields().at("replay_unique_id").string_value());
  }
  return ids;
}

// learner -> the ids it was given, over all pieces so far.
using Shares = std::map<size_t, std::vector<std::string>>;

void Add(StreamSplitter& splitter, const RawBatch& message, Shares* shares) {
  auto pieces = splitter.Add(message);
  INFO(pieces.status().ToString());
  REQUIRE(pieces.ok());
  for (auto& piece : *pieces) {
    const std::vector<std::string> ids = Ids(piece.samples);
    CHECK(ids.size() == piece.count);
    CHECK(piece.bytes > 0);
    auto& share = (*shares)[piece.learner];
    share.insert(share.end(), ids.begin(), ids.end());
  }
}

std::vector<std::string> Names(int begin, int end) {
  std::vector<std::string> names;
  for (int i = begin; i < end; ++i) names.push_back("s" + std::to_string(i));
  return names;
}

}  // namespace

TEST_CASE("Messages that do not line up with the shares are cut at them") {
  StreamSplitter splitter({3, 4, 2});
  CHECK(splitter.total() == 9);
  Shares shares;
  CHECK(splitter.complete() == 0);
  Add(splitter, Message(0, 2), &shares);
  CHECK(splitter.complete() == 0);
  Add(splitter, Message(2, 8), &shares);  // ends learner 0's, all of 1's
  CHECK(splitter.complete() == 2);
  CHECK(splitter.remaining() == 1);
  Add(splitter, Message(8, 9), &shares);
  CHECK(splitter.complete() == 3);
  CHECK(shares == Shares{{0, Names(0, 3)}, {1, Names(3, 7)}, {2, Names(7, 9)}});
}

TEST_CASE("Empty shares are complete as soon as the stream passes them") {
  StreamSplitter splitter({0, 2, 0, 0, 1, 0});
  CHECK(splitter.complete() == 1);
  Shares shares;
  Add(splitter, Message(0, 0), &shares);  // a message without samples
  CHECK(shares.empty());
  Add(splitter, Message(0, 3), &shares);
  CHECK(splitter.complete() == 6);
  CHECK(shares == Shares{{1, Names(0, 2)}, {4, Names(2, 3)}});
}

TEST_CASE("More samples than the shares have left are refused") {
  StreamSplitter splitter({2, 2});
  Shares shares;
  Add(splitter, Message(0, 3), &shares);
  CHECK_FALSE(splitter.Add(Message(3, 5)).ok());
  CHECK(splitter.received() == 3);  // nothing of the refused message counted
  Add(splitter, Message(3, 4), &shares);
  CHECK(shares == Shares{{0, Names(0, 2)}, {1, Names(2, 4)}});
}
