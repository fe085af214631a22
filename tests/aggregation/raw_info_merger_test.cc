// The raw merger merges clean replies to what InfoMerger merges, and declines
// everything InfoMerger would have a word about (so that InfoMerger says it).
#include "lib/aggregation/raw_info_merger.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <optional>
#include <random>

#include "lib/aggregation/info_merger.h"
#include "proto/learner.pb.h"

namespace {

using aggregator::InfoMerger;
using aggregator::MergeConfig;
using aggregator::RawInfoMerger;
using google::protobuf::Struct;
using google::protobuf::util::MessageDifferencer;
namespace pb = aggregator::v1;

Struct Info(const std::string& json) {
  Struct info;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &info).ok());
  return info;
}

std::string Reply(const Struct& info, const std::string& task_id = "t") {
  pb::LearnReply reply;
  *reply.mutable_info() = info;
  reply.set_task_id(task_id);
  reply.set_buffer_id("b");
  return reply.SerializeAsString();
}

std::optional<RawInfoMerger::Merged> Raw(
    const std::vector<std::string>& replies, const std::vector<size_t>& counts,
    const MergeConfig& config = {}, const std::vector<size_t>& learners = {}) {
  const std::vector<absl::string_view> views(replies.begin(), replies.end());
  return RawInfoMerger(config).Merge(views, counts, learners);
}

// Merges `infos` both ways: the raw merger must merge, to InfoMerger's info,
// and InfoMerger must have nothing to say.
void CheckSame(std::vector<Struct> infos, const std::vector<size_t>& counts,
               const MergeConfig& config = {},
               const std::vector<size_t>& learners = {}) {
  std::vector<std::string> replies;
  std::vector<std::string> ids;
  for (size_t i = 0; i < infos.size(); ++i) {
    replies.push_back(Reply(infos[i]));
    ids.push_back("l" + std::to_string(i));
  }
  const auto raw = Raw(replies, counts, config, learners);
  REQUIRE(raw.has_value());
  std::vector<Struct*> pointers;
  for (Struct& info : infos) pointers.push_back(&info);
  const auto merged = InfoMerger(config).Merge(pointers, ids, counts, learners);
  REQUIRE(merged.ok());
  CHECK(merged->warnings.empty());
  pb::LearnReply parsed;
  REQUIRE(parsed.ParseFromString(raw->reply));
  INFO(parsed.info().DebugString() << "\nvs\n" << merged->info.DebugString());
  CHECK(MessageDifferencer::Equals(parsed.info(), merged->info));
  CHECK(parsed.task_id() == "t");
  CHECK(parsed.buffer_id() == "b");
}

}  // namespace

TEST_CASE("A clean merge on the bytes is InfoMerger's merge") {
  // What the example learners send, with 2 and 3 samples.
  CheckSame({Info(R"({"learner_step": 3, "learner_done": false, "task_id": "t",
                      "received": 2, "loss": 0.5,
                      "priority_info": {"priority": [0.1, 0.2],
                                        "replay_unique_id": ["a", "b"]},
                      "stats": {"td": [1, 2], "nested": {"x": "y"}}})"),
             Info(R"({"learner_step": 3, "learner_done": false, "task_id": "t",
                      "received": 3,
                      "priority_info": {"priority": [0.3, 0.4, 0.5],
                                        "replay_unique_id": ["c", null, "e"]},
                      "stats": {"td": [], "nested": {"z": true}}})")},
            {2, 3});
  // A scalar only some learners send: null for the others, no warning.
  CheckSame({Info(R"({"only_here": "x"})"), Info(R"({})")}, {1, 1});
  // One learner, and no learner info at all.
  CheckSame({Info(R"({"a": [1, {"b": 2}]})")}, {0});
  CheckSame({Info("{}"), Info("{}")}, {0, 0});
  // A tree: a child standing for 2 learners, a plain learner, a child
  // standing for 1 (InfoMerger's per-learner list, nulls for the absent).
  CheckSame({Info(R"({"received": [2, 3], "m": {"x": [1, 2]}, "y": null})"),
             Info(R"({"received": 1, "m": {"x": 3}, "y": "p"})"),
             Info(R"({"received": [4], "m": {}})")},
            {5, 1, 4}, {}, {2, 0, 1});
  // Scalars alone: each counts for every learner its sender stands for.
  CheckSame({Info(R"({"lr": 0.1})"), Info(R"({"lr": 0.2})"), Info("{}")},
            {1, 1, 1}, {}, {3, 0, 2});
}

