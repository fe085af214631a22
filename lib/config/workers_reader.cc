#include "lib/config/workers_reader.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/config/backoff_reader.h"
#include "lib/config/typed_readers.h"

namespace aggregator {
namespace {

constexpr const char* kRestartPolicies[] = {"always", "on-failure", "never"};
// Every replica may need a port of its own.
constexpr int kMaxReplicas = kMaxPort;

bool IsWorkerNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_';
}

// A POSIX shell can set it: letters, digits and '_', not starting with a digit.
bool IsEnvName(absl::string_view name) {
  if (name.empty() ||
      absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Remembers the first value that uses "{port}", for CheckWorkers.
void NotePort(const Field& field, absl::string_view text,
              WorkerFields* fields) {
  if (!fields->port_use && absl::StrContains(text, kPortPlaceholder)) {
    fields->port_use = field;
  }
}

class WorkerReader {
 public:
  WorkerReader(YamlReader* reader, WorkerSpec* spec, WorkerFields* fields)
      : reader_(reader), spec_(spec), fields_(fields) {}

  // A worker's keys; `name` and `command` are only found here, and read by
  // ReadName and ReadCommand.
  void ReadKeys(const Field& item, std::optional<Field>* name,
                std::optional<Field>* command) {
    YamlReader* r = reader_;
    WorkerSpec* spec = spec_;
    WorkerFields* fields = fields_;
    r->ReadMap(
        item,
        {
            {"name", [&](const Field& f) { *name = f; }},
            {"command", [&](const Field& f) { *command = f; }},
            {"replicas",
             [&](const Field& f) {
               ReadInt(r, f, 0, kMaxReplicas, &spec->replicas);
             }},
            {"env", [&](const Field& f) { ReadEnv(f); }},
            {"cwd",
             [&](const Field& f) {
               if (!ReadString(r, f, &spec->cwd)) return;
               if (spec->cwd.empty()) {
                 r->Error(f,
                          "must not be empty; omit it to keep the daemon's "
                          "working directory");
               }
               NotePort(f, spec->cwd, fields);
             }},
            {"port_base",
             [&](const Field& f) {
               fields->port_base_written = true;
               if (ReadInt(r, f, 1, kMaxPort, &spec->port_base)) {
                 fields->port_base = f;
               }
             }},
            {"restart",
             [&](const Field& f) {
               std::string policy;
               ReadOneOf(r, f, kRestartPolicies, &policy);
               if (policy == "always") spec->restart = RestartPolicy::kAlways;
               if (policy == "never") spec->restart = RestartPolicy::kNever;
             }},
            {"backoff",
             [&](const Field& f) {
               ReadBackoff(r, f, /*with_jitter=*/false, &spec->backoff);
             }},
            {"max_restarts",
             [&](const Field& f) {
               ReadInt(r, f, 0, INT_MAX, &spec->max_restarts);
             }},
            {"restart_window",
             [&](const Field& f) {
               ReadDuration(r, f, &spec->restart_window);
             }},
            {"min_uptime",
             [&](const Field& f) { ReadDuration(r, f, &spec->min_uptime); }},
            {"stop_timeout",
             [&](const Field& f) { ReadDuration(r, f, &spec->stop_timeout); }},
            {"learner",
             [&](const Field& f) {
               if (ReadBool(r, f, &spec->learner)) fields->learner = f;
             }},
            {"channel",
             [&](const Field& f) { ReadBool(r, f, &spec->channel); }},
        });
  }

  void ReadName(const Field& item, const std::optional<Field>& name,
                std::map<std::string, YAML::Mark>* first_use) {
    if (!name) {
      reader_->Error(item,
                     "missing \"name\" (a unique name of letters, digits, "
                     "'_', '.' and '-')");
      return;
    }
    if (!ReadString(reader_, *name, &spec_->name)) return;
    const std::string& text = spec_->name;
    const auto bad =
        std::find_if_not(text.begin(), text.end(), IsWorkerNameChar);
    if (text.empty()) {
      reader_->Error(*name, "must not be empty");
    } else if (bad != text.end()) {
      reader_->Error(*name,
                     absl::StrCat(Quote(text), " contains ", Quote({&*bad, 1}),
                                  "; a worker name may only contain "
                                  "letters, digits, '_', '.' and '-'"));
    } else if (auto [it, inserted] = first_use->emplace(text, name->mark);
               !inserted) {
      reader_->Error(*name, absl::StrCat("duplicate worker name ", Quote(text),
                                         ", first at ", Position(it->second)));
    } else {
      fields_->name = name;
    }
  }

  void ReadCommand(const Field& item, const std::optional<Field>& command) {
    if (!command) {
      reader_->Error(item,
                     "missing \"command\" (a list: the program, then its "
                     "arguments)");
    } else if (!command->node.IsSequence()) {
      reader_->Error(
          *command,
          absl::StrCat("expected a list: the program, then its arguments "
                       "(e.g. [python3, learner.py, --port, \"{port}\"]), "
                       "got ",
                       Describe(command->node)));
    } else if (command->node.size() == 0) {
      reader_->Error(*command,
                     "must not be empty: give the program, then its "
                     "arguments");
    } else {
      reader_->ReadList(*command, [&](const Field& arg) {
        std::string text;
        if (!ReadString(reader_, arg, &text)) return;
        if (spec_->command.empty() && text.empty()) {
          reader_->Error(arg, "the program must not be empty");
        }
        NotePort(arg, text, fields_);
        spec_->command.push_back(std::move(text));
      });
    }
  }

 private:
  // `env`: a map of variable names to string values.
  void ReadEnv(const Field& field) {
    spec_->env.clear();
    reader_->ForEachEntry(
        field, "a map of variable names to values", "variable names",
        [&](const std::string& name, const YAML::Mark& key,
            const Field& value) {
          if (!IsEnvName(name)) {
            reader_->Error(key, value.path,
                           "not a variable name: letters, digits and '_', not "
                           "starting with a digit");
            return;
          }
          std::string text;
          if (!ReadString(reader_, value, &text)) return;
          NotePort(value, text, fields_);
          spec_->env.emplace_back(name, std::move(text));
        });
  }

  YamlReader* reader_;
  WorkerSpec* spec_;
  WorkerFields* fields_;
};

}  // namespace

void ReadWorkers(YamlReader* reader, const Field& field,
                 std::vector<WorkerSpec>* workers,
                 std::vector<WorkerFields>* fields) {
  workers->clear();
  fields->clear();
  // Each name and where it first appeared.
  std::map<std::string, YAML::Mark> first_use;
  reader->ReadList(field, [&](const Field& item) {
    if (!item.node.IsMap()) {
      reader->Error(
          item, absl::StrCat("expected a map with \"name\" and \"command\", "
                             "got ",
                             Describe(item.node)));
      return;
    }
    WorkerReader worker(reader, &workers->emplace_back(),
                        &fields->emplace_back());
    std::optional<Field> name;
    std::optional<Field> command;
    worker.ReadKeys(item, &name, &command);
    worker.ReadName(item, name, &first_use);
    worker.ReadCommand(item, command);
  });
}

}  // namespace aggregator
