#include "lib/ops/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace aggregator {

absl::Status ConfigureLogging(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  // from_str answers `off` for anything it does not know.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level,
                     "' (trace, debug, info, warn, error, critical or off)"));
  }
  static std::once_flag installed;
  std::call_once(installed, [] {
    auto logger = spdlog::stderr_logger_mt("aggregatord");
    const bool journald = std::getenv("JOURNAL_STREAM") != nullptr;
    logger->set_pattern(journald ? "<%l> %v" : "%Y-%m-%dT%H:%M:%S.%e %l %v");
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  });
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace aggregator
