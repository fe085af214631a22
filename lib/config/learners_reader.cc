#include "lib/config/learners_reader.h"

#include "absl/strings/str_cat.h"
#include "lib/config/tls_reader.h"
#include "lib/config/typed_readers.h"

namespace aggregator {

void ReadLearners(YamlReader* reader, const Field& field, bool read_files,
                  std::vector<LearnerEndpoint>* learners,
                  LearnerFields* fields) {
  learners->clear();
  fields->ids.clear();
  fields->addresses.clear();
  // Each id and where it first appeared.
  std::map<std::string, YAML::Mark> first_use;
  reader->ReadList(field, [&](const Field& item) {
    // Counted even when invalid, so min_learners is checked against the list.
    LearnerEndpoint& learner = learners->emplace_back();
    std::optional<Field>& address_field = fields->addresses.emplace_back();
    if (!item.node.IsMap()) {
      reader->Error(
          item, absl::StrCat("expected a map with \"id\" and \"address\", got ",
                             Describe(item.node)));
      return;
    }
    std::optional<Field> id;
    std::optional<Field> address;
    reader->ReadMap(item, {{"id", [&](const Field& f) { id = f; }},
                           {"address", [&](const Field& f) { address = f; }},
                           {"tls", [&](const Field& f) {
                              ReadClientTls(reader, f, read_files,
                                            &learner.tls);
                            }}});
    if (!id) {
      reader->Error(item, "missing \"id\" (a unique, non-empty name)");
    } else if (ReadString(reader, *id, &learner.id)) {
      if (learner.id.empty()) {
        reader->Error(*id, "must not be empty");
      } else {
        auto [it, inserted] = first_use.emplace(learner.id, id->mark);
        if (inserted) fields->ids.emplace(learner.id, id->mark);
        if (!inserted) {
          reader->Error(*id,
                        absl::StrCat("duplicate learner id ", Quote(learner.id),
                                     ", first at ", Position(it->second)));
        }
      }
    }
    if (!address) {
      reader->Error(item,
                    "missing \"address\" (\"host:port\", \"[v6]:port\" or "
                    "\"unix:/path\")");
    } else if (ReadAddress(reader, *address, /*allow_port_zero=*/false,
                           &learner.address)) {
      address_field = address;
    }
  });
}

}  // namespace aggregator
