// Merges the learn infos of several learners into one, as DI-engine's
// merge_info but total: it never crashes on a key that only some learners send
// and never drops a learner's data silently.
//
// Rules, applied key by key at every level of nesting (learners in plan order):
// - a homogeneous key (configurable) takes the first learner's value; a learner
// that
//   disagrees is reported in `warnings`;
// - maps merge recursively over the union of their keys;
// - lists concatenate in learner order; a list under a per-sample key
//   (merge.per_sample_keys) must hold exactly one entry per sample each
//   learner was sent, from every learner, so the merged list lines up with the
//   batch (otherwise the merge fails naming key and learner); a scalar or null
//   where a per-sample list belongs fails the same way (only a learner that
//   was sent no samples may send no list);
// - scalars (numbers, strings, bools) become a list with one entry per
//   learner, with null for a learner that did not send the key;
// - a null where others send a map or list counts as absent (reported in
//   warnings);
// - in a tree, a child aggregator sends as a list what its learners sent as
//   scalars, one entry per learner. So where a key holds scalars (or nulls),
//   alone or mixed with lists, each learner's value stands for each of the
//   learners it stands for (`learners[i]`, its DataDemand.learners; at least
//   one): a list of exactly that many entries gives them in order, a scalar
//   or null (none: null) counts once for each (a child sends a scalar only
//   for a key its merge.homogeneous_keys hold: its learners' shared value).
//   The merged list has one entry per learner in plan order, as if the tree
//   were one aggregator. A list from a plain learner (0), or of another
//   length, beside a scalar is an error as below. Not under a per-sample key,
//   whose lists line up with samples instead;
// - any other mix (a list from one learner, a number from another) is an error
// naming
//   the key path and both learners.
//
// Thread-safety: InfoMerger is immutable after construction; Merge may be
// called concurrently.
#ifndef LIB_AGGREGATION_INFO_MERGER_H_
#define LIB_AGGREGATION_INFO_MERGER_H_

#include <google/protobuf/struct.pb.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"

namespace aggregator {

struct MergedInfo {
  google::protobuf::Struct info;
  // Disagreements and absences worth logging, one sentence each.
  std::vector<std::string> warnings;
};

// Whether the dotted key path `path` ("priority_info.priority") is one of
// `per_sample_keys` or lies under one.
bool IsPerSampleKey(const std::vector<std::string>& per_sample_keys,
                    const std::string& path);

class InfoMerger {
 public:
  explicit InfoMerger(const MergeConfig& config);

  // `infos[i]` came from the learner named `learner_ids[i]`, which was sent
  // `sample_counts[i]` samples and stands for `learners[i]` learners (its
  // DataDemand.learners: 0 for a plain learner; empty: all plain) (same
  // sizes). Values are moved out of `infos` (lists can hold one entry per
  // sample). An empty input merges to an empty info. Fails with INTERNAL
  // naming key and learners when shapes cannot be merged or a per-sample list
  // does not line up.
  absl::StatusOr<MergedInfo> Merge(
      const std::vector<google::protobuf::Struct*>& infos,
      const std::vector<std::string>& learner_ids,
      const std::vector<size_t>& sample_counts,
      const std::vector<size_t>& learners = {}) const;

 private:
  std::set<std::string> homogeneous_keys_;
  std::vector<std::string> per_sample_keys_;
};

}  // namespace aggregator

#endif  // LIB_AGGREGATION_INFO_MERGER_H_
