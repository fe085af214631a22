// RawInfoMerger: InfoMerger's merge done on the learners' serialized
// LearnReply messages, for the common case of a clean merge. It reads only
// the keys and shapes of the infos' maps, takes list entries and scalars as
// the bytes they arrived in, and writes the merged LearnReply itself: no
// Struct is parsed, merged, serialized and destroyed, which was half of what
// the aggregator spent on a small Learn (tools/bench/BENCH.md).
//
// It merges only what InfoMerger would merge without a word: no warning, no
// error, nothing it does not read as plain protobuf (the fields it expects,
// each once and of its wire type, within protobuf's own limits on tags and
// lengths (lib/aggregation/wire_reader.h), strings that pass protobuf's UTF-8
// check, no unknown fields, no key twice in a map it merges, at most
// kMaxDepth deep). So it merges only replies that protobuf parses. For
// anything else Merge answers nullopt, and the caller merges with InfoMerger,
// whose parse, warnings and errors then say what is wrong. Where it merges,
// the result parses to what InfoMerger's would be
// (tests/aggregation/raw_info_merger_test.cc and the info_merger fuzzer, which
// also feeds it non-canonical and broken bytes, check both).
//
// Thread-safety: immutable after construction; Merge may be called
// concurrently.
#ifndef LIB_AGGREGATION_RAW_INFO_MERGER_H_
#define LIB_AGGREGATION_RAW_INFO_MERGER_H_

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "lib/config/config.h"

namespace aggregator {

class RawInfoMerger {
 public:
  // Maps and lists deep, well within protobuf's parse limit (100 messages:
  // each map level is three, each list level two).
  static constexpr int kMaxDepth = 24;

  explicit RawInfoMerger(const MergeConfig& config);

  struct Merged {
    // A serialized LearnReply: the merged info, and the first reply's
    // task_id and buffer_id.
    std::string reply;
    // Each reply's task_id and buffer_id, for the caller's disagreement
    // warnings.
    std::vector<std::string> task_ids;
    std::vector<std::string> buffer_ids;
  };

  // `replies[i]` is the serialized LearnReply of the learner that was sent
  // `sample_counts[i]` samples and stands for `learners[i]` learners (as in
  // InfoMerger::Merge; empty: all plain) (same sizes). nullopt: not a clean
  // merge of plain replies; merge them with InfoMerger.
  std::optional<Merged> Merge(const std::vector<absl::string_view>& replies,
                              const std::vector<size_t>& sample_counts,
                              const std::vector<size_t>& learners = {}) const;

 private:
  std::set<std::string> homogeneous_keys_;
  std::vector<std::string> per_sample_keys_;
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_RAW_INFO_MERGER_H_
