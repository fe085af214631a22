#include "lib/aggregation/info_merger.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aggregator {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

enum class Shape { kAbsent, kNull, kScalar, kList, kMap };

Shape ShapeOf(const Value* value) {
  if (value == nullptr) return Shape::kAbsent;
  switch (value->kind_case()) {
    case Value::kStructValue:
      return Shape::kMap;
    case Value::kListValue:
      return Shape::kList;
    case Value::kNullValue:
    case Value::KIND_NOT_SET:
      return Shape::kNull;
    default:
      return Shape::kScalar;
  }
}

const char* ShapeName(Shape shape) {
  switch (shape) {
    case Shape::kMap:
      return "a map";
    case Shape::kList:
      return "a list";
    case Shape::kScalar:
      return "a scalar";
    default:
      return "null";
  }
}

std::string Brief(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNumberValue:
      return absl::StrCat(value.number_value());
    case Value::kStringValue:
      return absl::StrCat("\"", value.string_value(), "\"");
    case Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    default:
      return ShapeName(ShapeOf(&value));
  }
}

// One merge: the learners' ids for messages, and the warnings it collects.
class MergePass {
 public:
  MergePass(const std::set<std::string>& homogeneous_keys,
            const std::vector<std::string>& per_sample_keys,
            const std::vector<std::string>& learner_ids,
            const std::vector<size_t>& sample_counts,
            const std::vector<size_t>& learners,
            std::vector<std::string>* warnings)
      : homogeneous_keys_(homogeneous_keys),
        per_sample_keys_(per_sample_keys),
        ids_(learner_ids),
        counts_(sample_counts),
        learners_(learners),
        warnings_(warnings) {}

  // `maps[i]` is learner i's map at `path`, or null when it has none.
  absl::Status Maps(const std::string& path, const std::vector<Struct*>& maps,
                    Struct* out) {
    std::set<std::string> keys;
    for (const Struct* map : maps) {
      if (map == nullptr) continue;
      for (const auto& field : map->fields()) keys.insert(field.first);
    }
    for (const std::string& key : keys) {
      std::vector<Value*> values(maps.size(), nullptr);
      for (size_t i = 0; i < maps.size(); ++i) {
        if (maps[i] == nullptr) continue;
        auto it = maps[i]->mutable_fields()->find(key);
        if (it != maps[i]->mutable_fields()->end()) values[i] = &it->second;
      }
      const std::string key_path =
          path.empty() ? key : absl::StrCat(path, ".", key);
      Value merged;
      // Under a per-sample key every list is per-sample, whatever its name:
      // a homogeneous key's name there must not skip the alignment check.
      if (homogeneous_keys_.count(key) > 0 && !IsPerSample(key_path)) {
        Homogeneous(key_path, values, &merged);
      } else if (absl::Status status = Values(key_path, values, &merged);
                 !status.ok()) {
        return status;
      }
      (*out->mutable_fields())[key] = std::move(merged);
    }
    return absl::OkStatus();
  }

