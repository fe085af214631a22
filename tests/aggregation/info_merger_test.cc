#include "lib/aggregation/info_merger.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>

namespace {

using aggregator::InfoMerger;
using aggregator::MergeConfig;
using google::protobuf::Struct;

Struct Json(const std::string& json) {
  Struct s;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &s).ok());
  return s;
}

std::string ToJson(const Struct& s) {
  std::string out;
  REQUIRE(google::protobuf::util::MessageToJsonString(s, &out).ok());
  return out;
}

// Merges copies of `infos` (learners l0, l1, ...), learner i sent counts[i]
// samples (none when `counts` is empty).
absl::StatusOr<aggregator::MergedInfo> MergeAll(
    std::vector<Struct> infos, const InfoMerger& merger,
    std::vector<size_t> counts = {}, const std::vector<size_t>& learners = {}) {
  std::vector<Struct*> pointers;
  std::vector<std::string> ids;
  for (size_t i = 0; i < infos.size(); ++i) {
    pointers.push_back(&infos[i]);
    ids.push_back("l" + std::to_string(i));
  }
  if (counts.empty()) counts.assign(infos.size(), 0);
  return merger.Merge(pointers, ids, counts, learners);
}

void RequireMerged(const std::vector<std::string>& inputs,
                   const std::string& expected,
                   const std::vector<size_t>& counts = {}) {
  std::vector<Struct> infos;
  for (const auto& input : inputs) infos.push_back(Json(input));
  InfoMerger merger(MergeConfig{});
  auto merged = MergeAll(infos, merger, counts);
  REQUIRE(merged.ok());
  INFO("merged: " << ToJson(merged->info));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(merged->info,
                                                           Json(expected)));
}

}  // namespace

TEST_CASE("Scalars become one entry per learner, lists concatenate in order") {
  RequireMerged({R"({"loss": 1.5, "name": "a", "ok": true, "p": [1, 2]})",
                 R"({"loss": 2.5, "name": "b", "ok": false, "p": [3]})",
                 R"({"loss": 3.5, "name": "c", "ok": true, "p": []})"},
                R"({"loss": [1.5, 2.5, 3.5], "name": ["a", "b", "c"],
                    "ok": [true, false, true], "p": [1, 2, 3]})");
}

TEST_CASE(
    "Nested maps merge key by key; homogeneous keys take the first value") {
  RequireMerged({R"({"learner_step": 4, "task_id": "t", "priority_info":
            {"priority": [0.1, 0.2], "replay_unique_id": ["a", "b"]}})",
                 R"({"learner_step": 4, "task_id": "t", "priority_info":
            {"priority": [0.3], "replay_unique_id": ["c"]}})"},
                R"({"learner_step": 4, "task_id": "t", "priority_info":
            {"priority": [0.1, 0.2, 0.3], "replay_unique_id": ["a", "b", "c"]}})",
                {2, 1});
}

TEST_CASE(
    "A per-sample list that does not line up fails, naming key and learner") {
  InfoMerger merger(MergeConfig{});
  const Struct full = Json(R"({"priority_info": {"priority": [1, 2]}})");
  SECTION("one learner omits it") {
    auto merged = MergeAll({full, Json(R"({"priority_info": {}})"), full},
                           merger, {2, 2, 2});
    REQUIRE_FALSE(merged.ok());
    CHECK(merged.status().code() == absl::StatusCode::kInternal);
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("'priority_info.priority'") &&
                   Catch::Contains("l1 sent none for its 2 samples"));
  }
  SECTION("one learner sends too few") {
    auto merged =
        MergeAll({full, Json(R"({"priority_info": {"priority": [3]}})")},
                 merger, {2, 2});
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("l1 sent 1 entries for its 2 samples"));
  }
  SECTION("one learner omits the whole map") {
    auto merged = MergeAll({full, Json(R"({"loss": 1})")}, merger, {2, 2});
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("l1 sent none"));
  }
  SECTION("a learner sent no samples need not send it") {
    auto merged = MergeAll({full, Json(R"({})")}, merger, {2, 0});
    REQUIRE(merged.ok());
    CHECK(merged->info.fields()
              .at("priority_info")
              .struct_value()
              .fields()
              .at("priority")
              .list_value()
              .values_size() == 2);
  }
  SECTION("lists elsewhere are not per-sample") {
    auto merged =
        MergeAll({Json(R"({"p": [1, 2, 3]})"), Json(R"({})")}, merger, {2, 2});
    CHECK(merged.ok());
  }
}

