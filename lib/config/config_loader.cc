#include "lib/config/config_loader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "lib/base/mutex.h"
#include "lib/config/address_clashes.h"
#include "lib/tls/pem.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace aggregator {
namespace {

constexpr int64_t kMinMessageBytes = 1024;
constexpr int64_t kMaxMessageBytes = 2147483647;  // gRPC's limits are ints.
constexpr int64_t kMaxInflightBytes = int64_t{1} << 50;
// Beyond any sensible timeout; small enough that now() + it cannot overflow.
constexpr absl::Duration kMaxDuration = absl::Hours(24 * 365);
// A configuration is a few KiB; this keeps `--config /dev/zero` from hanging.
constexpr size_t kMaxFileBytes = size_t{16} << 20;

constexpr const char* kLogLevels[] = {"trace", "debug",    "info", "warn",
                                      "error", "critical", "off"};
constexpr const char* kRestartPolicies[] = {"always", "on-failure", "never"};
constexpr const char* kFailurePolicies[] = {"fail", "shrink"};
constexpr const char* kStragglerActions[] = {"none", "shrink"};
constexpr int kMaxPort = 65535;
// Every replica may need a port of its own.
constexpr int kMaxReplicas = kMaxPort;
constexpr char kPortPlaceholder[] = "{port}";
// gRPC servers' default policy refuses pings more often than every 5 minutes
// (without calls); ours and the documented settings accept one a second.
constexpr std::chrono::milliseconds kMinKeepaliveTime{1000};

// One value of the document: its node, where errors about it point, and its
// path ("learners[2].address"; empty for the whole document).
struct Field {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
};

// How a node is described in "expected X, got Y" messages.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", text, "\"");
}

std::string Position(const YAML::Mark& mark) {
  return absl::StrCat(mark.line + 1, ":", mark.column + 1);
}

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

// Whether `id` is "<name>-<index>" for an index below `replicas`.
bool IsReplicaId(absl::string_view id, absl::string_view name, int replicas) {
  if (!absl::ConsumePrefix(&id, name) || !absl::ConsumePrefix(&id, "-")) {
    return false;
  }
  if (id.empty() || id.size() > 5 || (id.size() > 1 && id[0] == '0') ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return false;
  }
  int index = 0;
  return absl::SimpleAtoi(id, &index) && index < replicas;
}

// `text` with its control characters escaped (\n, \t, \r, \xNN), so an
// error stays on one line and cannot drive a terminal, whatever the file held.
std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    }
  }
  return out;
}

// Reads one document into an AggregatorConfig, collecting every problem. Each
// section has a reader; a section's keys are listed once, in ReadMap's table.
// Where each YAML document of a stream starts and whether it holds anything:
// the events of yaml-cpp's parser, nothing built.
class DocumentWalker : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    YAML::Mark content;  // the first node's mark
    bool empty = true;
  };
  std::vector<Document> documents;

  void OnDocumentStart(const YAML::Mark& mark) override {
    documents.push_back({mark, mark, true});
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, /*empty=*/true);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, false);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark, bool empty) {
    Document& document = documents.back();
    if (document.empty && !empty) document.content = mark;
    document.empty = document.empty && empty;
  }
};

absl::Status ReadFile(const std::string& path, absl::string_view what,
                      std::string* out);

class Parser {
 public:
  // `read_files`: PEM files named in tls sections are read and checked (else
  // only their paths are kept).
  Parser(std::string source, bool read_files)
      : source_(std::move(source)), read_files_(read_files) {}

  absl::StatusOr<AggregatorConfig> Parse(const std::string& yaml) {
    AggregatorConfig config;
    config.source = source_;
    try {
      ParseInto(yaml, &config);
    } catch (const YAML::Exception& e) {
      Error(e.mark, "", absl::StrCat("cannot read the YAML: ", e.msg));
    } catch (const std::exception& e) {
      Error(YAML::Mark::null_mark(), "",
            absl::StrCat("cannot read the configuration: ", e.what()));
    } catch (...) {
      Error(YAML::Mark::null_mark(), "", "cannot read the configuration");
    }
    if (errors_.empty()) return config;
    // Document order reads best; cross-field checks are added last.
    std::stable_sort(errors_.begin(), errors_.end(),
                     [](const Problem& a, const Problem& b) {
                       return std::make_pair(a.line, a.column) <
                              std::make_pair(b.line, b.column);
                     });
    std::vector<std::string> lines;
    lines.reserve(errors_.size());
    for (const Problem& problem : errors_) lines.push_back(problem.text);
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }

 private:
  struct Problem {
    int line;
    int column;
    std::string text;
  };

  // A key of a map section and the reader of its value.
  struct Key {
    const char* name;
    std::function<void(const Field&)> read;
  };

  void ParseInto(const std::string& yaml, AggregatorConfig* config) {
    std::optional<Field> root = ReadDocument(yaml);
    if (!root) return;
    std::optional<Field> min_learners;
    ReadRoot(*root, config, &min_learners);
    CheckWorkers(config->workers);
    CheckAddressClashes(*config);
    if (straggler_shrink_field_ &&
        config->service.on_learner_failure != OnLearnerFailure::kShrink) {
      Error(*straggler_shrink_field_,
            "takes a straggler out of the plans as a failure would, which "
            "needs on_learner_failure: shrink");
    }
    if (min_learners) CheckMinLearners(*min_learners, *config);
    for (LearnerEndpoint& learner : config->learners) {
      if (!learner.tls) learner.tls = config->learner_tls;
    }
    CheckPlaintextListeners(*config);
  }

  // Where an address user was written (nullopt: it is the default).
  std::optional<Field> FieldOf(const AddressUser& user) const {
    switch (user.kind) {
      case AddressUser::kListen:
        return listen_field_;
      case AddressUser::kMetricsListen:
        return metrics_listen_field_;
      case AddressUser::kAdminListen:
        return admin_listen_field_;
      case AddressUser::kWorker:
        return user.index < worker_fields_.size()
                   ? worker_fields_[user.index].port_base
                   : std::nullopt;
      case AddressUser::kLearner:
        return user.index < learner_address_fields_.size()
                   ? learner_address_fields_[user.index]
                   : std::nullopt;
    }
    return std::nullopt;
  }

  // Reported where the clashing address was written, or, for a default, where
  // the address it clashes with was.
  void CheckAddressClashes(const AggregatorConfig& config) {
    for (const AddressClash& clash : FindAddressClashes(config)) {
      const std::optional<Field> written = FieldOf(clash.user);
      const std::optional<Field> at = written ? written : FieldOf(clash.other);
      Error(
          at ? at->mark : YAML::Mark::null_mark(),
          written ? clash.user_key : absl::StrCat(clash.user_key, " (default)"),
          clash.message);
    }
  }

  // Plaintext that other hosts can reach needs saying so.
  void CheckPlaintextListeners(const AggregatorConfig& config) {
    // A tls section with errors of its own is not plaintext asked for.
    if (tls_written_) return;
    auto check = [&](const std::optional<Field>& field,
                     const std::optional<HostPort>& address) {
      if (!field || !address) return;
      if (std::string why = PlaintextRefusal(config, *address); !why.empty()) {
        Error(*field, why);
      }
    };
    check(listen_field_, config.listen);
    check(admin_listen_field_, config.admin.listen);
  }

