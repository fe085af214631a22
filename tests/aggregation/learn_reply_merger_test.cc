// LearnReplyMerger chooses the merge: clean replies on their bytes, the rest
// parsed and merged by InfoMerger; unreadable replies and unmergeable infos
// come back as errors naming the learner or the key.
#include "lib/aggregation/learn_reply_merger.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "lib/aggregation/info_merger.h"
#include "proto/learner.pb.h"

namespace {

using aggregator::InfoMerger;
using aggregator::LearnReplyMerger;
using aggregator::MergeConfig;
using google::protobuf::Struct;
using google::protobuf::util::MessageDifferencer;
namespace pb = aggregator::v1;

Struct Info(const std::string& json) {
  Struct info;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &info).ok());
  return info;
}

std::string Reply(const Struct& info, const std::string& task_id = "t",
                  const std::string& buffer_id = "b") {
  pb::LearnReply reply;
  *reply.mutable_info() = info;
  reply.set_task_id(task_id);
  reply.set_buffer_id(buffer_id);
  return reply.SerializeAsString();
}

pb::LearnReply Parsed(const LearnReplyMerger::Result& result) {
  pb::LearnReply reply;
  REQUIRE(reply.ParseFromString(result.reply));
  return reply;
}

// What InfoMerger alone makes of `infos`.
Struct InfoMerged(std::vector<Struct> infos, const std::vector<size_t>& counts,
                  std::vector<std::string>* warnings = nullptr) {
  std::vector<Struct*> pointers;
  std::vector<std::string> ids;
  for (Struct& info : infos) {
    pointers.push_back(&info);
    ids.push_back("l" + std::to_string(ids.size()));
  }
  auto merged = InfoMerger(MergeConfig{}).Merge(pointers, ids, counts);
  REQUIRE(merged.ok());
  if (warnings != nullptr) *warnings = merged->warnings;
  return merged->info;
}

const std::vector<std::string> kIds = {"l0", "l1"};

}  // namespace

TEST_CASE("Clean replies are merged on their bytes, to InfoMerger's info") {
  const Struct a = Info(R"({"learner_step": 3, "loss": 0.5,
                            "priority_info": {"priority": [0.1, 0.2]}})");
  const Struct b = Info(R"({"learner_step": 3, "loss": 0.25,
                            "priority_info": {"priority": [0.3]}})");
  const auto result =
      LearnReplyMerger(MergeConfig{}).Merge({Reply(a), Reply(b)}, kIds, {2, 1});
  REQUIRE(result.status.ok());
  CHECK(result.raw);
  CHECK_FALSE(result.unreadable.has_value());
  CHECK(result.warnings.empty());
  const pb::LearnReply reply = Parsed(result);
  CHECK(reply.task_id() == "t");
  CHECK(reply.buffer_id() == "b");
  CHECK(MessageDifferencer::Equals(reply.info(), InfoMerged({a, b}, {2, 1})));
}

TEST_CASE("Replies InfoMerger has a word about are parsed and merged by it") {
  // learner_step is homogeneous: the second learner's 4 is a warning, which
  // only InfoMerger gives.
  const Struct a = Info(R"({"learner_step": 3, "loss": 0.5})");
  const Struct b = Info(R"({"learner_step": 4, "loss": 0.25})");
  const auto result =
      LearnReplyMerger(MergeConfig{}).Merge({Reply(a), Reply(b)}, kIds, {1, 1});
  REQUIRE(result.status.ok());
  CHECK_FALSE(result.raw);
  std::vector<std::string> expected;
  const Struct info = InfoMerged({a, b}, {1, 1}, &expected);
  REQUIRE_FALSE(expected.empty());
  CHECK(result.warnings == expected);
  const pb::LearnReply reply = Parsed(result);
  CHECK(reply.task_id() == "t");
  CHECK(MessageDifferencer::Equals(reply.info(), info));
}

