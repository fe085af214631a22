#include "lib/config/config_loader.h"

#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/base/mutex.h"
#include "lib/config/config_checks.h"
#include "lib/config/connect_reader.h"
#include "lib/config/file_reader.h"
#include "lib/config/learner_sources_reader.h"
#include "lib/config/learners_reader.h"
#include "lib/config/tls_reader.h"
#include "lib/config/typed_readers.h"
#include "lib/config/workers_reader.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {
namespace {

constexpr int64_t kMinMessageBytes = 1024;
constexpr int64_t kMaxMessageBytes = 2147483647;  // gRPC's limits are ints.
constexpr int64_t kMaxInflightBytes = int64_t{1} << 50;

constexpr const char* kLogLevels[] = {"trace", "debug",    "info", "warn",
                                      "error", "critical", "off"};
constexpr const char* kLogFormats[] = {"text", "json"};
constexpr const char* kFailurePolicies[] = {"fail", "shrink"};
constexpr const char* kStragglerActions[] = {"none", "shrink"};

// Reads one document into an AggregatorConfig, collecting every problem. The
// top level and its small sections are read here, the larger sections by
// their readers; a section's keys are listed once, in its ReadMap table.
class Parser {
 public:
  // `read_files`: PEM files named in tls sections are read and checked (else
  // only their paths are kept).
  Parser(std::string source, bool read_files)
      : reader_(std::move(source)), read_files_(read_files) {}

  absl::StatusOr<AggregatorConfig> Parse(const std::string& yaml) {
    AggregatorConfig config;
    config.source = reader_.source();
    try {
      ParseInto(yaml, &config);
    } catch (const YAML::Exception& e) {
      reader_.Error(e.mark, "", absl::StrCat("cannot read the YAML: ", e.msg));
    } catch (const std::exception& e) {
      reader_.Error(YAML::Mark::null_mark(), "",
                    absl::StrCat("cannot read the configuration: ", e.what()));
    } catch (...) {
      reader_.Error(YAML::Mark::null_mark(), "",
                    "cannot read the configuration");
    }
    if (absl::Status status = reader_.Result(); !status.ok()) return status;
    return config;
  }

  // Reads a stand-in document that reaches every section (YamlReader::Probe).
  KeyTables Probe() {
    KeyTables tables;
    reader_.Probe(&tables);
    AggregatorConfig config;
    ReadRoot(YamlReader::ProbeField(""), &config);
    return tables;
  }

 private:
  void ParseInto(const std::string& yaml, AggregatorConfig* config) {
    std::optional<Field> root = reader_.ReadDocument(yaml);
    if (!root) return;
    ReadRoot(*root, config);
    CheckAcrossSections(&reader_, written_, *config);
    for (LearnerEndpoint& learner : config->learners) {
      if (!learner.tls) learner.tls = config->learner_tls;
    }
  }

  // The top-level keys.
  void ReadRoot(const Field& root, AggregatorConfig* config) {
    YamlReader* r = &reader_;
    ServiceConfig& service = config->service;
    r->ReadMap(
        root,
        {
            {"listen",
             [&](const Field& f) {
               if (ReadAddress(r, f, /*allow_port_zero=*/true,
                               &config->listen)) {
                 written_.listen = f;
               }
             }},
            {"tls",
             [&](const Field& f) {
               written_.tls = true;
               ReadServerTls(r, f, read_files_, &config->tls);
             }},
            {"learner_tls",
             [&](const Field& f) {
               ReadClientTls(r, f, read_files_, &config->learner_tls);
             }},
            {"allow_insecure",
             [&](const Field& f) { ReadBool(r, f, &config->allow_insecure); }},
            {"admin",
             [&](const Field& f) {
               r->ReadMap(f, {{"listen", [&](const Field& listen) {
                                 ReadOptionalAddress(r, listen,
                                                     &config->admin.listen);
                                 written_.admin_listen = listen;
                               }}});
             }},
            {"learners",
             [&](const Field& f) {
               ReadLearners(r, f, read_files_, &config->learners,
                            &written_.learners);
             }},
            {"workers",
             [&](const Field& f) {
               ReadWorkers(r, f, &config->workers, &written_.workers);
             }},
            {"learner_sources",
             [&](const Field& f) {
               ReadLearnerSources(r, f, &config->learner_sources);
             }},
            {"min_learners",
             [&](const Field& f) {
               if (ReadInt(r, f, 0, INT_MAX, &service.min_learners)) {
                 written_.min_learners = f;
               }
             }},
            {"connect",
             [&](const Field& f) { ReadConnect(r, f, &config->connect); }},
            {"call_timeout",
             [&](const Field& f) {
               ReadDuration(r, f, &service.call_timeout);
             }},
            {"resource_refresh",
             [&](const Field& f) {
               ReadDuration(r, f, &config->connect.resource_refresh);
             }},
            {"drain_timeout",
             [&](const Field& f) {
               ReadDuration(r, f, &config->drain_timeout);
             }},
            {"metrics",
             [&](const Field& f) {
               r->ReadMap(f, {{"listen", [&](const Field& listen) {
                                 ReadMetricsListen(listen, config);
                               }}});
             }},
            {"unix_socket",
             [&](const Field& f) {
               r->ReadMap(f, {{"mode", [&](const Field& mode) {
                                 ReadFileMode(r, mode,
                                              &config->unix_socket.mode);
                               }}});
             }},
            {"max_message_bytes",
             [&](const Field& f) {
               ReadBytes(r, f, kMinMessageBytes, kMaxMessageBytes,
                         "1KiB to 2GiB - 1", &config->max_message_bytes);
             }},
            {"on_learner_failure",
             [&](const Field& f) {
               std::string policy;
               ReadOneOf(r, f, kFailurePolicies, &policy);
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
               if (ReadBytes(r, f, kMinMessageBytes, kMaxInflightBytes,
                             "1KiB to 1024TiB, or auto", &bytes)) {
                 service.max_inflight_bytes = bytes;
               }
             }},
            {"merge",
             [&](const Field& f) {
               r->ReadMap(f, {{"homogeneous_keys",
                               [&](const Field& keys) {
                                 ReadNameList(r, keys,
                                              &service.merge.homogeneous_keys);
                               }},
                              {"per_sample_keys", [&](const Field& keys) {
                                 ReadNameList(r, keys,
                                              &service.merge.per_sample_keys);
                               }}});
             }},
            {"log",
             [&](const Field& f) {
               r->ReadMap(f, {{"level",
                               [&](const Field& level) {
                                 ReadOneOf(r, level, kLogLevels,
                                           &config->log.level);
                               }},
                              {"format", [&](const Field& format) {
                                 ReadOneOf(r, format, kLogFormats,
                                           &config->log.format);
                               }}});
             }},
        });
  }