  // False, reported, unless the stream holds at most one document with
  // content. The documents are walked here rather than by YAML::LoadAll: on
  // some malformed input ("," alone) yaml-cpp 0.7 returns an empty document
  // forever without moving on, and LoadAll collects them until memory runs
  // out. A document that starts where the one before it did is that case.
  bool CheckOneDocument(const std::string& yaml) {
    std::istringstream stream(yaml);
    YAML::Parser parser(stream);
    DocumentWalker walker;
    try {
      while (parser.HandleNextDocument(walker)) {
        const std::vector<DocumentWalker::Document>& seen = walker.documents;
        if (seen.size() >= 2 &&
            seen.back().start.pos == seen[seen.size() - 2].start.pos) {
          Error(seen.back().start, "",
                "YAML syntax error: unexpected character; a value or a "
                "\"key: value\" was expected");
          return false;
        }
        if (seen.size() >= 2 && !seen.back().empty) {
          Error(seen.back().content, "",
                "only one YAML document is allowed; remove the \"---\" "
                "separator");
          return false;
        }
      }
    } catch (const YAML::ParserException& e) {
      Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
      return false;
    }
    return true;
  }

  // The one document of the file as a map, or nullopt when it is empty (the
  // default configuration) or not usable (reported).
  std::optional<Field> ReadDocument(const std::string& yaml) {
    if (!CheckOneDocument(yaml)) return std::nullopt;
    YAML::Node document;
    try {
      document = YAML::Load(yaml);
    } catch (const YAML::ParserException& e) {
      Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
      return std::nullopt;
    }
    // An empty file, or one of only comments, is the default configuration.
    if (document.IsNull()) return std::nullopt;
    Field root{document, document.Mark(), ""};
    if (!root.node.IsMap()) {
      Error(root, absl::StrCat("expected a map of settings (key: value), got ",
                               Describe(root.node)));
      return std::nullopt;
    }
    return root;
  }

  // The top-level keys. `min_learners` is set where min_learners was written.
  void ReadRoot(const Field& root, AggregatorConfig* config,
                std::optional<Field>* min_learners) {
    ServiceConfig& service = config->service;
    ReadMap(
        root,
        {
            {"listen",
             [&](const Field& f) {
               if (ReadAddress(f, /*allow_port_zero=*/true, &config->listen)) {
                 listen_field_ = f;
               }
             }},
            {"tls",
             [&](const Field& f) {
               tls_written_ = true;
               ReadServerTls(f, &config->tls);
             }},
            {"learner_tls",
             [&](const Field& f) { ReadClientTls(f, &config->learner_tls); }},
            {"allow_insecure",
             [&](const Field& f) { ReadBool(f, &config->allow_insecure); }},
            {"admin",
             [&](const Field& f) {
               ReadMap(f, {{"listen", [&](const Field& listen) {
                              ReadOptionalAddress(listen,
                                                  &config->admin.listen);
                              admin_listen_field_ = listen;
                            }}});
             }},
            {"learners",
             [&](const Field& f) { ReadLearners(f, &config->learners); }},
            {"workers",
             [&](const Field& f) { ReadWorkers(f, &config->workers); }},
            {"learner_sources",
             [&](const Field& f) {
               ReadLearnerSources(f, &config->learner_sources);
             }},
            {"min_learners",
             [&](const Field& f) {
               if (ReadInt(f, 0, INT_MAX, &service.min_learners)) {
                 *min_learners = f;
               }
             }},
            {"connect",
             [&](const Field& f) { ReadConnect(f, &config->connect); }},
            {"call_timeout",
             [&](const Field& f) { ReadDuration(f, &service.call_timeout); }},
            {"resource_refresh",
             [&](const Field& f) {
               ReadDuration(f, &config->connect.resource_refresh);
             }},
            {"drain_timeout",
             [&](const Field& f) { ReadDuration(f, &config->drain_timeout); }},
            {"metrics",
             [&](const Field& f) {
               ReadMap(f, {{"listen", [&](const Field& listen) {
                              ReadOptionalAddress(listen,
                                                  &config->metrics.listen);
                              metrics_listen_field_ = listen;
                              // cpp-httplib serves TCP only: refused here
                              // rather than at start.
                              if (config->metrics.listen &&
                                  config->metrics.listen->is_unix()) {
                                Error(listen,
                                      "the metrics endpoint is served on TCP "
                                      "only, not on a unix socket");
                                config->metrics.listen.reset();
                              }
                            }}});
             }},
            {"unix_socket",
             [&](const Field& f) {
               ReadMap(f, {{"mode", [&](const Field& mode) {
                              ReadFileMode(mode, &config->unix_socket.mode);
                            }}});
             }},
            {"max_message_bytes",
             [&](const Field& f) {
               ReadBytes(f, kMinMessageBytes, kMaxMessageBytes,
                         "1KiB to 2GiB - 1", &config->max_message_bytes);
             }},
            {"on_learner_failure",
             [&](const Field& f) {
               std::string policy;
               ReadOneOf(f, kFailurePolicies, &policy);
               if (policy == "shrink") {
                 service.on_learner_failure = OnLearnerFailure::kShrink;
               }
             }},
            {"straggler",
             [&](const Field& f) { ReadStraggler(f, &service.straggler); }},
            {"max_inflight_bytes",
             [&](const Field& f) {
               if (f.node.IsScalar() && f.node.Scalar() == "auto") {
                 service.max_inflight_bytes.reset();
                 return;
               }
               int64_t bytes = 0;
               if (ReadBytes(f, kMinMessageBytes, kMaxInflightBytes,
                             "1KiB to 1024TiB, or auto", &bytes)) {
                 service.max_inflight_bytes = bytes;
               }
             }},
            {"merge",
             [&](const Field& f) {
               ReadMap(f,
                       {{"homogeneous_keys",
                         [&](const Field& keys) {
                           ReadNameList(keys, &service.merge.homogeneous_keys);
                         }},
                        {"per_sample_keys", [&](const Field& keys) {
                           ReadNameList(keys, &service.merge.per_sample_keys);
                         }}});
             }},
            {"log",
             [&](const Field& f) {
               ReadMap(f, {{"level", [&](const Field& level) {
                              ReadOneOf(level, kLogLevels, &config->log.level);
                            }}});
             }},
        });
  }

  // Only a written min_learners is checked: the default 1 with no learners
  // listed is kept, since learners may also join later (reload).
  void CheckMinLearners(const Field& field, const AggregatorConfig& config) {
    // Discovered learners are not known in advance.
    if (!config.learner_sources.empty()) return;
    int64_t worker_learners = 0;
    for (const WorkerSpec& worker : config.workers) {
      if (worker.learner) worker_learners += worker.replicas;
    }
    const int min_learners = config.service.min_learners;
    const int64_t learners =
        static_cast<int64_t>(config.learners.size()) + worker_learners;
    if (min_learners <= learners) return;
    Error(field,
          worker_learners == 0
              ? absl::StrCat(min_learners,
                             " is more than the number of learners listed (",
                             config.learners.size(), ")")
              : absl::StrCat(min_learners,
                             " is more than the number of learners (",
                             config.learners.size(), " listed + ",
                             worker_learners, " replicas of learner workers)"));
  }

