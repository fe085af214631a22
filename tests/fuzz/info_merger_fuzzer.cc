// libFuzzer target: the info merger (lib/aggregation/info_merger).
//
// From the input, deterministically (FuzzedDataProvider): a MergeConfig, 0 to 5
// learners, each with an id, a sample count (its slice of the batch), the
// learners it stands for (DataDemand.learners: mostly 0, a plain learner; now
// and then 1 to 3, a child aggregator) and a random google.protobuf.Struct
// tree whose keys are drawn mostly from a small set (so learners collide on
// keys, per-sample keys included) and whose lists under per-sample keys
// often, not always, have one entry per sample, and elsewhere, for a child
// aggregator, often one entry per learner it stands for.
//
// Checked on every input: Merge never crashes; an error is INTERNAL; and when
// it succeeds, every list in the merged info at a per-sample path (a
// merge.per_sample_keys entry or under one, reached through maps) has exactly
// the batch's sample count of entries, in sample order: learner 0's entries
// first (equal to the list it sent), then learner 1's, ...; every other key
// that holds scalars or nulls (alone or beside lists: a tree's per-learner
// values, info_merger.h) merged to one entry per learner stood for: a list's
// entries, or the scalar or null (none: null) once for each. And the raw
// merger
// (lib/aggregation/raw_info_merger), given the same infos as serialized
// LearnReplies, either declines or merges to what InfoMerger merges, where
// InfoMerger has no warning. The replies' bytes are not always protobuf's own
// serialization: some are written by hand with overlong tags and lengths
// (some past protobuf's limits), unknown or repeated fields, and some have
// bytes changed, inserted, removed or cut off. The raw merger may merge only
// replies that LearnReply::ParseFromString parses, and then to what
// InfoMerger merges from what they parse to.
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/aggregation/info_merger.h"
#include "lib/aggregation/raw_info_merger.h"
#include "proto/learner.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
using google::protobuf::util::MessageDifferencer;

constexpr const char* kKeys[] = {"priority_info",
                                 "priority",
                                 "replay_unique_id",
                                 "loss",
                                 "learner_step",
                                 "task_id",
                                 "stats",
                                 "td_error",
                                 "a",
                                 "b",
                                 "",
                                 "a.b",
                                 "priority_info.priority"};

// Whether the dotted `path` is a per-sample key or lies under one.
bool PerSample(const std::vector<std::string>& keys, const std::string& path) {
  for (const std::string& key : keys) {
    if (path == key) return true;
    if (path.size() > key.size() && path.compare(0, key.size(), key) == 0 &&
        path[key.size()] == '.') {
      return true;
    }
  }
  return false;
}

// The dotted form of a key path, joined as the merger joins it.
std::string Dotted(const std::vector<std::string>& path) {
  std::string dotted;
  for (const std::string& key : path) {
    dotted = dotted.empty() ? key : absl::StrCat(dotted, ".", key);
  }
  return dotted;
}

class TreeBuilder {
 public:
  TreeBuilder(FuzzedDataProvider& input, const std::vector<std::string>& keys)
      : input_(input), per_sample_keys_(keys) {}

  // `stands_for`: the learners this one stands for (0: a plain learner).
  void Build(Struct* out, size_t samples, size_t stands_for) {
    budget_ = 64;
    stands_for_ = stands_for;
    Map(out, {}, samples, 0);
  }

 private:
  std::string Key() {
    if (input_.ConsumeIntegralInRange(0, 15) == 0) {
      return input_.ConsumeRandomLengthString(8);
    }
    return kKeys[input_.ConsumeIntegralInRange<size_t>(0,
                                                       std::size(kKeys) - 1)];
  }

  void Map(Struct* out, const std::vector<std::string>& path, size_t samples,
           int depth) {
    const int fields = input_.ConsumeIntegralInRange(0, 4);
    for (int i = 0; i < fields && budget_ > 0; ++i) {
      std::vector<std::string> child = path;
      child.push_back(Key());
      Fill(&(*out->mutable_fields())[child.back()], child, samples, depth + 1);
    }
  }

