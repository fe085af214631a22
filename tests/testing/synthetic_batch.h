// Synthetic training batches for the tools and the tests: what a coordinator
// would send, without a replay buffer behind it.
#ifndef TESTS_TESTING_SYNTHETIC_BATCH_H_
#define TESTS_TESTING_SYNTHETIC_BATCH_H_

#include <cstdint>
#include <string>

#include "proto/learner.pb.h"

namespace aggregator {

// `count` samples of exactly `bytes` bytes each, every one different (its
// index leads the data, then a letter repeats), with meta.replay_unique_id
// "<id_prefix><index>".
aggregator::v1::LearnRequest SyntheticBatch(int64_t count, int64_t bytes,
                                            const std::string& id_prefix);

}  // namespace aggregator

#endif  // TESTS_TESTING_SYNTHETIC_BATCH_H_