TEST_CASE("The raw merger declines what InfoMerger has words for") {
  auto declines = [](const std::vector<std::string>& infos,
                     const std::vector<size_t>& counts) {
    std::vector<std::string> replies;
    for (const std::string& json : infos) replies.push_back(Reply(Info(json)));
    return !Raw(replies, counts).has_value();
  };
  // Disagreement on a homogeneous key (a warning).
  CHECK(declines({R"({"learner_step": 1})", R"({"learner_step": 2})"}, {1, 1}));
  // Null or nothing where another learner sends a list or map (warnings).
  CHECK(declines({R"({"m": {"a": 1}})", R"({"m": null})"}, {1, 1}));
  CHECK(declines({R"({"l": [1]})", R"({})"}, {1, 1}));
  // A shape conflict (an error), also from a child aggregator whose list
  // does not stand for its learners.
  CHECK(declines({R"({"x": [1]})", R"({"x": 2})"}, {1, 1}));
  CHECK(!Raw({Reply(Info(R"({"x": [1, 2, 3]})")), Reply(Info(R"({"x": 2})"))},
             {1, 1}, {}, {2, 0})
             .has_value());
  // A per-sample list that does not line up (an error).
  CHECK(declines({R"({"priority_info": {"priority": [1]}})",
                  R"({"priority_info": {"priority": [1]}})"},
                 {1, 2}));
  // A homogeneous key holding a map: compared as a message by InfoMerger.
  CHECK(declines({R"({"task_id": {"a": 1}})", R"({"task_id": {"a": 1}})"},
                 {1, 1}));
}

TEST_CASE("The raw merger declines replies it does not read as plain") {
  const std::string clean = Reply(Info(R"({"a": [1, 2]})"));
  CHECK(Raw({clean, clean}, {2, 2}).has_value());
  // Not a message; an unknown field; a field given twice.
  CHECK_FALSE(Raw({clean, "\xff\xff"}, {2, 2}).has_value());
  CHECK_FALSE(Raw({clean, clean + "\x20\x01"}, {2, 2}).has_value());
  CHECK_FALSE(Raw({clean, clean + clean}, {2, 2}).has_value());
  // A string in a list entry that is not UTF-8: protobuf would not parse it.
  Struct bad;
  (*bad.mutable_fields())["a"]
      .mutable_list_value()
      ->add_values()
      ->set_string_value(std::string("\xc3\x28", 2));
  pb::LearnReply reply;
  *reply.mutable_info() = bad;
  CHECK_FALSE(Raw({clean, reply.SerializeAsString()}, {2, 1}).has_value());
  // A key twice in one map (protobuf keeps the last; InfoMerger sees one).
  const std::string entry("\x0a\x03\x0a\x01k", 5);  // Struct entry "k"
  CHECK(Raw({"\x0a\x05" + entry}, {0}).has_value());
  CHECK_FALSE(Raw({"\x0a\x0a" + entry + entry}, {0}).has_value());
  // Nested deeper than it reads.
  Struct deep;
  Struct* level = &deep;
  for (int i = 0; i <= RawInfoMerger::kMaxDepth; ++i) {
    level = (*level->mutable_fields())["d"].mutable_struct_value();
  }
  *reply.mutable_info() = deep;
  CHECK_FALSE(Raw({reply.SerializeAsString()}, {0}).has_value());
}

