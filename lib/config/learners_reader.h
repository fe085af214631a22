// The `learners:` section: a list of {id, address, tls}.
#ifndef LIB_CONFIG_LEARNERS_READER_H_
#define LIB_CONFIG_LEARNERS_READER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/config/config.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// Where the learners' fields were written, for the cross-field checks.
struct LearnerFields {
  // One per entry of config->learners: where a valid address was written.
  std::vector<std::optional<Field>> addresses;
  // Where each id was first written.
  std::map<std::string, YAML::Mark> ids;
};

// Every item is kept in `learners`, even an invalid one, so min_learners is
// checked against the list. `read_files`: see ReadClientTls.
void ReadLearners(YamlReader* reader, const Field& field, bool read_files,
                  std::vector<LearnerEndpoint>* learners,
                  LearnerFields* fields);

}  // namespace aggregator

#endif  // LIB_CONFIG_LEARNERS_READER_H_
