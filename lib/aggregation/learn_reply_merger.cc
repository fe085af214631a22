#include "lib/aggregation/learn_reply_merger.h"

#include <google/protobuf/io/coded_stream.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/learner.pb.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

// A learner whose reply says otherwise than the first's.
void WarnIfDifferent(const char* field, const std::string& first,
                     const std::string& first_value, const std::string& other,
                     const std::string& other_value,
                     std::vector<std::string>* warnings) {
  if (first_value == other_value) return;
  warnings->push_back(absl::StrCat(
      "learners disagree on ", field, ": ", first, " sent '", first_value,
      "', ", other, " sent '", other_value, "'; kept ", first, "'s"));
}

// Parses a learner's Learn reply. A reply that does not parse is either
// nested deeper than protobuf allows (a Struct of Structs) or not a LearnReply
// at all; the error says which.
absl::Status ParseLearnReply(absl::string_view bytes, pb::LearnReply* reply) {
  if (reply->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::OkStatus();
  }
  const int limit =
      google::protobuf::io::CodedInputStream::GetDefaultRecursionLimit();
  google::protobuf::io::CodedInputStream input(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  // Deeper still, but bounded: parsing recurses on the stack.
  input.SetRecursionLimit(4 * limit);
  pb::LearnReply deeper;
  if (deeper.ParseFromCodedStream(&input)) {
    return absl::InternalError(
        absl::StrCat("a LearnReply nested deeper than protobuf's limit of ",
                     limit, " levels (a Struct of Structs in its info)"));
  }
  return absl::InternalError(
      absl::StrCat("a reply that cannot be read as a LearnReply (or that is "
                   "nested more than ",
                   4 * limit, " levels deep)"));
}

}  // namespace

LearnReplyMerger::LearnReplyMerger(const MergeConfig& config)
    : merger_(config), raw_merger_(config) {}

LearnReplyMerger::Result LearnReplyMerger::Merge(
    std::vector<std::string> replies,
    const std::vector<std::string>& learner_ids,
    const std::vector<size_t>& sample_counts,
    const std::vector<size_t>& learners, size_t max_bytes) const {
  Result result;
  {
    std::vector<absl::string_view> bytes(replies.begin(), replies.end());
    if (auto merged = raw_merger_.Merge(bytes, sample_counts, learners);
        merged.has_value()) {
      for (size_t i = 1; i < replies.size(); ++i) {
        WarnIfDifferent("task_id", learner_ids[0], merged->task_ids[0],
                        learner_ids[i], merged->task_ids[i], &result.warnings);
        WarnIfDifferent("buffer_id", learner_ids[0], merged->buffer_ids[0],
                        learner_ids[i], merged->buffer_ids[i],
                        &result.warnings);
      }
      result.raw = true;
      result.size = merged->reply.size();
      if (result.size <= max_bytes) result.reply = std::move(merged->reply);
      return result;
    }
  }

  std::vector<pb::LearnReply> parsed(replies.size());
  std::vector<google::protobuf::Struct*> infos;
  for (size_t i = 0; i < replies.size(); ++i) {
    absl::Status read = ParseLearnReply(replies[i], &parsed[i]);
    // Released as soon as parsed: one copy of each reply at a time.
    std::string().swap(replies[i]);
    if (!read.ok()) {
      result.status = std::move(read);
      result.unreadable = i;
      return result;
    }
    infos.push_back(parsed[i].mutable_info());
    WarnIfDifferent("task_id", learner_ids[0], parsed[0].task_id(),
                    learner_ids[i], parsed[i].task_id(), &result.warnings);
    WarnIfDifferent("buffer_id", learner_ids[0], parsed[0].buffer_id(),
                    learner_ids[i], parsed[i].buffer_id(), &result.warnings);
  }
  auto merged = merger_.Merge(infos, learner_ids, sample_counts, learners);
  if (!merged.ok()) {
    result.status = merged.status();
    return result;
  }
  result.warnings.insert(result.warnings.end(), merged->warnings.begin(),
                         merged->warnings.end());
  pb::LearnReply out;
  if (!parsed.empty()) {
    out.set_task_id(parsed[0].task_id());
    out.set_buffer_id(parsed[0].buffer_id());
  }
  *out.mutable_info() = std::move(merged->info);
  // Measured first: a reply too large is not worth serializing (and past
  // 2 GiB protobuf cannot).
  result.size = out.ByteSizeLong();
  if (result.size <= max_bytes) result.reply = out.SerializeAsString();
  return result;
}

}  // namespace aggregator
