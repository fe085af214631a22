// The `workers:` section: a list of processes the daemon runs and restarts.
#ifndef LIB_CONFIG_WORKERS_READER_H_
#define LIB_CONFIG_WORKERS_READER_H_

#include <optional>
#include <vector>

#include "lib/config/config.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// Replaced in a worker's command, env and cwd by its replica's port.
constexpr char kPortPlaceholder[] = "{port}";

// What the checks across workers need: where each worker's fields were.
struct WorkerFields {
  std::optional<Field> name;       // set when the name is valid
  std::optional<Field> port_base;  // set when port_base is valid
  bool port_base_written = false;  // valid or not (reported once)
  std::optional<Field> learner;
  std::optional<Field> port_use;  // the first value using "{port}"
};

// `fields` gets one entry per entry of `workers`, in the same order. Unique
// names are checked here; ports and learner ids by CheckWorkers.
void ReadWorkers(YamlReader* reader, const Field& field,
                 std::vector<WorkerSpec>* workers,
                 std::vector<WorkerFields>* fields);

}  // namespace aggregator

#endif  // LIB_CONFIG_WORKERS_READER_H_