  // A random value at `path` (a key path through maps).
  void Fill(Value* out, const std::vector<std::string>& path, size_t samples,
            int depth) {
    --budget_;
    const bool per_sample = PerSample(per_sample_keys_, Dotted(path));
    int kind = input_.ConsumeIntegralInRange(0, 8);
    if (depth >= 4 && kind >= 5) kind = 1;
    switch (kind) {
      case 0:
        out->set_null_value(google::protobuf::NULL_VALUE);
        break;
      case 1:
        out->set_number_value(input_.ConsumeIntegralInRange(-3, 3));
        break;
      case 2:
        out->set_string_value(input_.ConsumeRandomLengthString(4));
        break;
      case 3:
        out->set_bool_value(input_.ConsumeBool());
        break;
      case 4:
        break;  // a Value with no kind set
      case 5:
      case 6: {
        // A list: at a per-sample path mostly one entry per sample; else,
        // from a child aggregator, often one entry per learner.
        size_t entries = input_.ConsumeIntegralInRange<size_t>(0, 4);
        if (per_sample && input_.ConsumeIntegralInRange(0, 3) != 0) {
          entries = samples;
        } else if (!per_sample && stands_for_ > 0 && input_.ConsumeBool()) {
          entries = stands_for_;
        }
        auto* list = out->mutable_list_value();
        for (size_t i = 0; i < entries; ++i) {
          Value* entry = list->add_values();
          if (budget_ > 0 && input_.ConsumeIntegralInRange(0, 7) == 0) {
            Fill(entry, {"[]"}, samples, depth + 1);
          } else {
            entry->set_number_value(input_.ConsumeIntegralInRange(0, 255));
          }
        }
        break;
      }
      default:
        Map(out->mutable_struct_value(), path, samples, depth);
        break;
    }
  }

  FuzzedDataProvider& input_;
  const std::vector<std::string>& per_sample_keys_;
  int budget_ = 0;
  size_t stands_for_ = 0;
};

// Writes LearnReplies as protobuf would, except where the input says: a tag
// or length padded with overlong bytes (now and then past protobuf's 5-byte
// limit), an unknown field, a field given twice.
class NoncanonicalWriter {
 public:
  explicit NoncanonicalWriter(FuzzedDataProvider& input) : input_(input) {}

  std::string Reply(const Struct& info, const std::string& task_id) {
    std::string out;
    Delimited(1, StructBody(info), &out);
    if (!task_id.empty()) Delimited(2, task_id, &out);
    Extra(&out);
    return out;
  }

 private:
  void Varint(uint64_t value, std::string* out) {
    int pad = 0;
    switch (input_.ConsumeIntegralInRange(0, 15)) {
      case 0:
        pad = 1;
        break;
      case 1:
        pad = input_.ConsumeIntegralInRange(2, 6);
        break;
      default:
        break;
    }
    do {
      uint8_t byte = value & 0x7f;
      value >>= 7;
      if (value != 0 || pad > 0) byte |= 0x80;
      out->push_back(static_cast<char>(byte));
    } while (value != 0);
    for (int i = 1; i <= pad; ++i) out->push_back(i < pad ? '\x80' : '\0');
  }
  void Tag(uint32_t number, int type, std::string* out) {
    Varint(number << 3 | type, out);
  }
  void Delimited(uint32_t number, const std::string& body, std::string* out) {
    Tag(number, 2, out);
    Varint(body.size(), out);
    out->append(body);
  }
  // Now and then an unknown field, or the last field again.
  void Extra(std::string* out) {
    switch (input_.ConsumeIntegralInRange(0, 31)) {
      case 0:
        Tag(15, 0, out);
        Varint(1, out);
        break;
      case 1:
        out->append(*out);
        break;
      default:
        break;
    }
  }
  std::string StructBody(const Struct& map) {
    std::string body;
    for (const auto& [key, value] : map.fields()) {
      std::string entry;
      Delimited(1, key, &entry);
      Delimited(2, ValueBytes(value), &entry);
      Delimited(1, entry, &body);
    }
    Extra(&body);
    return body;
  }
  std::string ValueBytes(const Value& value) {
    std::string out;
    switch (value.kind_case()) {
      case Value::kNullValue:
        Tag(1, 0, &out);
        Varint(value.null_value(), &out);
        break;
      case Value::kNumberValue: {
        Tag(2, 1, &out);
        const double number = value.number_value();
        char bytes[sizeof(number)];
        std::memcpy(bytes, &number, sizeof(number));
        out.append(bytes, sizeof(bytes));
        break;
      }
      case Value::kStringValue:
        Delimited(3, value.string_value(), &out);
        break;
      case Value::kBoolValue:
        Tag(4, 0, &out);
        Varint(value.bool_value() ? 1 : 0, &out);
        break;
      case Value::kStructValue:
        Delimited(5, StructBody(value.struct_value()), &out);
        break;
      case Value::kListValue: {
        std::string list;
        for (const Value& entry : value.list_value().values()) {
          Delimited(1, ValueBytes(entry), &list);
        }
        Delimited(6, list, &out);
        break;
      }
      default:
        break;
    }
    Extra(&out);
    return out;
  }