  // What the checks across workers need: where each worker's fields were.
  struct WorkerFields {
    std::optional<Field> name;       // set when the name is valid
    std::optional<Field> port_base;  // set when port_base is valid
    bool port_base_written = false;  // valid or not (reported once)
    std::optional<Field> learner;
    std::optional<Field> port_use;  // the first value using "{port}"
  };

  void ReadWorkers(const Field& field, std::vector<WorkerSpec>* workers) {
    workers->clear();
    worker_fields_.clear();
    // Each name and where it first appeared.
    std::map<std::string, YAML::Mark> first_use;
    ReadList(field, [&](const Field& item) {
      if (!item.node.IsMap()) {
        Error(item,
              absl::StrCat("expected a map with \"name\" and \"command\", got ",
                           Describe(item.node)));
        return;
      }
      WorkerSpec& spec = workers->emplace_back();
      WorkerFields& fields = worker_fields_.emplace_back();
      std::optional<Field> name;
      std::optional<Field> command;
      ReadWorkerKeys(item, &spec, &fields, &name, &command);
      ReadWorkerName(item, name, &first_use, &spec, &fields);
      ReadWorkerCommand(item, command, &spec, &fields);
    });
  }

  // A worker's keys; `name` and `command` are only found here, and read by
  // ReadWorkerName and ReadWorkerCommand.
  void ReadWorkerKeys(const Field& item, WorkerSpec* spec, WorkerFields* fields,
                      std::optional<Field>* name,
                      std::optional<Field>* command) {
    auto note_port = [this, fields](const Field& f, absl::string_view text) {
      NotePort(f, text, fields);
    };
    ReadMap(
        item,
        {
            {"name", [&](const Field& f) { *name = f; }},
            {"command", [&](const Field& f) { *command = f; }},
            {"replicas",
             [&](const Field& f) {
               ReadInt(f, 0, kMaxReplicas, &spec->replicas);
             }},
            {"env", [&](const Field& f) { ReadEnv(f, &spec->env, note_port); }},
            {"cwd",
             [&](const Field& f) {
               if (!ReadString(f, &spec->cwd)) return;
               if (spec->cwd.empty()) {
                 Error(f,
                       "must not be empty; omit it to keep the daemon's "
                       "working directory");
               }
               note_port(f, spec->cwd);
             }},
            {"port_base",
             [&](const Field& f) {
               fields->port_base_written = true;
               if (ReadInt(f, 1, kMaxPort, &spec->port_base)) {
                 fields->port_base = f;
               }
             }},
            {"restart",
             [&](const Field& f) {
               std::string policy;
               ReadOneOf(f, kRestartPolicies, &policy);
               if (policy == "always") spec->restart = RestartPolicy::kAlways;
               if (policy == "never") spec->restart = RestartPolicy::kNever;
             }},
            {"backoff",
             [&](const Field& f) {
               ReadBackoff(f, /*with_jitter=*/false, &spec->backoff);
             }},
            {"max_restarts",
             [&](const Field& f) {
               ReadInt(f, 0, INT_MAX, &spec->max_restarts);
             }},
            {"restart_window",
             [&](const Field& f) { ReadDuration(f, &spec->restart_window); }},
            {"min_uptime",
             [&](const Field& f) { ReadDuration(f, &spec->min_uptime); }},
            {"stop_timeout",
             [&](const Field& f) { ReadDuration(f, &spec->stop_timeout); }},
            {"learner",
             [&](const Field& f) {
               if (ReadBool(f, &spec->learner)) fields->learner = f;
             }},
            {"channel", [&](const Field& f) { ReadBool(f, &spec->channel); }},
        });
  }

  // Remembers the first value that uses "{port}", for CheckWorkers.
  void NotePort(const Field& field, absl::string_view text,
                WorkerFields* fields) {
    if (!fields->port_use && absl::StrContains(text, kPortPlaceholder)) {
      fields->port_use = field;
    }
  }

  void ReadWorkerName(const Field& item, const std::optional<Field>& name,
                      std::map<std::string, YAML::Mark>* first_use,
                      WorkerSpec* spec, WorkerFields* fields) {
    if (!name) {
      Error(item,
            "missing \"name\" (a unique name of letters, digits, '_', '.' "
            "and '-')");
      return;
    }
    if (!ReadString(*name, &spec->name)) return;
    const auto bad = std::find_if_not(spec->name.begin(), spec->name.end(),
                                      IsWorkerNameChar);
    if (spec->name.empty()) {
      Error(*name, "must not be empty");
    } else if (bad != spec->name.end()) {
      Error(*name,
            absl::StrCat(Quote(spec->name), " contains ", Quote({&*bad, 1}),
                         "; a worker name may only contain "
                         "letters, digits, '_', '.' and '-'"));
    } else if (auto [it, inserted] = first_use->emplace(spec->name, name->mark);
               !inserted) {
      Error(*name, absl::StrCat("duplicate worker name ", Quote(spec->name),
                                ", first at ", Position(it->second)));
    } else {
      fields->name = name;
    }
  }

  void ReadWorkerCommand(const Field& item, const std::optional<Field>& command,
                         WorkerSpec* spec, WorkerFields* fields) {
    if (!command) {
      Error(item,
            "missing \"command\" (a list: the program, then its "
            "arguments)");
    } else if (!command->node.IsSequence()) {
      Error(*command,
            absl::StrCat("expected a list: the program, then its arguments "
                         "(e.g. [python3, learner.py, --port, \"{port}\"]), "
                         "got ",
                         Describe(command->node)));
    } else if (command->node.size() == 0) {
      Error(*command,
            "must not be empty: give the program, then its arguments");
    } else {
      ReadList(*command, [&](const Field& arg) {
        std::string text;
        if (!ReadString(arg, &text)) return;
        if (spec->command.empty() && text.empty()) {
          Error(arg, "the program must not be empty");
        }
        NotePort(arg, text, fields);
        spec->command.push_back(std::move(text));
      });
    }
  }

  // `env`: a map of variable names to string values.
  void ReadEnv(
      const Field& field, std::vector<std::pair<std::string, std::string>>* env,
      const std::function<void(const Field&, absl::string_view)>& note_port) {
    env->clear();
    ForEachEntry(field, "a map of variable names to values", "variable names",
                 [&](const std::string& name, const YAML::Mark& key,
                     const Field& value) {
                   if (!IsEnvName(name)) {
                     Error(key, value.path,
                           "not a variable name: letters, digits and '_', not "
                           "starting with a digit");
                     return;
                   }
                   std::string text;
                   if (!ReadString(value, &text)) return;
                   note_port(value, text);
                   env->emplace_back(name, std::move(text));
                 });
  }

