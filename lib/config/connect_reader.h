// The `connect:` section: how the daemon reaches its learners.
#ifndef LIB_CONFIG_CONNECT_READER_H_
#define LIB_CONFIG_CONNECT_READER_H_

#include "lib/config/config.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// {timeout, attempt_timeout, backoff, keepalive: {time, timeout}}.
void ReadConnect(YamlReader* reader, const Field& field,
                 ConnectConfig* connect);

}  // namespace aggregator

#endif  // LIB_CONFIG_CONNECT_READER_H_