TEST_CASE("Random clean infos merge the same both ways") {
  // Infos of the same shape with random scalars and list lengths: every one
  // is a clean merge.
  std::mt19937 random(15);
  for (int round = 0; round < 200; ++round) {
    const size_t learners = 1 + random() % 5;
    std::vector<Struct> infos(learners);
    std::vector<size_t> counts;
    for (size_t i = 0; i < learners; ++i) {
      const size_t samples = random() % 4;
      counts.push_back(samples);
      auto& fields = *infos[i].mutable_fields();
      fields["learner_step"].set_number_value(round);
      fields["loss"].set_number_value(static_cast<double>(random() % 100));
      if (random() % 2 == 0) fields["sometimes"].set_bool_value(true);
      auto& priority_info =
          *fields["priority_info"].mutable_struct_value()->mutable_fields();
      auto* ids = priority_info["replay_unique_id"].mutable_list_value();
      auto* priorities = priority_info["priority"].mutable_list_value();
      for (size_t j = 0; j < samples; ++j) {
        ids->add_values()->set_string_value(std::to_string(random()));
        priorities->add_values()->set_number_value(random() % 1000 / 1e3);
      }
      auto* extra = fields["extra"].mutable_list_value();
      for (size_t j = random() % 3; j > 0; --j) {
        (*extra->add_values()->mutable_struct_value()->mutable_fields())["k"]
            .set_string_value("v");
      }
    }
    CheckSame(infos, counts);
  }
}

namespace {

// A length-delimited field of `number` holding `body` (bodies here are short).
std::string Delimited(int number, const std::string& body) {
  REQUIRE(body.size() < 128);
  return std::string(1, static_cast<char>(number << 3 | 2)) +
         static_cast<char>(body.size()) + body;
}

// A LearnReply whose info is {"a": [<value>]}, `value` a Value's raw bytes.
std::string ReplyWithListEntry(const std::string& value) {
  const std::string list = Delimited(1, value);
  const std::string entry =
      Delimited(1, "a") + Delimited(2, Delimited(6, list));
  return Delimited(1, Delimited(1, entry));
}

}  // namespace

TEST_CASE("The raw merger merges only what protobuf parses") {
  // bool_value true with a tag of 5 bytes (overlong, which protobuf accepts)
  // and of 6 (which it refuses).
  const std::string five("\xa0\x80\x80\x80\x00\x01", 6);
  const std::string six("\xa0\x80\x80\x80\x80\x00\x01", 7);
  pb::LearnReply parsed;
  REQUIRE(parsed.ParseFromString(ReplyWithListEntry(five)));
  CHECK(parsed.info().fields().at("a").list_value().values(0).bool_value());
  const auto raw = Raw({ReplyWithListEntry(five)}, {0});
  REQUIRE(raw.has_value());
  pb::LearnReply merged;
  REQUIRE(merged.ParseFromString(raw->reply));
  CHECK(MessageDifferencer::Equals(merged.info(), parsed.info()));

  CHECK_FALSE(parsed.ParseFromString(ReplyWithListEntry(six)));
  CHECK_FALSE(Raw({ReplyWithListEntry(six)}, {0}).has_value());
  // The same for a key's length of 6 bytes.
  const std::string long_key =
      std::string("\x0a\x81\x80\x80\x80\x80\x00", 7) + "k" + Delimited(2, "");
  const std::string reply = Delimited(1, Delimited(1, long_key));
  CHECK_FALSE(parsed.ParseFromString(reply));
  CHECK_FALSE(Raw({reply}, {0}).has_value());
}

TEST_CASE("The raw merger declines a key that is not UTF-8") {
  // {"\xff": [true]}: protobuf refuses the key, so the raw merger must too.
  const std::string list = Delimited(1, std::string("\x20\x01", 2));
  const std::string entry =
      Delimited(1, "\xff") + Delimited(2, Delimited(6, list));
  const std::string reply = Delimited(1, Delimited(1, entry));
  pb::LearnReply parsed;
  CHECK_FALSE(parsed.ParseFromString(reply));
  CHECK_FALSE(Raw({reply}, {0}).has_value());
  // The same reply with a valid key merges.
  const std::string good_entry =
      Delimited(1, "k") + Delimited(2, Delimited(6, list));
  const std::string good = Delimited(1, Delimited(1, good_entry));
  REQUIRE(parsed.ParseFromString(good));
  CHECK(Raw({good}, {0}).has_value());
}