  // The checks that need every worker (and `learners:`) read.
  void CheckWorkers(const std::vector<WorkerSpec>& workers) {
    for (size_t i = 0; i < workers.size(); ++i) {
      const WorkerSpec& spec = workers[i];
      const WorkerFields& fields = worker_fields_[i];
      if (fields.port_use && !fields.port_base_written) {
        Error(*fields.port_use,
              absl::StrCat("uses {port}, which needs port_base (the port of "
                           "replica 0; replica i gets port_base + i)"));
      }
      if (spec.learner && !fields.port_base_written && fields.learner) {
        Error(*fields.learner,
              "a learner worker needs port_base: replica i serves on "
              "127.0.0.1:{port}, where {port} is port_base + i");
      }
      if (fields.port_base && spec.replicas > 0) {
        const int64_t last = int64_t{spec.port_base} + spec.replicas - 1;
        if (last > kMaxPort) {
          Error(*fields.port_base,
                absl::StrCat("port_base ", spec.port_base, " with ",
                             spec.replicas, " replicas needs ports up to ",
                             last, ", beyond ", kMaxPort));
        } else {
          for (size_t j = 0; j < i; ++j) {
            const WorkerSpec& other = workers[j];
            const WorkerFields& other_fields = worker_fields_[j];
            if (!other_fields.port_base || other.replicas == 0) continue;
            const int64_t other_last =
                int64_t{other.port_base} + other.replicas - 1;
            if (other_last > kMaxPort || spec.port_base > other_last ||
                other.port_base > last) {
              continue;
            }
            Error(*fields.port_base,
                  absl::StrCat("ports ", spec.port_base, "-", last,
                               " overlap the ports of worker ",
                               Quote(other.name), " (", other.port_base, "-",
                               other_last, ", port_base at ",
                               Position(other_fields.port_base->mark), ")"));
          }
        }
      }
      if (spec.learner && fields.name) {
        for (const auto& [id, mark] : learner_ids_) {
          if (IsReplicaId(id, spec.name, spec.replicas)) {
            Error(*fields.name,
                  absl::StrCat("the learner id ", Quote(id),
                               " of one of its replicas is already the id of "
                               "a learner in `learners`, at ",
                               Position(mark)));
          }
        }
      }
    }
  }

  void ReadConnect(const Field& field, ConnectConfig* connect) {
    ReadMap(
        field,
        {
            {"timeout",
             [&](const Field& f) { ReadDuration(f, &connect->timeout); }},
            {"attempt_timeout",
             [&](const Field& f) {
               ReadDuration(f, &connect->attempt_timeout);
             }},
            {"backoff",
             [&](const Field& f) {
               ReadBackoff(f, /*with_jitter=*/true, &connect->backoff);
             }},
            {"keepalive", [&](const Field& f) { ReadKeepalive(f, connect); }},
        });
  }

  // connect.keepalive: {time, timeout}.
  void ReadKeepalive(const Field& field, ConnectConfig* connect) {
    ReadMap(
        field,
        {
            {"time",
             [&](const Field& f) {
               std::chrono::milliseconds time{0};
               if (!ReadDuration(f, &time)) return;
               if (time < kMinKeepaliveTime) {
                 Error(f, absl::StrCat("must be at least 1s (gRPC servers take "
                                       "more frequent pings for abuse), got ",
                                       Quote(f.node.Scalar())));
                 return;
               }
               connect->keepalive_time = time;
             }},
            {"timeout",
             [&](const Field& f) {
               ReadDuration(f, &connect->keepalive_timeout);
             }},
        });
  }

  // learner_sources: a list of maps of one key, {dns: {...}} or
  // {orchestrator: {...}}; no two of the same source.
  void ReadLearnerSources(const Field& field,
                          std::vector<LearnerSourceConfig>* sources) {
    sources->clear();
    // Each source's key and where it was first written.
    std::map<std::string, YAML::Mark> first_use;
    ReadList(field, [&](const Field& item) {
      if (!item.node.IsMap() || item.node.size() != 1) {
        Error(item,
              absl::StrCat(
                  "expected a map of one key, dns or orchestrator "
                  "(e.g. {dns: {name: learners.ns.svc.cluster.local, "
                  "port: 22300}}), got ",
                  item.node.IsMap()
                      ? absl::StrCat("a map of ", item.node.size(), " keys")
                      : Describe(item.node)));
        return;
      }
      std::optional<LearnerSourceConfig> source;
      ReadMap(item,
              {{"dns", [&](const Field& f) { source = ReadDnsSource(f); }},
               {"orchestrator",
                [&](const Field& f) { source = ReadOrchestratorSource(f); }}});
      if (!source) return;
      auto [first, inserted] =
          first_use.emplace(LearnerSourceKey(*source), item.mark);
      if (!inserted) {
        Error(item, absl::StrCat("the same source as the one at ",
                                 Position(first->second), " (",
                                 LearnerSourceTarget(*source), ")"));
        return;
      }
      sources->push_back(*std::move(source));
    });
  }

  // learner_sources[].dns; nullopt when its name is missing or invalid.
  std::optional<LearnerSourceConfig> ReadDnsSource(const Field& field) {
    DnsSourceConfig dns;
    std::optional<Field> name;
    std::optional<Field> port;
    ReadMap(
        field,
        {
            {"name", [&](const Field& f) { name = f; }},
            {"port", [&](const Field& f) { port = f; }},
            {"refresh", [&](const Field& f) { ReadDuration(f, &dns.refresh); }},
            {"timeout", [&](const Field& f) { ReadDuration(f, &dns.timeout); }},
            {"nameserver",
             [&](const Field& f) { ReadNameserver(f, &dns.nameserver); }},
        });
    if (!port) {
      Error(field, "missing \"port\" (the learners' port, 1 to 65535)");
    } else {
      ReadInt(*port, 1, kMaxPort, &dns.port);
    }
    if (!name) {
      Error(field,
            "missing \"name\" (the DNS name whose A and AAAA records are "
            "the learners, e.g. learners.ns.svc.cluster.local)");
      return std::nullopt;
    }
    if (!ReadDnsName(*name, &dns.name)) return std::nullopt;
    return dns;
  }

  // A DNS name: labels of letters, digits, '-' and '_', 1 to 63 characters
  // each, 253 in all (a final '.' allowed); not an address.
  bool ReadDnsName(const Field& field, std::string* out) {
    std::string name;
    if (!ReadString(field, &name)) return false;
    absl::string_view labels = absl::StripSuffix(name, ".");
    if (IsIpAddress(name)) {
      Error(field, absl::StrCat(Quote(name),
                                " is an address, not a name: list it under "
                                "learners instead"));
      return false;
    }
    const bool valid =
        !labels.empty() && labels.size() <= 253 &&
        absl::c_all_of(absl::StrSplit(labels, '.'), [](absl::string_view l) {
          return !l.empty() && l.size() <= 63 &&
                 std::all_of(l.begin(), l.end(), [](char c) {
                   return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                          c == '-' || c == '_';
                 });
        });
    if (!valid) {
      Error(field, absl::StrCat("not a DNS name: ", Quote(name),
                                " (labels of letters, digits, '-' and '_', "
                                "1 to 63 characters each, separated by '.')"));
      return false;
    }
    *out = std::move(name);
    return true;
  }

