// The checks across sections of aggregator.yaml, run once every section is
// read: worker ports and replica ids, address clashes, straggler shrink
// without on_learner_failure: shrink, min_learners against the learners
// listed, plaintext listeners other hosts can reach. Each is reported where
// the offending value was written.
#ifndef LIB_CONFIG_CONFIG_CHECKS_H_
#define LIB_CONFIG_CONFIG_CHECKS_H_

#include <optional>
#include <vector>

#include "lib/config/config.h"
#include "lib/config/learners_reader.h"
#include "lib/config/workers_reader.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// Where the values the checks need were written (unset: the default, or not
// valid and reported already).
struct WrittenFields {
  std::optional<Field> listen;
  std::optional<Field> metrics_listen;
  std::optional<Field> admin_listen;
  std::optional<Field> min_learners;
  // Where straggler.action: shrink was written.
  std::optional<Field> straggler_shrink;
  // A tls section was written, valid or not (not plaintext asked for).
  bool tls = false;
  LearnerFields learners;
  std::vector<WorkerFields> workers;  // one per entry of config.workers
};

void CheckAcrossSections(YamlReader* reader, const WrittenFields& written,
                         const AggregatorConfig& config);

}  // namespace aggregator

#endif  // LIB_CONFIG_CONFIG_CHECKS_H_