TEST_CASE("Per-sample keys are configurable, as dotted paths") {
  MergeConfig config;
  config.per_sample_keys = {"stats.td_error"};
  InfoMerger merger(config);
  auto merged =
      MergeAll({Json(R"({"stats": {"td_error": [1], "other": [1, 2, 3]}})"),
                Json(R"({"stats": {"td_error": [2, 3]}})")},
               merger, {1, 2});
  REQUIRE(merged.ok());
  auto wrong =
      MergeAll({Json(R"({"stats": {"td_error": [1, 2]}})")}, merger, {1});
  CHECK_FALSE(wrong.ok());
  // priority_info is no longer per-sample with this configuration.
  CHECK(MergeAll({Json(R"({"priority_info": {"priority": [1]}})")}, merger, {5})
            .ok());
}

TEST_CASE("A homogeneous key that disagrees keeps the first and warns") {
  InfoMerger merger(MergeConfig{{"learner_step"}});
  auto merged = MergeAll(
      {Json(R"({"learner_step": 4})"), Json(R"({"learner_step": 5})")}, merger);
  REQUIRE(merged.ok());
  CHECK(merged->info.fields().at("learner_step").number_value() == 4);
  REQUIRE(merged->warnings.size() == 1);
  CHECK_THAT(merged->warnings[0], Catch::Contains("learner_step") &&
                                      Catch::Contains("l1") &&
                                      Catch::Contains("l0"));
}

TEST_CASE("Homogeneous keys are configurable") {
  InfoMerger merger(MergeConfig{{"epoch"}});
  auto merged = MergeAll({Json(R"({"epoch": 1, "learner_step": 7})"),
                          Json(R"({"epoch": 1, "learner_step": 7})")},
                         merger);
  REQUIRE(merged.ok());
  CHECK(merged->info.fields().at("epoch").number_value() == 1);
  CHECK(merged->info.fields().at("learner_step").list_value().values_size() ==
        2);
}

// The Python original crashed on each of the following.
TEST_CASE("A key missing in one learner keeps everyone's data") {
  RequireMerged(
      {R"({"loss": 1})", R"({"loss": 2, "extra": 9})", R"({"extra": 8})"},
      R"({"loss": [1, 2, null], "extra": [null, 9, 8]})");
}

TEST_CASE("The first learner's empty dict does not drop the others' keys") {
  RequireMerged({R"({})", R"({"loss": 2, "p": [1]})"},
                R"({"loss": [null, 2], "p": [1]})");
  RequireMerged({R"({"stats": {}})", R"({"stats": {"a": [1]}})"},
                R"({"stats": {"a": [1]}})");
}

TEST_CASE(
    "Nulls merge: among scalars they are entries, beside lists absences") {
  RequireMerged({R"({"v": null})", R"({"v": 3})"}, R"({"v": [null, 3]})");
  InfoMerger merger(MergeConfig{{}});
  auto merged =
      MergeAll({Json(R"({"p": null})"), Json(R"({"p": [1, 2]})")}, merger);
  REQUIRE(merged.ok());
  CHECK(merged->info.fields().at("p").list_value().values_size() == 2);
  REQUIRE(merged->warnings.size() == 1);
  CHECK_THAT(merged->warnings[0],
             Catch::Contains("l0") && Catch::Contains("null"));
}

