// A backoff section: connect.backoff and workers[].backoff.
#ifndef LIB_CONFIG_BACKOFF_READER_H_
#define LIB_CONFIG_BACKOFF_READER_H_

#include "lib/base/backoff.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// {initial, multiplier, jitter, max}; only connect.backoff has `jitter`. max
// must not be below initial.
void ReadBackoff(YamlReader* reader, const Field& field, bool with_jitter,
                 BackoffOptions* backoff);

}  // namespace aggregator

#endif  // LIB_CONFIG_BACKOFF_READER_H_