 private:
  void Homogeneous(const std::string& path, const std::vector<Value*>& values,
                   Value* out) {
    size_t first = values.size();
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] == nullptr) continue;
      if (first == values.size()) {
        first = i;
        continue;
      }
      if (!google::protobuf::util::MessageDifferencer::Equals(*values[i],
                                                              *values[first])) {
        warnings_->push_back(absl::StrCat(
            "learners disagree on '", path, "': ", ids_[i], " sent ",
            Brief(*values[i]), ", ", ids_[first], " sent ",
            Brief(*values[first]), "; kept ", ids_[first], "'s"));
      }
    }
    *out = *values[first];
  }

  absl::Status Values(const std::string& path,
                      const std::vector<Value*>& values, Value* out) {
    // The shape of the merged value: the first map or list decides; scalars and
    // nulls alone make a per-learner list.
    Shape shape = Shape::kScalar;
    size_t decider = values.size();
    for (size_t i = 0; i < values.size(); ++i) {
      const Shape s = ShapeOf(values[i]);
      if ((s == Shape::kMap || s == Shape::kList) && decider == values.size()) {
        shape = s;
        decider = i;
      }
    }
    if (shape == Shape::kList && !IsPerSample(path) && Mixes(values)) {
      return PerLearner(path, values, out);
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const Shape s = ShapeOf(values[i]);
      const bool fits = s == shape || s == Shape::kAbsent || s == Shape::kNull;
      if (!fits) {
        return absl::InternalError(
            absl::StrCat("cannot merge learn info key '", path,
                         "': ", ids_[decider], " sent ", ShapeName(shape),
                         " but ", ids_[i], " sent ", ShapeName(s)));
      }
    }
    if (shape == Shape::kScalar && IsPerSample(path)) {
      // Scalars and nulls alone at a per-sample key: one entry per learner
      // would not line up with the batch. Only learners without samples may
      // send no list; if all are such, the list is empty.
      if (absl::Status aligned = CheckPerSample(path, values); !aligned.ok()) {
        return aligned;
      }
      out->mutable_list_value();
      return absl::OkStatus();
    }
    if (shape == Shape::kScalar) {
      auto* list = out->mutable_list_value();
      for (size_t i = 0; i < values.size(); ++i) {
        AddForEachLearner(i, values[i], list);
      }
      return absl::OkStatus();
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const Shape s = ShapeOf(values[i]);
      if (s != shape) {
        warnings_->push_back(absl::StrCat(
            ids_[i], (s == Shape::kNull ? " sent null for '" : " sent no '"),
            path, "' where ", ids_[decider], " sent ", ShapeName(shape),
            shape == Shape::kList ? "; the merged list has none of its entries"
                                  : ""));
      }
    }
    if (shape == Shape::kList && IsPerSample(path)) {
      if (absl::Status aligned = CheckPerSample(path, values); !aligned.ok()) {
        return aligned;
      }
    }
    if (shape == Shape::kList) {
      auto* list = out->mutable_list_value();
      for (size_t i = 0; i < values.size(); ++i) {
        if (ShapeOf(values[i]) != Shape::kList) continue;
        for (Value& entry :
             *values[i]->mutable_list_value()->mutable_values()) {
          *list->add_values() = std::move(entry);
        }
      }
      return absl::OkStatus();
    }
    std::vector<Struct*> maps(values.size(), nullptr);
    for (size_t i = 0; i < values.size(); ++i) {
      if (ShapeOf(values[i]) == Shape::kMap) {
        maps[i] = values[i]->mutable_struct_value();
      }
    }
    return Maps(path, maps, out->mutable_struct_value());
  }

  bool IsPerSample(const std::string& path) const {
    return IsPerSampleKey(per_sample_keys_, path);
  }

  // The learners learner i stands for: 0 for a plain learner.
  size_t StandsFor(size_t i) const {
    return i < learners_.size() ? learners_[i] : 0;
  }

  // Lists and scalars at one key, and no map: a tree's per-learner values.
  static bool Mixes(const std::vector<Value*>& values) {
    bool list = false;
    bool scalar = false;
    for (const Value* value : values) {
      const Shape s = ShapeOf(value);
      if (s == Shape::kMap) return false;
      list = list || s == Shape::kList;
      scalar = scalar || s == Shape::kScalar;
    }
    return list && scalar;
  }

  // One entry per learner in plan order (the rule in info_merger.h), or an
  // error naming the learner whose value does not stand for its learners.
  absl::Status PerLearner(const std::string& path,
                          const std::vector<Value*>& values, Value* out) {
    size_t scalar = 0;
    while (ShapeOf(values[scalar]) != Shape::kScalar) ++scalar;
    for (size_t i = 0; i < values.size(); ++i) {
      const Shape s = ShapeOf(values[i]);
      const size_t n = StandsFor(i);
      if (s == Shape::kList && n == 0) {
        return absl::InternalError(
            absl::StrCat("cannot merge learn info key '", path, "': ", ids_[i],
                         " sent a list but ", ids_[scalar], " sent a scalar"));
      }
      if (s == Shape::kList &&
          static_cast<size_t>(values[i]->list_value().values_size()) != n) {
        return absl::InternalError(absl::StrCat(
            "cannot merge learn info key '", path, "': ", ids_[i],
            " sent a list of ", values[i]->list_value().values_size(),
            " entries but stands for ", n,
            " learners (DataDemand.learners), and ", ids_[scalar],
            " sent a scalar"));
      }
    }
    auto* list = out->mutable_list_value();
    for (size_t i = 0; i < values.size(); ++i) {
      const Shape s = ShapeOf(values[i]);
      if (s == Shape::kList) {
        for (Value& entry :
             *values[i]->mutable_list_value()->mutable_values()) {
          *list->add_values() = std::move(entry);
        }
      } else {
        AddForEachLearner(i, values[i], list);
      }
    }
    return absl::OkStatus();
  }

  // Learner i's scalar or null (none: a null) once for each learner it
  // stands for (a child aggregator sends a scalar only for a key that its
  // merge.homogeneous_keys hold: its learners' shared value).
  void AddForEachLearner(size_t i, Value* value,
                         google::protobuf::ListValue* list) {
    for (size_t n = std::max<size_t>(StandsFor(i), 1); n > 0; --n) {
      Value* entry = list->add_values();
      if (value == nullptr) {
        entry->set_null_value(google::protobuf::NULL_VALUE);
      } else if (n > 1) {
        *entry = *value;
      } else {
        *entry = std::move(*value);
      }
    }
  }

  // Every learner sent a list with one entry per sample it was sent.
  absl::Status CheckPerSample(const std::string& path,
                              const std::vector<Value*>& values) const {
    for (size_t i = 0; i < values.size(); ++i) {
      const size_t expected = counts_[i];
      if (ShapeOf(values[i]) != Shape::kList) {
        if (expected == 0) continue;  // no samples, nothing to say
        return absl::InternalError(absl::StrCat(
            "learn info key '", path,
            "' is a per-sample list "
            "(merge.per_sample_keys) but ",
            ids_[i], " sent ",
            values[i] == nullptr ? "none" : ShapeName(ShapeOf(values[i])),
            " for its ", expected, " samples"));
      }
      const size_t got = values[i]->list_value().values_size();
      if (got != expected) {
        return absl::InternalError(absl::StrCat(
            "learn info key '", path,
            "' is a per-sample list "
            "(merge.per_sample_keys) but ",
            ids_[i], " sent ", got, " entries for its ", expected, " samples"));
      }
    }
    return absl::OkStatus();
  }

  const std::set<std::string>& homogeneous_keys_;
  const std::vector<std::string>& per_sample_keys_;
  const std::vector<std::string>& ids_;
  const std::vector<size_t>& counts_;
  const std::vector<size_t>& learners_;  // empty: all plain
  std::vector<std::string>* warnings_;
};

}  // namespace