TEST_CASE("A list missing from one learner is reported, not silently dropped") {
  InfoMerger merger(MergeConfig{{}});
  auto merged = MergeAll(
      {Json(R"({"p": [1]})"), Json(R"({})"), Json(R"({"p": [2]})")}, merger);
  REQUIRE(merged.ok());
  CHECK(merged->info.fields().at("p").list_value().values_size() == 2);
  REQUIRE(merged->warnings.size() == 1);
  CHECK_THAT(merged->warnings[0],
             Catch::Contains("l1") && Catch::Contains("'p'"));
}

TEST_CASE("List against scalar is an error naming the key and both learners") {
  InfoMerger merger(MergeConfig{{}});
  auto merged = MergeAll(
      {Json(R"({"a": {"p": [1, 2]}})"), Json(R"({"a": {"p": 3}})")}, merger);
  REQUIRE_FALSE(merged.ok());
  CHECK(merged.status().code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(merged.status().message()),
             Catch::Contains("'a.p'") && Catch::Contains("l0 sent a list") &&
                 Catch::Contains("l1 sent a scalar"));
}

TEST_CASE(
    "In a tree, a child's per-learner list and a plain learner's scalar merge "
    "into one entry per learner, in plan order") {
  // l0 is a child aggregator standing for 2 learners, l1 a plain learner, l2
  // another child standing for 3 (DataDemand.learners).
  InfoMerger merger(MergeConfig{{}});
  auto merged = MergeAll({Json(R"({"loss": [1, 2], "m": {"x": [5, 6]},
                                   "only_plain": null})"),
                          Json(R"({"loss": 3, "m": {"x": 7},
                                   "only_plain": "p"})"),
                          Json(R"({"loss": [4, 5, 6], "m": {}})")},
                         merger, {}, {2, 0, 3});
  REQUIRE(merged.ok());
  CHECK(merged->warnings.empty());
  INFO("merged: " << ToJson(merged->info));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(
      merged->info, Json(R"({"loss": [1, 2, 3, 4, 5, 6],
               "m": {"x": [5, 6, 7, null, null, null]},
               "only_plain": [null, null, "p", null, null, null]})")));

  SECTION("a list that does not stand for its learners still fails") {
    auto wrong =
        MergeAll({Json(R"({"loss": [1, 2, 3]})"), Json(R"({"loss": 4})")},
                 merger, {}, {2, 0});
    REQUIRE_FALSE(wrong.ok());
    CHECK_THAT(std::string(wrong.status().message()),
               Catch::Contains("'loss'") &&
                   Catch::Contains("l0 sent a list of 3 entries") &&
                   Catch::Contains("stands for 2 learners") &&
                   Catch::Contains("l1 sent a scalar"));
  }
  SECTION("a child's scalar (a homogeneous key there) counts for each") {
    auto each = MergeAll({Json(R"({"loss": [1, 2], "lr": 0.1})"),
                          Json(R"({"loss": 4, "lr": 0.2})")},
                         merger, {}, {2, 0});
    REQUIRE(each.ok());
    INFO("merged: " << ToJson(each->info));
    CHECK(google::protobuf::util::MessageDifferencer::Equals(
        each->info, Json(R"({"loss": [1, 2, 4], "lr": [0.1, 0.1, 0.2]})")));
  }
  SECTION("and a per-sample key lines up with samples, not learners") {
    InfoMerger per_sample(MergeConfig{{}, {"loss"}});
    auto wrong = MergeAll({Json(R"({"loss": [1, 2]})"), Json(R"({"loss": 4})")},
                          per_sample, {2, 1}, {2, 0});
    REQUIRE_FALSE(wrong.ok());
    CHECK_THAT(std::string(wrong.status().message()),
               Catch::Contains("l0 sent a list but l1 sent a scalar"));
  }
}