  FuzzedDataProvider& input_;
};

// A few bytes of `bytes` changed, inserted, removed, or the rest cut off.
void Mutate(FuzzedDataProvider& input, std::string* bytes) {
  for (int n = input.ConsumeIntegralInRange(1, 3); n > 0; --n) {
    const size_t at = input.ConsumeIntegralInRange<size_t>(0, bytes->size());
    switch (input.ConsumeIntegralInRange(0, 3)) {
      case 0:
        if (at < bytes->size()) (*bytes)[at] = input.ConsumeIntegral<char>();
        break;
      case 1:
        bytes->insert(at, 1, input.ConsumeIntegral<char>());
        break;
      case 2:
        if (at < bytes->size()) bytes->erase(at, 1);
        break;
      default:
        bytes->resize(at);
        break;
    }
  }
}

// The value at `path` in `info`, through maps only; null when there is none.
const Value* Find(const Struct& info, const std::vector<std::string>& path) {
  const Struct* map = &info;
  const Value* value = nullptr;
  for (size_t i = 0; i < path.size(); ++i) {
    if (map == nullptr) return nullptr;
    auto it = map->fields().find(path[i]);
    if (it == map->fields().end()) return nullptr;
    value = &it->second;
    map = value->kind_case() == Value::kStructValue ? &value->struct_value()
                                                    : nullptr;
  }
  return value;
}

struct Checker {
  const aggregator::MergeConfig& config;
  const std::vector<Struct>& originals;
  const std::vector<size_t>& counts;
  const std::vector<size_t>& stands_for;
  size_t total;

  void Walk(const Struct& map, std::vector<std::string>* path) const {
    for (const auto& [key, value] : map.fields()) {
      path->push_back(key);
      const bool per_sample = PerSample(config.per_sample_keys, Dotted(*path));
      if (!per_sample && Homogeneous(key)) {
        // The first learner's value, whole: no rule below applies in it.
      } else if (value.kind_case() == Value::kStructValue) {
        Walk(value.struct_value(), path);
      } else if (value.kind_case() == Value::kListValue && per_sample) {
        CheckList(value.list_value(), *path);
      } else if (!per_sample) {
        CheckPerLearner(value, *path);
      }
      path->pop_back();
    }
  }

  bool Homogeneous(const std::string& key) const {
    for (const std::string& name : config.homogeneous_keys) {
      if (name == key) return true;
    }
    return false;
  }