TEST_CASE(
    "A learner with another task_id or buffer_id is a warning, either "
    "way, and the first learner's are kept") {
  const Struct clean = Info(R"({"loss": 0.5})");
  SECTION("on the bytes") {
    const auto result =
        LearnReplyMerger(MergeConfig{})
            .Merge({Reply(clean, "t", "b"), Reply(clean, "u", "c")}, kIds,
                   {1, 1});
    REQUIRE(result.status.ok());
    CHECK(result.raw);
    CHECK(result.warnings ==
          std::vector<std::string>{
              "learners disagree on task_id: l0 sent 't', l1 sent 'u'; kept "
              "l0's",
              "learners disagree on buffer_id: l0 sent 'b', l1 sent 'c'; kept "
              "l0's"});
    CHECK(Parsed(result).task_id() == "t");
    CHECK(Parsed(result).buffer_id() == "b");
  }
  SECTION("parsed: the disagreements come before InfoMerger's warnings") {
    const auto result = LearnReplyMerger(MergeConfig{})
                            .Merge({Reply(Info(R"({"learner_step": 3})"), "t"),
                                    Reply(Info(R"({"learner_step": 4})"), "u")},
                                   kIds, {1, 1});
    REQUIRE(result.status.ok());
    CHECK_FALSE(result.raw);
    REQUIRE(result.warnings.size() == 2);
    CHECK(result.warnings[0] ==
          "learners disagree on task_id: l0 sent 't', l1 sent 'u'; kept l0's");
    CHECK(result.warnings[1].find("learner_step") != std::string::npos);
    CHECK(Parsed(result).task_id() == "t");
  }
}

TEST_CASE("A reply that is no LearnReply names its learner") {
  const auto result = LearnReplyMerger(MergeConfig{})
                          .Merge({Reply(Info(R"({"loss": 0.5})")),
                                  std::string("\xff\xff\xff", 3)},
                                 kIds, {1, 1});
  CHECK(result.status.code() == absl::StatusCode::kInternal);
  CHECK(result.status.message() ==
        "a reply that cannot be read as a LearnReply (or that is nested more "
        "than 400 levels deep)");
  REQUIRE(result.unreadable.has_value());
  CHECK(*result.unreadable == 1);
  CHECK_FALSE(result.raw);
}

TEST_CASE("A reply nested deeper than protobuf parses says so") {
  // Each level is a Struct, its map entry and a Value: 40 levels are 120
  // messages deep, over protobuf's 100 and within four times that.
  Struct deep;
  Struct* level = &deep;
  for (int i = 0; i < 40; ++i) {
    level = (*level->mutable_fields())["k"].mutable_struct_value();
  }
  const auto result =
      LearnReplyMerger(MergeConfig{})
          .Merge({Reply(deep), Reply(Info(R"({"loss": 0.5})"))}, kIds, {1, 1});
  CHECK(result.status.code() == absl::StatusCode::kInternal);
  CHECK(result.status.message() ==
        "a LearnReply nested deeper than protobuf's limit of 100 levels (a "
        "Struct of Structs in its info)");
  REQUIRE(result.unreadable.has_value());
  CHECK(*result.unreadable == 0);
}

TEST_CASE("Infos that cannot be merged fail with InfoMerger's error") {
  // One priority per sample: the first learner was sent 2 and sends 1.
  const auto result =
      LearnReplyMerger(MergeConfig{})
          .Merge({Reply(Info(R"({"priority_info": {"priority": [0.1]}})")),
                  Reply(Info(R"({"priority_info": {"priority": [0.2]}})"))},
                 kIds, {2, 1});
  CHECK(result.status.code() == absl::StatusCode::kInternal);
  CHECK(result.status.message().find("priority_info.priority") !=
        std::string::npos);
  CHECK_FALSE(result.unreadable.has_value());
  CHECK_FALSE(result.raw);
  CHECK(result.reply.empty());
}

TEST_CASE("A merged reply over max_bytes is measured, not kept") {
  const Struct a = Info(R"({"loss": 0.5})");
  const Struct b = Info(R"({"loss": 0.25})");
  const auto whole =
      LearnReplyMerger(MergeConfig{}).Merge({Reply(a), Reply(b)}, kIds, {1, 1});
  REQUIRE(whole.status.ok());
  CHECK(whole.size == whole.reply.size());
  SECTION("on the bytes") {
    const auto result =
        LearnReplyMerger(MergeConfig{})
            .Merge({Reply(a), Reply(b)}, kIds, {1, 1}, {}, whole.size - 1);
    REQUIRE(result.status.ok());
    CHECK(result.raw);
    CHECK(result.size == whole.size);
    CHECK(result.reply.empty());
  }
  SECTION("parsed") {
    // A homogeneous key the learners disagree on: InfoMerger's merge.
    const std::vector<std::string> replies = {
        Reply(Info(R"({"learner_step": 3})")),
        Reply(Info(R"({"learner_step": 4})"))};
    const auto result =
        LearnReplyMerger(MergeConfig{}).Merge(replies, kIds, {1, 1}, {}, 1);
    REQUIRE(result.status.ok());
    CHECK_FALSE(result.raw);
    CHECK(result.size > 1);
    CHECK(result.reply.empty());
    const auto fits = LearnReplyMerger(MergeConfig{})
                          .Merge(replies, kIds, {1, 1}, {}, result.size);
    CHECK_FALSE(fits.raw);
    CHECK(fits.reply.size() == result.size);
  }
}