bool IsPerSampleKey(const std::vector<std::string>& per_sample_keys,
                    const std::string& path) {
  for (const std::string& key : per_sample_keys) {
    if (path == key ||
        (path.size() > key.size() && path.compare(0, key.size(), key) == 0 &&
         path[key.size()] == '.')) {
      return true;
    }
  }
  return false;
}

InfoMerger::InfoMerger(const MergeConfig& config)
    : homogeneous_keys_(config.homogeneous_keys.begin(),
                        config.homogeneous_keys.end()),
      per_sample_keys_(config.per_sample_keys) {}

absl::StatusOr<MergedInfo> InfoMerger::Merge(
    const std::vector<google::protobuf::Struct*>& infos,
    const std::vector<std::string>& learner_ids,
    const std::vector<size_t>& sample_counts,
    const std::vector<size_t>& learners) const {
  if (infos.size() != learner_ids.size() ||
      infos.size() != sample_counts.size() ||
      (!learners.empty() && infos.size() != learners.size())) {
    return absl::InternalError(absl::StrCat(
        "InfoMerger: ", infos.size(), " infos for ", learner_ids.size(),
        " learners, ", sample_counts.size(), " sample counts and ",
        learners.size(), " learner counts"));
  }
  MergedInfo merged;
  MergePass merge(homogeneous_keys_, per_sample_keys_, learner_ids,
                  sample_counts, learners, &merged.warnings);
  if (absl::Status status = merge.Maps("", infos, &merged.info); !status.ok()) {
    return status;
  }
  return merged;
}

}  // namespace aggregator