  // dns.nameserver: an IP address with an optional port (default 53).
  void ReadNameserver(const Field& field, std::optional<HostPort>* out) {
    std::string text;
    if (!ReadString(field, &text)) return;
    absl::StatusOr<HostPort> address =
        IsIpAddress(text) ? HostPort::Tcp(text, 53)
                          : HostPort::Parse(text, /*allow_port_zero=*/false);
    if (!address.ok() || address->is_unix() || !IsIpAddress(address->host)) {
      Error(field, absl::StrCat("expected a DNS server's IP address with an "
                                "optional port (\"10.96.0.10\", "
                                "\"127.0.0.1:5353\", \"[fd00::a]:53\"), got ",
                                Quote(text)));
      return;
    }
    *out = *std::move(address);
  }

  // learner_sources[].orchestrator; nullopt when url, namespace or name is
  // missing (and not in the environment) or invalid.
  std::optional<LearnerSourceConfig> ReadOrchestratorSource(
      const Field& field) {
    OrchestratorSourceConfig orchestrator;
    std::optional<Field> url;
    std::optional<Field> pod_namespace;
    std::optional<Field> name;
    ReadMap(
        field,
        {
            {"url", [&](const Field& f) { url = f; }},
            {"namespace", [&](const Field& f) { pod_namespace = f; }},
            {"name", [&](const Field& f) { name = f; }},
            {"refresh",
             [&](const Field& f) { ReadDuration(f, &orchestrator.refresh); }},
            {"timeout",
             [&](const Field& f) { ReadDuration(f, &orchestrator.timeout); }},
            {"report_failed_after",
             [&](const Field& f) {
               ReadDuration(f, &orchestrator.report_failed_after);
             }},
        });
    // Each is read (and reported) even when one before it failed.
    bool ok = ReadUrl(field, url, "KUBERNETES_SERVER_URL", &orchestrator.url);
    ok = ReadWrittenOrEnv(
             field, pod_namespace, "namespace", "KUBERNETES_POD_NAMESPACE",
             "this aggregator's namespace", &orchestrator.pod_namespace) &&
         ok;
    ok = ReadWrittenOrEnv(field, name, "name", "KUBERNETES_POD_NAME",
                          "this aggregator's pod name", &orchestrator.name) &&
         ok;
    if (!ok) return std::nullopt;
    return orchestrator;
  }

  // A non-empty string written at `written`, else the value of $`env` when it
  // is set and not empty (the DI-engine original's defaults).
  bool ReadWrittenOrEnv(const Field& section,
                        const std::optional<Field>& written, const char* key,
                        const char* env, const char* what, std::string* out) {
    if (written) {
      if (!ReadString(*written, out)) return false;
      if (out->empty()) {
        Error(*written, "must not be empty");
        return false;
      }
      return true;
    }
    const char* value = std::getenv(env);
    if (value == nullptr || *value == '\0') {
      Error(section,
            absl::StrCat("missing \"", key, "\" (", what, "); or set ", env));
      return false;
    }
    *out = value;
    return true;
  }

  // orchestrator.url, or $`env`: http:// or https://, a host, no query; a
  // final '/' is dropped.
  bool ReadUrl(const Field& section, const std::optional<Field>& written,
               const char* env, std::string* out) {
    std::string url;
    if (!ReadWrittenOrEnv(section, written, "url", env,
                          "the orchestrator's server, e.g. "
                          "http://di-server.di-system:8080",
                          &url)) {
      return false;
    }
    absl::string_view rest = url;
    const bool scheme = absl::ConsumePrefix(&rest, "http://") ||
                        absl::ConsumePrefix(&rest, "https://");
    const bool clean = std::none_of(url.begin(), url.end(), [](char c) {
      return static_cast<unsigned char>(c) <= 0x20 || c == '?' || c == '#';
    });
    if (!scheme || rest.empty() || rest[0] == '/' || !clean) {
      const std::string what = written ? "" : absl::StrCat(" (from ", env, ")");
      Error(written ? *written : section,
            absl::StrCat("expected an http:// or https:// URL with a host and "
                         "no query, e.g. \"http://di-server.di-system:8080\", "
                         "got ",
                         Quote(url), what));
      return false;
    }
    while (!url.empty() && url.back() == '/') url.pop_back();
    *out = std::move(url);
    return true;
  }

  // connect.backoff and workers[].backoff; only the first has `jitter`.
  void ReadBackoff(const Field& field, bool with_jitter,
                   BackoffOptions* backoff) {
    std::optional<Field> initial;
    std::optional<Field> max;
    bool bad = false;  // An invalid duration is reported once, not compared.
    std::vector<Key> keys = {
        {"initial",
         [&](const Field& f) {
           initial = f;
           bad |= !ReadDuration(f, &backoff->initial);
         }},
        {"multiplier",
         [&](const Field& f) {
           ReadNumber(f, 1, HUGE_VAL, &backoff->multiplier);
         }},
        {"max",
         [&](const Field& f) {
           max = f;
           bad |= !ReadDuration(f, &backoff->max);
         }},
    };
    if (with_jitter) {
      keys.insert(keys.begin() + 2, {"jitter", [&](const Field& f) {
                                       ReadNumber(f, 0, 1, &backoff->jitter);
                                     }});
    }
    ReadMap(field, keys);
    if (!bad) {
      CheckMaxNotBelowInitial(field, initial, max, backoff->initial,
                              backoff->max);
    }
  }

  // A backoff section's max must not be below its initial delay. Points at max
  // if it was written, else at initial (above max's default).
  void CheckMaxNotBelowInitial(const Field& section,
                               const std::optional<Field>& initial,
                               const std::optional<Field>& max,
                               std::chrono::milliseconds initial_value,
                               std::chrono::milliseconds max_value) {
    if (max_value >= initial_value) return;
    const std::string max_text =
        absl::FormatDuration(absl::FromChrono(max_value));
    const std::string initial_text =
        absl::FormatDuration(absl::FromChrono(initial_value));
    if (max) {
      Error(*max, absl::StrCat("must be at least ", section.path, ".initial (",
                               initial_text, "), got ", max_text));
    } else if (initial) {
      Error(*initial,
            absl::StrCat("must be at most ", section.path, ".max (", max_text,
                         ", the default), got ", initial_text));
    }
  }

