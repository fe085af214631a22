#include "lib/aggregation/raw_info_merger.h"

#include <google/protobuf/stubs/common.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "lib/aggregation/info_merger.h"
#include "lib/aggregation/wire_reader.h"

namespace aggregator {
namespace {

constexpr int kVarint = WireReader::kVarint;
constexpr int kFixed64 = WireReader::kFixed64;
constexpr int kLengthDelimited = WireReader::kLengthDelimited;

// google.protobuf.Value's fields (its oneof `kind`).
constexpr uint32_t kNullValue = 1;
constexpr uint32_t kNumberValue = 2;
constexpr uint32_t kStringValue = 3;
constexpr uint32_t kBoolValue = 4;
constexpr uint32_t kStructValue = 5;
constexpr uint32_t kListValue = 6;
// A null Value, as InfoMerger writes one for a learner without the key.
constexpr char kNullBytes[] = {kNullValue << 3 | kVarint, 0};

struct Field {
  uint32_t number = 0;
  int type = 0;
  absl::string_view body;  // length-delimited and fixed64 fields
};

// A message's fields in order, within protobuf's limits (wire_reader.h).
class FieldReader {
 public:
  explicit FieldReader(absl::string_view bytes) : reader_(bytes) {}
  bool done() const { return reader_.done(); }

  // False when malformed. Inlined: it runs for every list entry.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Next(Field* field) {
    WireReader::Field read;
    if (!reader_.Next(&read)) return false;
    field->number = read.number;
    field->type = read.type;
    field->body = reader_.Body(read);
    return true;
  }

