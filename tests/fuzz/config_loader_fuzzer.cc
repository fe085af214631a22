// libFuzzer target: the YAML config loader (lib/config/config_loader).
//
// The input is the text of an aggregator.yaml. ParseConfig must never crash,
// hang (libFuzzer's -timeout) or throw, whatever the text: it returns a
// configuration, or INVALID_ARGUMENT whose message has one non-empty line per
// problem, each starting with the source name. A configuration it accepts
// must hold what the loader promises to validate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "lib/config/config_loader.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr char kSource[] = "fuzz.yaml";
  absl::StatusOr<aggregator::AggregatorConfig> config =
      aggregator::ParseConfig(text, kSource);
  if (std::getenv("FUZZ_PRINT") != nullptr) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
  }
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(!config.status().message().empty());
    for (absl::string_view line :
         absl::StrSplit(config.status().message(), '\n')) {
      if (!absl::StartsWith(line, kSource)) {
        std::fprintf(stderr, "error line without its source: %.*s\n",
                     static_cast<int>(line.size()), line.data());
      }
      FUZZ_CHECK(absl::StartsWith(line, kSource));
    }
    return 0;
  }
  FUZZ_CHECK(config->source == kSource);
  // What a valid configuration guarantees (config.h).
  std::set<std::string> ids;
  for (const auto& learner : config->learners) {
    FUZZ_CHECK(!learner.id.empty());
    FUZZ_CHECK(ids.insert(learner.id).second);
  }
  std::set<std::string> names;
  for (const auto& worker : config->workers) {
    FUZZ_CHECK(!worker.name.empty());
    FUZZ_CHECK(names.insert(worker.name).second);
    FUZZ_CHECK(!worker.command.empty());
    FUZZ_CHECK(!worker.command[0].empty());
    FUZZ_CHECK(worker.replicas >= 0);
    FUZZ_CHECK(worker.backoff.max >= worker.backoff.initial);
    for (char c : worker.name) {
      FUZZ_CHECK(absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                 c == '_' || c == '.' || c == '-');
    }
    FUZZ_CHECK(worker.port_base >= 0 && worker.port_base <= 65535);
    if (worker.port_base > 0) {
      FUZZ_CHECK(worker.port_base + worker.replicas - 1 <= 65535);
    }
    if (worker.learner) FUZZ_CHECK(worker.port_base > 0);
  }
  FUZZ_CHECK(config->service.min_learners >= 0);
  FUZZ_CHECK(config->service.call_timeout.count() >= 1);
  FUZZ_CHECK(config->connect.backoff.max >= config->connect.backoff.initial);
  FUZZ_CHECK(config->max_message_bytes >= 1024);
  for (const std::string& key : config->service.merge.per_sample_keys) {
    FUZZ_CHECK(!key.empty());
  }
  return 0;
}
