// The `learner_sources:` section: where learners are discovered (DNS names,
// the orchestrator's API).
#ifndef LIB_CONFIG_LEARNER_SOURCES_READER_H_
#define LIB_CONFIG_LEARNER_SOURCES_READER_H_

#include <vector>

#include "lib/config/config.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// A list of maps of one key, {dns: {...}} or {orchestrator: {...}}; no two of
// the same source. The orchestrator's url, namespace and name default to
// $KUBERNETES_SERVER_URL, $KUBERNETES_POD_NAMESPACE and $KUBERNETES_POD_NAME.
void ReadLearnerSources(YamlReader* reader, const Field& field,
                        std::vector<LearnerSourceConfig>* sources);

}  // namespace aggregator

#endif  // LIB_CONFIG_LEARNER_SOURCES_READER_H_