 private:
  WireReader reader_;
};

// Well-formed UTF-8, as protobuf requires of proto3 strings (with its own
// check): a reply that breaks it must fail as InfoMerger's parse fails.
bool ValidUtf8(absl::string_view text) {
  return google::protobuf::internal::IsStructurallyValidUTF8(
      text.data(), static_cast<int>(text.size()));
}

enum class Shape { kNull, kScalar, kList, kMap };

// A google.protobuf.Value as it arrived.
struct RawValue {
  Shape shape = Shape::kNull;
  absl::string_view bytes;  // the whole Value message
  absl::string_view body;   // of its ListValue or Struct
  bool nan = false;         // a number that is NaN
};

// Sorts a Value into its shape. Its bytes are plain (PlainValue, run over
// the whole info before anything is read): one kind, of its wire type.
RawValue ClassifyValue(absl::string_view bytes) {
  RawValue value;
  value.bytes = bytes;
  FieldReader reader(bytes);
  Field field;
  if (reader.done() || !reader.Next(&field)) return value;  // null
  switch (field.number) {
    case kNumberValue: {
      double number;
      std::memcpy(&number, field.body.data(), sizeof(number));
      value.nan = std::isnan(number);
      value.shape = Shape::kScalar;
      break;
    }
    case kStringValue:
    case kBoolValue:
      value.shape = Shape::kScalar;
      break;
    case kStructValue:
      value.shape = Shape::kMap;
      value.body = field.body;
      break;
    case kListValue:
      value.shape = Shape::kList;
      value.body = field.body;
      break;
    default:  // kNullValue
      break;
  }
  return value;
}

using RawMap = std::vector<std::pair<absl::string_view, RawValue>>;

// Calls `visit(key, value)` (bool(absl::string_view, absl::string_view), the
// value's bytes empty when the entry has none) for each entry of a Struct's
// body; false when it does, or when the entries are not plain (a key that is
// not UTF-8, a field given twice, another field).
template <typename Visit>
bool ForEachEntry(absl::string_view body, const Visit& visit) {
  FieldReader entries(body);
  Field entry;
  while (!entries.done()) {
    if (!entries.Next(&entry) || entry.number != 1 ||
        entry.type != kLengthDelimited) {
      return false;
    }
    FieldReader fields(entry.body);
    Field field;
    bool seen[3] = {false, false, false};
    absl::string_view parts[3];
    while (!fields.done()) {
      if (!fields.Next(&field) || field.type != kLengthDelimited ||
          field.number > 2 || seen[field.number]) {
        return false;
      }
      seen[field.number] = true;
      parts[field.number] = field.body;
    }
    if (!ValidUtf8(parts[1]) || !visit(parts[1], parts[2])) return false;
  }
  return true;
}

// Reads a Struct's entries (plain: PlainMap has passed them), sorted by key;
// false on a key given twice.
bool ReadMap(absl::string_view body, RawMap* map) {
  const bool plain =
      ForEachEntry(body, [&](absl::string_view key, absl::string_view bytes) {
        map->emplace_back(key, ClassifyValue(bytes));
        return true;
      });
  if (!plain) return false;
  std::sort(map->begin(), map->end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < map->size(); ++i) {
    if ((*map)[i].first == (*map)[i - 1].first) return false;
  }
  return true;
}

bool PlainMap(absl::string_view body, int depth);

// Whether a Value's bytes (and all they hold) are plain, and at most `depth`
// maps or lists deep: what a merge copies must parse as InfoMerger's would.
bool PlainValue(absl::string_view bytes, int depth) {
  FieldReader reader(bytes);
  Field field;
  int kinds = 0;
  while (!reader.done()) {
    if (!reader.Next(&field) || ++kinds > 1) return false;
    switch (field.number) {
      case kNullValue:
      case kBoolValue:
        if (field.type != kVarint) return false;
        break;
      case kNumberValue:
        if (field.type != kFixed64) return false;
        break;
      case kStringValue:
        if (field.type != kLengthDelimited || !ValidUtf8(field.body)) {
          return false;
        }
        break;
      case kStructValue:
        if (field.type != kLengthDelimited ||
            !PlainMap(field.body, depth - 1)) {
          return false;
        }
        break;
      case kListValue: {
        if (field.type != kLengthDelimited || depth <= 1) return false;
        FieldReader entries(field.body);
        Field entry;
        while (!entries.done()) {
          if (!entries.Next(&entry) || entry.number != 1 ||
              entry.type != kLengthDelimited ||
              !PlainValue(entry.body, depth - 1)) {
            return false;
          }
        }
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

// The same for a Struct's body (a key may come twice: protobuf keeps the
// last, and so does whoever parses what the merge copied).
bool PlainMap(absl::string_view body, int depth) {
  return depth > 0 &&
         ForEachEntry(body, [&](absl::string_view, absl::string_view value) {
           return PlainValue(value, depth);
         });
}

// The entries of a ListValue's body (which Plain checked).
size_t ListSize(absl::string_view body) {
  FieldReader entries(body);
  Field field;
  size_t count = 0;
  while (!entries.done() && entries.Next(&field)) ++count;
  return count;
}

// One merge: InfoMerger's rules where they merge without a word.
class CleanMerge {
 public:
  CleanMerge(const std::set<std::string>& homogeneous_keys,
             const std::vector<std::string>& per_sample_keys,
             const std::vector<size_t>& counts,
             const std::vector<size_t>& learners)
      : homogeneous_keys_(homogeneous_keys),
        per_sample_keys_(per_sample_keys),
        counts_(counts),
        learners_(learners) {}

  // Appends the merged Struct's entries to `out`; false when the merge is
  // not clean.
  bool Maps(const std::string& path, const std::vector<RawMap>& maps,
            std::string* out) const {
    std::vector<absl::string_view> keys;
    for (const RawMap& map : maps) {
      for (const auto& entry : map) keys.push_back(entry.first);
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<const RawValue*> values(maps.size());
    std::string value;
    std::string entry;
    for (absl::string_view key : keys) {
      for (size_t i = 0; i < maps.size(); ++i) {
        auto it = std::lower_bound(maps[i].begin(), maps[i].end(), key,
                                   [](const auto& entry, absl::string_view k) {
                                     return entry.first < k;
                                   });
        values[i] =
            it != maps[i].end() && it->first == key ? &it->second : nullptr;
      }
      const std::string key_path =
          path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
      value.clear();
      const bool merged = homogeneous_keys_.count(std::string(key)) > 0 &&
                                  !IsPerSample(key_path)
                              ? Homogeneous(values, &value)
                              : Values(key_path, values, &value);
      if (!merged) return false;
      entry.clear();
      AppendField(1, key, &entry);
      AppendField(2, value, &entry);
      AppendField(1, entry, out);
    }
    return true;
  }

 private:
  // Every learner that sent the key sent the same scalar (or null).
  static bool Homogeneous(const std::vector<const RawValue*>& values,
                          std::string* out) {
    const RawValue* first = nullptr;
    for (const RawValue* value : values) {
      if (value == nullptr) continue;
      if (value->shape == Shape::kMap || value->shape == Shape::kList) {
        return false;
      }
      if (first == nullptr) {
        first = value;
      } else if (first->nan || value->bytes != first->bytes) {
        return false;  // InfoMerger warns of (or weighs) a disagreement
      }
    }
    out->append(first->bytes.data(), first->bytes.size());
    return true;
  }

  bool Values(const std::string& path,
              const std::vector<const RawValue*>& values,
              std::string* out) const {
    Shape shape = Shape::kScalar;
    for (const RawValue* value : values) {
      if (value != nullptr &&
          (value->shape == Shape::kMap || value->shape == Shape::kList)) {
        shape = value->shape;
        break;
      }
    }
    std::string body;
    if (shape == Shape::kScalar) {
      // One entry per learner; a per-sample key would not line up.
      if (IsPerSample(path)) return false;
      for (size_t i = 0; i < values.size(); ++i) {
        AppendForEachLearner(i, values[i], &body);
      }
      AppendField(kListValue, body, out);
      return true;
    }
    if (shape == Shape::kList && !IsPerSample(path) && Mixes(values)) {
      if (!PerLearner(values, &body)) return false;
      AppendField(kListValue, body, out);
      return true;
    }
    // A map or a list from every learner, or InfoMerger has words.
    for (const RawValue* value : values) {
      if (value == nullptr || value->shape != shape) return false;
    }
    if (shape == Shape::kList) {
      const bool per_sample = IsPerSample(path);
      for (size_t i = 0; i < values.size(); ++i) {
        if (per_sample && ListSize(values[i]->body) != counts_[i]) {
          return false;
        }
        body.append(values[i]->body.data(), values[i]->body.size());
      }
      AppendField(kListValue, body, out);
      return true;
    }
    std::vector<RawMap> maps(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (!ReadMap(values[i]->body, &maps[i])) return false;
    }
    if (!Maps(path, maps, &body)) return false;
    AppendField(kStructValue, body, out);
    return true;
  }

  bool IsPerSample(const std::string& path) const {
    return IsPerSampleKey(per_sample_keys_, path);
  }

  size_t StandsFor(size_t i) const {
    return i < learners_.size() ? learners_[i] : 0;
  }

  // Lists and scalars at one key, and no map (InfoMerger's per-learner case).
  static bool Mixes(const std::vector<const RawValue*>& values) {
    bool list = false;
    bool scalar = false;
    for (const RawValue* value : values) {
      if (value == nullptr) continue;
      if (value->shape == Shape::kMap) return false;
      list = list || value->shape == Shape::kList;
      scalar = scalar || value->shape == Shape::kScalar;
    }
    return list && scalar;
  }

  // InfoMerger's per-learner list: a list of exactly as many entries as its
  // learner stands for; false for any other list.
  bool PerLearner(const std::vector<const RawValue*>& values,
                  std::string* body) const {
    for (size_t i = 0; i < values.size(); ++i) {
      const RawValue* value = values[i];
      if (value != nullptr && value->shape == Shape::kList) {
        const size_t n = StandsFor(i);
        if (n == 0 || ListSize(value->body) != n) return false;
        body->append(value->body.data(), value->body.size());
      } else {
        AppendForEachLearner(i, value, body);
      }
    }
    return true;
  }

  // A scalar or null (none: a null) once for each learner learner i stands
  // for.
  void AppendForEachLearner(size_t i, const RawValue* value,
                            std::string* body) const {
    const absl::string_view bytes =
        value != nullptr ? value->bytes
                         : absl::string_view(kNullBytes, sizeof(kNullBytes));
    for (size_t n = std::max<size_t>(StandsFor(i), 1); n > 0; --n) {
      AppendField(1, bytes, body);
    }
  }

  const std::set<std::string>& homogeneous_keys_;
  const std::vector<std::string>& per_sample_keys_;
  const std::vector<size_t>& counts_;
  const std::vector<size_t>& learners_;  // empty: all plain
};

// A LearnReply's fields; false unless plain.
struct RawReply {
  absl::string_view info;  // the Struct's body
  absl::string_view task_id;
  absl::string_view buffer_id;
};

bool ReadReply(absl::string_view bytes, RawReply* reply) {
  FieldReader reader(bytes);
  Field field;
  bool seen[4] = {false, false, false, false};
  while (!reader.done()) {
    if (!reader.Next(&field) || field.number > 3 || seen[field.number] ||
        field.type != kLengthDelimited) {
      return false;
    }
    seen[field.number] = true;
    if (field.number == 1) {
      reply->info = field.body;
    } else if (!ValidUtf8(field.body)) {
      return false;
    } else {
      (field.number == 2 ? reply->task_id : reply->buffer_id) = field.body;
    }
  }
  return true;
}

}  // namespace

RawInfoMerger::RawInfoMerger(const MergeConfig& config)
    : homogeneous_keys_(config.homogeneous_keys.begin(),
                        config.homogeneous_keys.end()),
      per_sample_keys_(config.per_sample_keys) {}

std::optional<RawInfoMerger::Merged> RawInfoMerger::Merge(
    const std::vector<absl::string_view>& replies,
    const std::vector<size_t>& sample_counts,
    const std::vector<size_t>& learners) const {
  if (replies.empty() || replies.size() != sample_counts.size() ||
      (!learners.empty() && learners.size() != replies.size())) {
    return std::nullopt;
  }
  Merged merged;
  std::vector<RawMap> maps(replies.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    RawReply reply;
    if (!ReadReply(replies[i], &reply) || !PlainMap(reply.info, kMaxDepth) ||
        !ReadMap(reply.info, &maps[i])) {
      return std::nullopt;
    }
    merged.task_ids.emplace_back(reply.task_id);
    merged.buffer_ids.emplace_back(reply.buffer_id);
  }
  std::string info;
  const CleanMerge merge(homogeneous_keys_, per_sample_keys_, sample_counts,
                         learners);
  if (!merge.Maps("", maps, &info)) return std::nullopt;
  AppendField(1, info, &merged.reply);
  if (!merged.task_ids[0].empty()) {
    AppendField(2, merged.task_ids[0], &merged.reply);
  }
  if (!merged.buffer_ids[0].empty()) {
    AppendField(3, merged.buffer_ids[0], &merged.reply);
  }
  return merged;
}

}  // namespace aggregator