TEST_CASE("Map against list is an error; a scalar before a map too") {
  InfoMerger merger(MergeConfig{{}});
  auto map_list =
      MergeAll({Json(R"({"a": {"x": 1}})"), Json(R"({"a": [1]})")}, merger);
  REQUIRE_FALSE(map_list.ok());
  CHECK_THAT(std::string(map_list.status().message()),
             Catch::Contains("l0 sent a map but l1 sent a list"));
  auto scalar_map =
      MergeAll({Json(R"({"a": 1})"), Json(R"({"a": {"x": 1}})")}, merger);
  REQUIRE_FALSE(scalar_map.ok());
  CHECK_THAT(std::string(scalar_map.status().message()),
             Catch::Contains("l1 sent a map but l0 sent a scalar"));
}

TEST_CASE("One learner and no learners merge too") {
  RequireMerged({R"({"loss": 1, "p": [1, 2], "learner_step": 3})"},
                R"({"loss": [1], "p": [1, 2], "learner_step": 3})");
  InfoMerger merger(MergeConfig{{}});
  auto merged = MergeAll({}, merger);
  REQUIRE(merged.ok());
  CHECK(merged->info.fields().empty());
}

TEST_CASE("Mismatched inputs are an error, not a crash") {
  InfoMerger merger(MergeConfig{{}});
  Struct s;
  auto merged = merger.Merge({&s}, {"a", "b"}, {1});
  CHECK_FALSE(merged.ok());
}

// Found by tests/fuzz/info_merger_fuzzer: a per-sample key sent as a scalar (or
// null) by every learner merged into a list of one entry per learner, and the
// call succeeded with a "per-sample" list that did not line up with the batch.
TEST_CASE("A per-sample key sent as a scalar fails, naming key and learner") {
  SECTION("as the fuzzer found it: null at a per-sample path") {
    MergeConfig config;
    config.per_sample_keys = {"a.b", "a"};
    InfoMerger merger(config);
    auto merged = MergeAll({Json(R"({"a.b": null})")}, merger, {2});
    REQUIRE_FALSE(merged.ok());
    CHECK(merged.status().code() == absl::StatusCode::kInternal);
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("'a.b'") &&
                   Catch::Contains("l0 sent null for its 2 samples"));
  }
  SECTION("a priority per learner instead of one per sample") {
    InfoMerger merger(MergeConfig{});
    auto merged = MergeAll({Json(R"({"priority_info": {"priority": 0.5}})"),
                            Json(R"({"priority_info": {"priority": 0.7}})")},
                           merger, {2, 2});
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("'priority_info.priority'") &&
                   Catch::Contains("l0 sent a scalar for its 2 samples"));
  }
  SECTION("learners without samples need not send it: an empty list") {
    InfoMerger merger(MergeConfig{});
    auto merged = MergeAll({Json(R"({"priority_info": {"priority": 0.5}})")},
                           merger, {0});
    REQUIRE(merged.ok());
    CHECK(merged->info.fields()
              .at("priority_info")
              .struct_value()
              .fields()
              .at("priority")
              .list_value()
              .values_size() == 0);
  }
}

// Found by tests/fuzz/info_merger_fuzzer: a per-sample list at a key named like
// a homogeneous key (priority_info.task_id) took the first learner's list, so
// one learner's 0 entries stood for a batch of 4 samples.
TEST_CASE(
    "Under a per-sample key, a homogeneous key's name is per-sample too") {
  InfoMerger merger(MergeConfig{});
  SECTION("a learner that omits it fails, named") {
    auto merged =
        MergeAll({Json(R"({"priority_info": {"task_id": []}})"), Json(R"({})")},
                 merger, {0, 4});
    REQUIRE_FALSE(merged.ok());
    CHECK_THAT(std::string(merged.status().message()),
               Catch::Contains("'priority_info.task_id'") &&
                   Catch::Contains("l1 sent none for its 4 samples"));
  }
  SECTION("lists that line up concatenate") {
    RequireMerged({R"({"priority_info": {"task_id": [1, 2]}})",
                   R"({"priority_info": {"task_id": [3]}})"},
                  R"({"priority_info": {"task_id": [1, 2, 3]}})", {2, 1});
  }
}
