#include "lib/ops/logging.h"

#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aggregator {
namespace {

// sd-daemon(3)'s "<N>" prefix: the syslog priority journald files the line
// under (`journalctl -p err` shows <3> and below).
class JournalPriority : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    char digit = '6';
    switch (msg.level) {
      case spdlog::level::critical:
        digit = '2';
        break;
      case spdlog::level::err:
        digit = '3';
        break;
      case spdlog::level::warn:
        digit = '4';
        break;
      case spdlog::level::info:
        digit = '6';
        break;
      default:  // debug, trace
        digit = '7';
        break;
    }
    dest.push_back(digit);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JournalPriority>();
  }
};

// The message (%v) with its control characters escaped, so each log line is
// one line whatever it quotes: a peer's address, id or error text holding a
// newline and "<0>" forged lines (and journald priorities) before.
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped = EscapeLogText(
        absl::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

// gRPC's own log lines (a bind that failed, a bad peer) go through the same
// logger, so they too carry a priority and the daemon's format.
void ForwardGrpcLog(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

std::string EscapeLogText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    // A tab stays: it ends no line.
    if ((byte >= 0x20 && byte != 0x7f) || c == '\t') {
      out.push_back(c);
      continue;
    }
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        absl::StrAppendFormat(&out, "\\x%02x", byte);
    }
  }
  return out;
}

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  uintmax_t device = 0;
  uintmax_t inode = 0;
  char rest = 0;
  if (std::sscanf(stream, "%" SCNuMAX ":%" SCNuMAX "%c", &device, &inode,
                  &rest) != 2) {
    return false;
  }
  struct stat stderr_stat {};
  return fstat(STDERR_FILENO, &stderr_stat) == 0 &&
         static_cast<uintmax_t>(stderr_stat.st_dev) == device &&
         static_cast<uintmax_t>(stderr_stat.st_ino) == inode;
}

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
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<EscapedMessage>('~');
    if (StderrIsJournal()) {
      // journald stamps lines itself and reads the priority off the prefix.
      formatter->add_flag<JournalPriority>('*').set_pattern("<%*>%l %~");
    } else {
      formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %~");
    }
    logger->set_formatter(std::move(formatter));
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
    gpr_set_log_function(ForwardGrpcLog);
  });
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace aggregator