  void ReadLearners(const Field& field,
                    std::vector<LearnerEndpoint>* learners) {
    learners->clear();
    learner_ids_.clear();
    learner_address_fields_.clear();
    // Each id and where it first appeared.
    std::map<std::string, YAML::Mark> first_use;
    ReadList(field, [&](const Field& item) {
      // Counted even when invalid, so min_learners is checked against the list.
      LearnerEndpoint& learner = learners->emplace_back();
      std::optional<Field>& address_field =
          learner_address_fields_.emplace_back();
      if (!item.node.IsMap()) {
        Error(item,
              absl::StrCat("expected a map with \"id\" and \"address\", got ",
                           Describe(item.node)));
        return;
      }
      std::optional<Field> id;
      std::optional<Field> address;
      ReadMap(
          item,
          {{"id", [&](const Field& f) { id = f; }},
           {"address", [&](const Field& f) { address = f; }},
           {"tls", [&](const Field& f) { ReadClientTls(f, &learner.tls); }}});
      if (!id) {
        Error(item, "missing \"id\" (a unique, non-empty name)");
      } else if (ReadString(*id, &learner.id)) {
        if (learner.id.empty()) {
          Error(*id, "must not be empty");
        } else {
          auto [it, inserted] = first_use.emplace(learner.id, id->mark);
          if (inserted) learner_ids_.emplace(learner.id, id->mark);
          if (!inserted) {
            Error(*id, absl::StrCat("duplicate learner id ", Quote(learner.id),
                                    ", first at ", Position(it->second)));
          }
        }
      }
      if (!address) {
        Error(item,
              "missing \"address\" (\"host:port\", \"[v6]:port\" or "
              "\"unix:/path\")");
      } else {
        if (ReadAddress(*address, /*allow_port_zero=*/false,
                        &learner.address)) {
          address_field = address;
        }
      }
    });
  }

  // tls: cert and key (both), client_ca (optional).
  void ReadServerTls(const Field& field, std::optional<ServerTlsConfig>* out) {
    ServerTlsConfig tls;
    std::optional<Field> cert, key, client_ca;
    ReadMap(field, {{"cert", [&](const Field& f) { cert = f; }},
                    {"key", [&](const Field& f) { key = f; }},
                    {"client_ca", [&](const Field& f) { client_ca = f; }}});
    if (!ReadIdentity(field, cert, key, /*required=*/true, &tls.cert,
                      &tls.key)) {
      return;
    }
    if (client_ca) ReadCertificates(*client_ca, &tls.client_ca);
    *out = std::move(tls);
  }

  // learner_tls, or a learner's tls: ca, cert and key (optional, both or
  // neither), server_name.
  void ReadClientTls(const Field& field, std::optional<ClientTlsConfig>* out) {
    ClientTlsConfig tls;
    std::optional<Field> cert, key;
    ReadMap(field,
            {{"ca", [&](const Field& f) { ReadCertificates(f, &tls.ca); }},
             {"cert", [&](const Field& f) { cert = f; }},
             {"key", [&](const Field& f) { key = f; }},
             {"server_name",
              [&](const Field& f) { ReadString(f, &tls.server_name); }}});
    if (!ReadIdentity(field, cert, key, /*required=*/false, &tls.cert,
                      &tls.key)) {
      return;
    }
    *out = std::move(tls);
  }

  // A certificate and its key, both given (or, unless `required`, neither);
  // they must belong together.
  bool ReadIdentity(const Field& section, const std::optional<Field>& cert,
                    const std::optional<Field>& key, bool required,
                    PemFile* cert_out, PemFile* key_out) {
    if (!cert && !key && !required) return true;
    if (!cert || !key) {
      Error(section, absl::StrCat("needs both \"cert\" and \"key\" (",
                                  !cert ? "cert" : "key", " is missing)"));
      return false;
    }
    const bool cert_ok = ReadCertificates(*cert, cert_out);
    const bool key_ok = ReadPem(*key, key_out);
    if (!cert_ok || !key_ok) return false;
    if (!read_files_) return true;
    // The peer checks the whole chain: each certificate must be valid now.
    if (absl::Status valid = CheckChain(cert_out->pem); !valid.ok()) {
      Error(*cert, absl::StrCat(Quote(cert_out->path), ": ", valid.message()));
      return false;
    }
    if (absl::Status pair = CheckKeyPair(cert_out->pem, key_out->pem);
        !pair.ok()) {
      Error(*key, absl::StrCat(Quote(key_out->path), " with ",
                               Quote(cert_out->path), ": ", pair.message()));
      return false;
    }
    return true;
  }

  // A PEM file of one or more certificates.
  bool ReadCertificates(const Field& field, PemFile* out) {
    if (!ReadPem(field, out)) return false;
    if (!read_files_) return true;
    if (absl::Status status = CheckCertificates(out->pem); !status.ok()) {
      Error(field, absl::StrCat(Quote(out->path), ": ", status.message()));
      return false;
    }
    return true;
  }

  // A non-empty path, and the file's text when files are read.
  bool ReadPem(const Field& field, PemFile* out) {
    if (!ReadString(field, &out->path)) return false;
    if (out->path.empty()) {
      Error(field, "must not be empty (a PEM file's path)");
      return false;
    }
    if (!read_files_) return true;
    out->pem.clear();
    // A relative path is relative to the configuration file, wherever the
    // daemon runs from.
    std::string path = out->path;
    if (path[0] != '/' && source_.find('/') != std::string::npos) {
      path = source_.substr(0, source_.rfind('/') + 1) + path;
    }
    if (absl::Status status = ReadFile(path, "PEM file", &out->pem);
        !status.ok()) {
      Error(field, status.message());
      return false;
    }
    return true;
  }

  // Checks that `field` is a map whose keys are all in `keys`, each at most
  // once, and calls each key's reader. An empty section ("connect:") keeps
  // every default.
  void ReadMap(const Field& field, const std::vector<Key>& keys) {
    ForEachEntry(field, "a map", "names",
                 [&](const std::string& name, const YAML::Mark& key,
                     const Field& value) {
                   for (const Key& candidate : keys) {
                     if (name == candidate.name) return candidate.read(value);
                   }
                   std::vector<std::string> allowed;
                   for (const Key& candidate : keys) {
                     allowed.push_back(candidate.name);
                   }
                   Error(key, value.path,
                         absl::StrCat("unknown key; allowed here: ",
                                      absl::StrJoin(allowed, ", ")));
                 });
  }

