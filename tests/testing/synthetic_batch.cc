#include "tests/testing/synthetic_batch.h"

#include <algorithm>

namespace aggregator {

aggregator::v1::LearnRequest SyntheticBatch(int64_t count, int64_t bytes,
                                            const std::string& id_prefix) {
  aggregator::v1::LearnRequest request;
  request.mutable_samples()->Reserve(static_cast<int>(count));
  for (int64_t i = 0; i < count; ++i) {
    auto* sample = request.add_samples();
    std::string* data = sample->mutable_data();
    data->assign(static_cast<size_t>(bytes), static_cast<char>('a' + i % 26));
    const std::string index = std::to_string(i);
    std::copy_n(index.begin(), std::min(index.size(), data->size()),
                data->begin());
    (*sample->mutable_meta()->mutable_fields())["replay_unique_id"]
        .set_string_value(id_prefix + index);
  }
  return request;
}

}  // namespace aggregator