  // The model of the per-learner rule: where the learners' values at `path`
  // are scalars or nulls, or such beside lists (and no map), the merge is one
  // entry per learner stood for.
  void CheckPerLearner(const Value& merged,
                       const std::vector<std::string>& path) const {
    bool list = false;
    bool scalar = false;
    std::vector<const Value*> sent;
    for (const Struct& original : originals) {
      const Value* value = Find(original, path);
      sent.push_back(value);
      if (value == nullptr) continue;
      switch (value->kind_case()) {
        case Value::kStructValue:
          return;  // not this rule's case
        case Value::kListValue:
          list = true;
          break;
        case Value::kNumberValue:
        case Value::kStringValue:
        case Value::kBoolValue:
          scalar = true;
          break;
        default:
          break;
      }
    }
    if (list && !scalar) return;  // lists concatenate
    google::protobuf::ListValue expected;
    for (size_t i = 0; i < sent.size(); ++i) {
      const Value* value = sent[i];
      const auto kind =
          value == nullptr ? Value::KIND_NOT_SET : value->kind_case();
      if (kind == Value::kListValue) {
        FUZZ_CHECK(stands_for[i] > 0);
        FUZZ_CHECK(static_cast<size_t>(value->list_value().values_size()) ==
                   stands_for[i]);
        for (const Value& entry : value->list_value().values()) {
          *expected.add_values() = entry;
        }
      } else {
        for (size_t n = std::max<size_t>(stands_for[i], 1); n > 0; --n) {
          if (value == nullptr) {
            expected.add_values()->set_null_value(google::protobuf::NULL_VALUE);
          } else {
            *expected.add_values() = *value;
          }
        }
      }
    }
    FUZZ_CHECK(merged.kind_case() == Value::kListValue);
    if (!MessageDifferencer::Equals(merged.list_value(), expected)) {
      std::fprintf(stderr, "per-learner list '%s' is not the model's\n",
                   Dotted(path).c_str());
    }
    FUZZ_CHECK(MessageDifferencer::Equals(merged.list_value(), expected));
  }

  void CheckList(const google::protobuf::ListValue& list,
                 const std::vector<std::string>& path) const {
    if (static_cast<size_t>(list.values_size()) != total) {
      std::fprintf(stderr,
                   "per-sample list '%s' has %d entries for %zu samples\n",
                   Dotted(path).c_str(), list.values_size(), total);
    }
    FUZZ_CHECK(static_cast<size_t>(list.values_size()) == total);
    size_t at = 0;
    for (size_t i = 0; i < originals.size(); ++i) {
      if (counts[i] == 0) continue;
      const Value* sent = Find(originals[i], path);
      FUZZ_CHECK(sent != nullptr);
      FUZZ_CHECK(sent->kind_case() == Value::kListValue);
      FUZZ_CHECK(static_cast<size_t>(sent->list_value().values_size()) ==
                 counts[i]);
      for (size_t j = 0; j < counts[i]; ++j) {
        if (!MessageDifferencer::Equals(sent->list_value().values(j),
                                        list.values(at + j))) {
          std::fprintf(stderr,
                       "per-sample list '%s': entry %zu is not learner %zu's "
                       "entry %zu\n",
                       Dotted(path).c_str(), at + j, i, j);
        }
        FUZZ_CHECK(MessageDifferencer::Equals(sent->list_value().values(j),
                                              list.values(at + j)));
      }
      at += counts[i];
    }
    FUZZ_CHECK(at == total);
  }
};