  // The walk every map shares: `field` must be `expected` (a map) or empty;
  // each key must be a scalar (`key_kind` says what kind) and appear once.
  // `entry` gets each key's name, its position and its value as a Field whose
  // path is "<field path>.<name>".
  void ForEachEntry(
      const Field& field, const char* expected, const char* key_kind,
      const std::function<void(const std::string&, const YAML::Mark&,
                               const Field&)>& entry) {
    if (field.node.IsNull()) return;
    if (!field.node.IsMap()) {
      Error(field, absl::StrCat("expected ", expected, ", got ",
                                Describe(field.node)));
      return;
    }
    std::map<std::string, YAML::Mark> seen;
    for (YAML::const_iterator it = field.node.begin(); it != field.node.end();
         ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        Error(key.Mark(), field.path,
              absl::StrCat("keys must be ", key_kind, ", got ", Describe(key)));
        continue;
      }
      const std::string& name = key.Scalar();
      const std::string path =
          field.path.empty() ? name : absl::StrCat(field.path, ".", name);
      auto [first, inserted] = seen.emplace(name, key.Mark());
      if (!inserted) {
        Error(
            key.Mark(), path,
            absl::StrCat("duplicate key, first at ", Position(first->second)));
        continue;
      }
      // An empty value ("key:") has no position of its own: point at its key.
      const YAML::Node value = it->second;
      entry(name, key.Mark(),
            Field{value, value.IsNull() ? key.Mark() : value.Mark(), path});
    }
  }

  // Calls `read` on each item of the list `field`; an empty value is no items.
  void ReadList(const Field& field,
                const std::function<void(const Field&)>& read) {
    if (field.node.IsNull()) return;
    if (!field.node.IsSequence()) {
      Error(field, absl::StrCat("expected a list, got ", Describe(field.node)));
      return;
    }
    for (size_t i = 0; i < field.node.size(); ++i) {
      const YAML::Node item = field.node[i];
      read(Field{item, item.IsNull() ? field.mark : item.Mark(),
                 absl::StrCat(field.path, "[", i, "]")});
    }
  }

  bool ReadString(const Field& field, std::string* out) {
    if (!field.node.IsScalar()) {
      Error(field,
            absl::StrCat("expected a string, got ", Describe(field.node)));
      return false;
    }
    *out = field.node.Scalar();
    return true;
  }

  // A list of unique, non-empty strings.
  void ReadNameList(const Field& field, std::vector<std::string>* out) {
    std::vector<std::string> names;
    std::set<std::string> seen;
    ReadList(field, [&](const Field& item) {
      std::string name;
      if (!ReadString(item, &name)) return;
      if (name.empty()) {
        Error(item, "must not be empty");
      } else if (!seen.insert(name).second) {
        Error(item, absl::StrCat("duplicate entry ", Quote(name)));
      } else {
        names.push_back(std::move(name));
      }
    });
    *out = std::move(names);
  }

  // YAML 1.2's core-schema booleans only: "yes" and "on" are not accepted.
  bool ReadBool(const Field& field, bool* out) {
    if (field.node.IsScalar()) {
      const std::string& text = field.node.Scalar();
      if (text == "true" || text == "True" || text == "TRUE") {
        *out = true;
        return true;
      }
      if (text == "false" || text == "False" || text == "FALSE") {
        *out = false;
        return true;
      }
    }
    Error(field,
          absl::StrCat("expected true or false, got ", Describe(field.node)));
    return false;
  }

  template <size_t N>
  void ReadOneOf(const Field& field, const char* const (&allowed)[N],
                 std::string* out) {
    std::string value;
    if (!ReadString(field, &value)) return;
    for (const char* candidate : allowed) {
      if (value == candidate) {
        *out = value;
        return;
      }
    }
    Error(field, absl::StrCat("expected one of ", absl::StrJoin(allowed, ", "),
                              ", got ", Quote(value)));
  }

  bool ReadAddress(const Field& field, bool allow_port_zero, HostPort* out) {
    std::string text;
    if (!ReadString(field, &text)) return false;
    absl::StatusOr<HostPort> address = HostPort::Parse(text, allow_port_zero);
    if (!address.ok()) {
      Error(field, absl::StrCat("bad address ", Quote(text), ": ",
                                address.status().message()));
      return false;
    }
    *out = *std::move(address);
    return true;
  }

  // An address, or "" for none (metrics.listen).
  void ReadOptionalAddress(const Field& field, std::optional<HostPort>* out) {
    if (field.node.IsScalar() && field.node.Scalar().empty()) {
      out->reset();
      return;
    }
    HostPort address;
    if (ReadAddress(field, /*allow_port_zero=*/true, &address)) *out = address;
  }

  template <typename Int>
  bool ReadInt(const Field& field, int64_t min, int64_t max, Int* out) {
    int64_t value = 0;
    if (!field.node.IsScalar() ||
        !absl::SimpleAtoi(field.node.Scalar(), &value)) {
      Error(field,
            absl::StrCat("expected an integer, got ", Describe(field.node)));
      return false;
    }
    if (value < min || value > max) {
      Error(field,
            absl::StrCat("must be from ", min, " to ", max, ", got ", value));
      return false;
    }
    *out = static_cast<Int>(value);
    return true;
  }

  bool ReadNumber(const Field& field, double min, double max, double* out) {
    double value = 0;
    if (!field.node.IsScalar() ||
        !absl::SimpleAtod(field.node.Scalar(), &value) ||
        !std::isfinite(value)) {
      Error(field,
            absl::StrCat("expected a number, got ", Describe(field.node)));
      return false;
    }
    if (value < min || value > max) {
      Error(field, max == HUGE_VAL
                       ? absl::StrCat("must be at least ", min, ", got ",
                                      field.node.Scalar())
                       : absl::StrCat("must be from ", min, " to ", max,
                                      ", got ", field.node.Scalar()));
      return false;
    }
    *out = value;
    return true;
  }

  // straggler: {factor, window, action}.
  void ReadStraggler(const Field& field, StragglerConfig* straggler) {
    ReadMap(
        field,
        {
            {"factor",
             [&](const Field& f) {
               double factor = 0;
               if (!f.node.IsScalar() ||
                   !absl::SimpleAtod(f.node.Scalar(), &factor) ||
                   !(factor > 1) || factor > 1000) {
                 Error(f, absl::StrCat("expected a number above 1 (and at "
                                       "most 1000), got ",
                                       Describe(f.node)));
                 return;
               }
               straggler->factor = factor;
             }},
            {"window",
             [&](const Field& f) { ReadInt(f, 1, 10000, &straggler->window); }},
            {"action",
             [&](const Field& f) {
               std::string action;
               ReadOneOf(f, kStragglerActions, &action);
               if (action == "shrink") {
                 straggler->action = StragglerConfig::Action::kShrink;
                 straggler_shrink_field_ = f;
               }
             }},
        });
  }

  // File permissions as an octal string of 3 or 4 digits, "0660"; at most
  // 0777 (no setuid, setgid or sticky bits).
  bool ReadFileMode(const Field& field, int* out) {
    constexpr const char* kExpected =
        "expected permissions in octal as a string, e.g. \"0660\", got ";
    if (!field.node.IsScalar()) {
      Error(field, absl::StrCat(kExpected, Describe(field.node)));
      return false;
    }
    const std::string& text = field.node.Scalar();
    int mode = 0;
    bool octal = text.size() == 3 || text.size() == 4;
    for (char c : text) {
      octal = octal && c >= '0' && c <= '7';
      mode = mode * 8 + (c - '0');
    }
    if (!octal || mode > 0777) {
      Error(field, absl::StrCat(kExpected, Quote(text)));
      return false;
    }
    if ((mode & 0600) != 0600) {
      Error(field, absl::StrCat(Quote(text),
                                " leaves the daemon's own user without read "
                                "and write; give it at least 0600"));
      return false;
    }
    *out = mode;
    return true;
  }

  // A positive duration with a unit, at millisecond resolution.
  bool ReadDuration(const Field& field, std::chrono::milliseconds* out) {
    constexpr const char* kExpected =
        "expected a duration with a unit (us, ms, s, m, h), e.g. \"30s\" or "
        "\"250ms\", got ";
    if (!field.node.IsScalar()) {
      Error(field, absl::StrCat(kExpected, Describe(field.node)));
      return false;
    }
    const std::string& text = field.node.Scalar();
    double number = 0;
    if (absl::SimpleAtod(text, &number) && std::isfinite(number)) {
      Error(field, absl::StrCat(Quote(text),
                                " has no unit; durations need one, e.g. \"",
                                text, "s\" or \"", text, "ms\""));
      return false;
    }
    absl::Duration duration;
    if (!absl::ParseDuration(text, &duration)) {
      Error(field, absl::StrCat(kExpected, Quote(text)));
      return false;
    }
    if (duration <= absl::ZeroDuration()) {
      Error(field, absl::StrCat("must be positive, got ", Quote(text)));
      return false;
    }
    if (duration < absl::Milliseconds(1) || duration > kMaxDuration) {
      Error(field, absl::StrCat("must be from 1ms to ",
                                absl::FormatDuration(kMaxDuration), ", got ",
                                Quote(text)));
      return false;
    }
    *out = std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
    return true;
  }

  // A byte count: an integer, or an integer with a unit B, KiB, MiB or GiB.
  // `range` says what min and max are, in words ("1KiB to 2GiB - 1").
  bool ReadBytes(const Field& field, int64_t min, int64_t max,
                 absl::string_view range_words, int64_t* out) {
    const std::string range =
        absl::StrCat("must be from ", min, " to ", max, " (", range_words, ")");
    if (!field.node.IsScalar()) {
      Error(field, absl::StrCat("expected a byte count such as 1073741824 or "
                                "\"1GiB\", got ",
                                Describe(field.node)));
      return false;
    }
    absl::string_view text = field.node.Scalar();
    int64_t value = 0;
    if (absl::SimpleAtoi(text, &value)) {
      if (value < min || value > max) {
        Error(field, absl::StrCat(range, ", got ", value));
        return false;
      }
      *out = value;
      return true;
    }
    size_t digits = 0;
    while (digits < text.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
      ++digits;
    }
    absl::string_view unit = absl::StripAsciiWhitespace(text.substr(digits));
    int64_t scale = 0;
    if (unit == "B") {
      scale = 1;
    } else if (unit == "KiB") {
      scale = int64_t{1} << 10;
    } else if (unit == "MiB") {
      scale = int64_t{1} << 20;
    } else if (unit == "GiB") {
      scale = int64_t{1} << 30;
    } else if (unit == "TiB") {
      scale = int64_t{1} << 40;
    }
    if (digits == 0 || scale == 0) {
      Error(field, absl::StrCat("expected a byte count such as 1073741824 or "
                                "\"1GiB\" (units: B, KiB, MiB, GiB, TiB), got ",
                                Quote(text)));
      return false;
    }
    if (!absl::SimpleAtoi(text.substr(0, digits), &value) ||
        value > max / scale || value * scale < min) {
      Error(field, absl::StrCat(range, ", got ", Quote(text)));
      return false;
    }
    *out = value * scale;
    return true;
  }

  void Error(const Field& field, absl::string_view message) {
    Error(field.mark, field.path, message);
  }

  void Error(const YAML::Mark& mark, absl::string_view path,
             absl::string_view message) {
    std::string text = source_;
    if (!mark.is_null()) absl::StrAppend(&text, ":", Position(mark));
    if (!path.empty()) absl::StrAppend(&text, ": ", path);
    absl::StrAppend(&text, ": ", message);
    errors_.push_back(Problem{mark.line, mark.column, Printable(text)});
  }

  std::string source_;
  const bool read_files_;
  std::vector<Problem> errors_;
  // Where listen, metrics.listen and admin.listen were written (unset: the
  // default).
  std::optional<Field> listen_field_;
  std::optional<Field> metrics_listen_field_;
  // Where straggler.action: shrink was written.
  std::optional<Field> straggler_shrink_field_;
  std::optional<Field> admin_listen_field_;
  // One per entry of config->learners: where a valid address was written.
  std::vector<std::optional<Field>> learner_address_fields_;
  bool tls_written_ = false;
  // Where each id of `learners:` was first written.
  std::map<std::string, YAML::Mark> learner_ids_;
  // One per entry of config->workers, in the same order.
  std::vector<WorkerFields> worker_fields_;
};