  // metrics.listen: an address or "" (off); TCP only, since cpp-httplib
  // serves TCP only: refused here rather than at start.
  void ReadMetricsListen(const Field& listen, AggregatorConfig* config) {
    ReadOptionalAddress(&reader_, listen, &config->metrics.listen);
    written_.metrics_listen = listen;
    if (config->metrics.listen && config->metrics.listen->is_unix()) {
      reader_.Error(listen,
                    "the metrics endpoint is served on TCP only, not on a "
                    "unix socket");
      config->metrics.listen.reset();
    }
  }

  // straggler: {factor, window, action, late_after}.
  void ReadStraggler(const Field& field, StragglerConfig* straggler) {
    YamlReader* r = &reader_;
    r->ReadMap(
        field,
        {
            {"factor",
             [&](const Field& f) {
               double factor = 0;
               if (!f.node.IsScalar() ||
                   !absl::SimpleAtod(f.node.Scalar(), &factor) ||
                   !(factor > 1) || factor > 1000) {
                 r->Error(f, absl::StrCat("expected a number above 1 (and at "
                                          "most 1000), got ",
                                          Describe(f.node)));
                 return;
               }
               straggler->factor = factor;
             }},
            {"window",
             [&](const Field& f) {
               ReadInt(r, f, 1, 10000, &straggler->window);
             }},
            {"action",
             [&](const Field& f) {
               std::string action;
               ReadOneOf(r, f, kStragglerActions, &action);
               if (action == "shrink") {
                 straggler->action = StragglerConfig::Action::kShrink;
                 written_.straggler_shrink = f;
               }
             }},
            {"late_after",
             [&](const Field& f) { ReadLateAfter(f, &straggler->late_after); }},
        });
  }

  // straggler.late_after: auto, off, or a duration.
  void ReadLateAfter(const Field& f, StragglerConfig::LateAfter* late_after) {
    using Mode = StragglerConfig::LateAfter::Mode;
    if (f.node.IsScalar() && f.node.Scalar() == "auto") {
      late_after->mode = Mode::kAuto;
      return;
    }
    if (f.node.IsScalar() && f.node.Scalar() == "off") {
      late_after->mode = Mode::kOff;
      return;
    }
    const std::string text = f.node.IsScalar() ? f.node.Scalar() : "";
    if (f.node.IsScalar() &&
        (text.empty() || (!absl::ascii_isdigit(text[0]) && text[0] != '.' &&
                          text[0] != '-' && text[0] != '+'))) {
      // A word, not a number: the duration reader would only say "duration".
      reader_.Error(f, absl::StrCat("expected auto, off or a duration with a "
                                    "unit, e.g. \"500ms\", got ",
                                    Describe(f.node)));
      return;
    }
    std::chrono::milliseconds fixed{0};
    if (!ReadDuration(&reader_, f, &fixed)) return;
    late_after->mode = Mode::kFixed;
    late_after->fixed = fixed;
  }

  YamlReader reader_;
  const bool read_files_;
  WrittenFields written_;
};

}  // namespace

absl::StatusOr<AggregatorConfig> ParseConfig(std::string_view yaml,
                                             std::string_view source) {
  return Parser(std::string(source), /*read_files=*/false)
      .Parse(std::string(yaml));
}

std::map<std::string, std::vector<std::string>> ConfigKeys() {
  return Parser("<keys>", /*read_files=*/false).Probe();
}

absl::StatusOr<AggregatorConfig> LoadConfigFile(const std::string& path) {
  std::string text;
  absl::Status status = ReadBoundedFile(path, "configuration", &text);
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
