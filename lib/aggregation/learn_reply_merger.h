// LearnReplyMerger: the learners' Learn replies merged into one LearnReply.
// It chooses how: on the replies' bytes when RawInfoMerger can (a clean
// merge, the common case, which parses no Struct), else each reply parsed and
// the infos merged by InfoMerger, whose warnings and errors then say what is
// wrong. Either way the first reply's task_id and buffer_id are kept, and a
// learner that sent others is reported in the warnings.
//
// Thread-safety: immutable after construction; Merge may be called
// concurrently.
#ifndef LIB_AGGREGATION_LEARN_REPLY_MERGER_H_
#define LIB_AGGREGATION_LEARN_REPLY_MERGER_H_

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/aggregation/info_merger.h"
#include "lib/aggregation/raw_info_merger.h"
#include "lib/config/config.h"

namespace aggregator {

class LearnReplyMerger {
 public:
  explicit LearnReplyMerger(const MergeConfig& config);

  struct Result {
    // OK: `reply` holds the merged LearnReply, serialized (unless over
    // max_bytes: see `size`). Otherwise
    // INTERNAL: a reply that cannot be read (`unreadable` says whose), or
    // infos that cannot be merged (InfoMerger's error).
    absl::Status status;
    // The index of the learner whose reply does not parse as a LearnReply.
    std::optional<size_t> unreadable;
    std::string reply;
    // The merged LearnReply's size in bytes. Over max_bytes it is not
    // serialized: `reply` stays empty, and the caller says it is too large.
    size_t size = 0;
    // Merged on the bytes (RawInfoMerger); false: parsed, by InfoMerger.
    bool raw = false;
    // Worth logging, one sentence each, in the order found: disagreements on
    // task_id and buffer_id, then InfoMerger's warnings. Kept on failure too.
    std::vector<std::string> warnings;
  };

  // `replies[i]` is the serialized LearnReply of the learner `learner_ids[i]`,
  // which was sent `sample_counts[i]` samples and stands for `learners[i]`
  // learners (as in InfoMerger::Merge; empty: all plain) (same sizes). Each
  // reply is released once read, so the replies are held about once.
  Result Merge(std::vector<std::string> replies,
               const std::vector<std::string>& learner_ids,
               const std::vector<size_t>& sample_counts,
               const std::vector<size_t>& learners = {},
               size_t max_bytes = std::numeric_limits<size_t>::max()) const;

 private:
  InfoMerger merger_;
  RawInfoMerger raw_merger_;
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_LEARN_REPLY_MERGER_H_