// What a path that is not a regular file is, for the error message.
const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads all of `path`, or says why not (errno's text, status code from errno).
// Opened without blocking and refused unless it is a regular file, so a FIFO
// or a device at the path cannot stall the reader.
absl::Status ReadFile(const std::string& path, absl::string_view what,
                      std::string* out) {
  const std::string context = absl::StrCat(path, ": cannot read ", what);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, context);
  struct stat info;
  absl::Status status;
  if (fstat(fd, &info) != 0) {
    status = absl::ErrnoToStatus(errno, context);
  } else if (!S_ISREG(info.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(
        context, ": it is ", FileKind(info.st_mode), ", not a regular file"));
  } else if (static_cast<uint64_t>(info.st_size) > kMaxFileBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(context, ": larger than 16MiB, not a ", what));
  }
  char buffer[64 * 1024];
  while (status.ok()) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = absl::ErrnoToStatus(errno, context);
      break;
    }
    if (n == 0) break;
    out->append(buffer, static_cast<size_t>(n));
    if (out->size() > kMaxFileBytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat(context, ": larger than 16MiB, not a ", what));
    }
  }
  close(fd);
  return status;
}

}  // namespace

std::string PlaintextRefusal(const AggregatorConfig& config,
                             const HostPort& address) {
  if (config.tls || config.allow_insecure || address.IsLoopback()) return "";
  return absl::StrCat("plaintext on ", Quote(address.ToString()),
                      ", which other hosts can reach: set tls (cert and key), "
                      "or allow_insecure: true to accept it");
}

absl::StatusOr<AggregatorConfig> ParseConfig(std::string_view yaml,
                                             std::string_view source) {
  return Parser(std::string(source), /*read_files=*/false)
      .Parse(std::string(yaml));
}

absl::StatusOr<AggregatorConfig> LoadConfigFile(const std::string& path) {
  std::string text;
  absl::Status status = ReadFile(path, "configuration", &text);
  if (!status.ok()) return status;
  return Parser(path, /*read_files=*/true).Parse(text);
}

absl::StatusOr<AggregatorConfig> LoadConfigFile(
    const std::string& path, std::chrono::milliseconds timeout) {
  // The read runs on a thread of its own that may be left behind (a file on
  // a stalled network file system): it owns what it uses.
  struct Shared {
    Mutex mu;
    std::optional<absl::StatusOr<AggregatorConfig>> result ABSL_GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, path] {
    absl::StatusOr<AggregatorConfig> loaded = LoadConfigFile(path);
    MutexLock lock(&shared->mu);
    shared->result = std::move(loaded);
  }).detach();
  MutexLock lock(&shared->mu);
  auto done = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
    return shared->result.has_value();
  };
  if (!shared->mu.AwaitWithTimeout(absl::Condition(&done),
                                   absl::FromChrono(timeout))) {
    return absl::DeadlineExceededError(
        absl::StrCat(path, ": cannot read configuration: not read within ",
                     timeout.count(), "ms"));
  }
  return *std::move(shared->result);
}

}  // namespace aggregator