// FUZZ_PRINT=1: what the input decodes to, to write a regression test from.
void Print(const aggregator::MergeConfig& config,
           const std::vector<std::string>& ids,
           const std::vector<size_t>& counts,
           const std::vector<size_t>& stands_for,
           const std::vector<Struct>& infos) {
  std::fprintf(stderr, "per_sample_keys: [%s]\nhomogeneous_keys: [%s]\n",
               absl::StrJoin(config.per_sample_keys, ", ").c_str(),
               absl::StrJoin(config.homogeneous_keys, ", ").c_str());
  for (size_t i = 0; i < infos.size(); ++i) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(infos[i], &json);
    std::fprintf(stderr, "learner '%s', %zu samples, stands for %zu: %s\n",
                 ids[i].c_str(), counts[i], stands_for[i], json.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  aggregator::MergeConfig config;
  switch (input.ConsumeIntegralInRange(0, 4)) {
    case 0:
      break;  // the defaults: everything under priority_info
    case 1:
      config.per_sample_keys = {"priority_info", "stats.td_error"};
      break;
    case 2:
      config.per_sample_keys = {"a.b", "a"};
      break;
    case 3:
      config.per_sample_keys = {};
      break;
    default:
      config.per_sample_keys = {"priority_info.priority", "loss"};
      break;
  }
  if (input.ConsumeBool()) config.homogeneous_keys.push_back("priority");
  if (input.ConsumeBool()) config.homogeneous_keys.push_back("a");

  const size_t learners = input.ConsumeIntegralInRange<size_t>(0, 5);
  std::vector<std::string> ids;
  std::vector<size_t> counts;
  std::vector<size_t> stands_for;
  std::vector<Struct> infos(learners);
  TreeBuilder builder(input, config.per_sample_keys);
  for (size_t i = 0; i < learners; ++i) {
    ids.push_back(input.ConsumeBool() ? "l" + std::to_string(i)
                                      : input.ConsumeRandomLengthString(4));
    counts.push_back(input.ConsumeIntegralInRange<size_t>(0, 6));
    stands_for.push_back(input.ConsumeIntegralInRange(0, 3) == 0
                             ? input.ConsumeIntegralInRange<size_t>(1, 3)
                             : 0);
    builder.Build(&infos[i], counts.back(), stands_for.back());
  }
  size_t total = 0;
  for (size_t count : counts) total += count;
  const std::vector<Struct> originals = infos;

  if (std::getenv("FUZZ_PRINT") != nullptr) {
    Print(config, ids, counts, stands_for, infos);
  }

  // The raw merger on the same infos as bytes, protobuf's serialization or
  // not: it merges only what parses, and to what InfoMerger merges of it.
  std::vector<std::string> serialized;
  NoncanonicalWriter writer(input);
  for (size_t i = 0; i < learners; ++i) {
    aggregator::v1::LearnReply reply;
    *reply.mutable_info() = infos[i];
    reply.set_task_id(ids[i]);
    switch (input.ConsumeIntegralInRange(0, 3)) {
      case 2:
        serialized.push_back(writer.Reply(infos[i], ids[i]));
        break;
      case 3:
        serialized.push_back(reply.SerializeAsString());
        Mutate(input, &serialized.back());
        break;
      default:
        serialized.push_back(reply.SerializeAsString());
        break;
    }
  }
  const std::vector<absl::string_view> raw_replies(serialized.begin(),
                                                   serialized.end());
  const std::optional<aggregator::RawInfoMerger::Merged> raw =
      aggregator::RawInfoMerger(config).Merge(raw_replies, counts, stands_for);
  aggregator::InfoMerger merger(config);
  if (raw.has_value()) {
    std::vector<aggregator::v1::LearnReply> parsed(learners);
    std::vector<Struct*> parsed_infos;
    for (size_t i = 0; i < learners; ++i) {
      FUZZ_CHECK(parsed[i].ParseFromString(serialized[i]));
      parsed_infos.push_back(parsed[i].mutable_info());
    }
    absl::StatusOr<aggregator::MergedInfo> expected =
        merger.Merge(parsed_infos, ids, counts, stands_for);
    FUZZ_CHECK(expected.ok());
    FUZZ_CHECK(expected->warnings.empty());
    aggregator::v1::LearnReply merged;
    FUZZ_CHECK(merged.ParseFromString(raw->reply));
    FUZZ_CHECK(MessageDifferencer::Equals(merged.info(), expected->info));
    FUZZ_CHECK(merged.task_id() == parsed[0].task_id());
  }

  std::vector<Struct*> pointers;
  for (Struct& info : infos) pointers.push_back(&info);

  // Sizes that do not match are an error.
  if (learners > 0 && input.ConsumeIntegralInRange(0, 15) == 0) {
    std::vector<size_t> short_counts(counts.begin(), counts.end() - 1);
    FUZZ_CHECK(!merger.Merge(pointers, ids, short_counts).ok());
    if (learners > 1) {  // (none at all means all plain)
      const std::vector<size_t> short_stands(stands_for.begin(),
                                             stands_for.end() - 1);
      FUZZ_CHECK(!merger.Merge(pointers, ids, counts, short_stands).ok());
    }
    return 0;
  }

  absl::StatusOr<aggregator::MergedInfo> merged =
      merger.Merge(pointers, ids, counts, stands_for);
  if (!merged.ok()) {
    FUZZ_CHECK(merged.status().code() == absl::StatusCode::kInternal);
    return 0;
  }
  std::vector<std::string> path;
  Checker{config, originals, counts, stands_for, total}.Walk(merged->info,
                                                             &path);
  return 0;
}
