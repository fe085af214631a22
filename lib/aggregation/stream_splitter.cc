#include "lib/aggregation/stream_splitter.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aggregator {

StreamSplitter::StreamSplitter(std::vector<size_t> counts)
    : counts_(std::move(counts)) {
  for (size_t count : counts_) total_ += count;
}

size_t StreamSplitter::complete() const {
  size_t learner = learner_;
  size_t taken = taken_;
  // Past learner_ while its share (and any empty ones after it) is whole.
  while (learner < counts_.size() && taken == counts_[learner]) {
    ++learner;
    taken = 0;
  }
  return learner;
}

absl::StatusOr<std::vector<StreamSplitter::Piece>> StreamSplitter::Add(
    const RawBatch& message) {
  if (message.exceeds() || message.sample_count() > remaining()) {
    return absl::InternalError(absl::StrCat(
        "StreamSplitter: a message of ",
        message.exceeds() ? "too many" : absl::StrCat(message.sample_count()),
        " samples with ", remaining(), " left"));
  }
  // This message's samples per learner, from learner_ on.
  const size_t first = complete();
  std::vector<size_t> counts;
  size_t left = message.sample_count();
  size_t learner = first;
  size_t taken = first == learner_ ? taken_ : 0;
  while (left > 0) {
    const size_t take = std::min(left, counts_[learner] - taken);
    counts.push_back(take);
    left -= take;
    taken += take;
    if (taken == counts_[learner] && left > 0) {
      ++learner;
      taken = 0;
    }
  }
  std::vector<Piece> pieces;
  if (counts.empty()) return pieces;
  auto parts = message.Cut(counts, std::vector<std::string>(counts.size()));
  if (!parts.ok()) return parts.status();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;  // an empty share passed over
    Piece piece;
    piece.learner = first + i;
    piece.samples = std::move((*parts)[i].request);
    piece.count = counts[i];
    piece.bytes = (*parts)[i].sample_bytes;
    pieces.push_back(std::move(piece));
  }
  learner_ = learner;
  taken_ = taken;
  received_ += message.sample_count();
  return pieces;
}

}  // namespace aggregator
