#include "lib/ops/logging.h"

#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "lib/ops/repeat_limiter.h"

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

// One JSON object per line: ts (UTC, milliseconds), level, msg, then the
// thread's structured fields.
class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds =
        std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const int millis = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch)
            .count() %
        1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char stamp[80];  // room for any int the compiler imagines
    std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                  utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                  utc.tm_min, utc.tm_sec, millis);
    const spdlog::string_view_t level =
        spdlog::level::to_string_view(msg.level);
    std::string line = absl::StrCat(
        "{\"ts\":\"", stamp, "\",\"level\":",
        JsonString(absl::string_view(level.data(), level.size())), ",\"msg\":",
        JsonString(absl::string_view(msg.payload.data(), msg.payload.size())));
    for (const auto& [key, value] : CurrentLogFields()) {
      absl::StrAppend(&line, ",", JsonString(key), ":", JsonString(value));
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// The text format: a timestamp, or journald's priority, then level and
// message.
std::unique_ptr<spdlog::formatter> TextFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('~');
  if (StderrIsJournal()) {
    // journald stamps lines itself and reads the priority off the prefix.
    formatter->add_flag<JournalPriority>('*').set_pattern("<%*>%l %~");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %~");
  }
  return formatter;
}

std::atomic<uint64_t> tls_handshake_failures{0};

// gRPC's error lines, at most 5 per call site (file:line) per 10 s: a peer
// can make gRPC log one per connection. Never destroyed: gRPC's threads may
// log until the process ends.
RepeatLimiter& GrpcErrorLimiter() {
  static RepeatLimiter* const limiter = new RepeatLimiter(
      RepeatLimiter::Options{}, [](const std::string& source, uint64_t count) {
        spdlog::error(
            "grpc: suppressed {} similar messages from {} in the "
            "last {}",
            count, source,
            absl::FormatDuration(
                absl::FromChrono(RepeatLimiter::Options{}.window)));
      });
  return *limiter;
}

// gRPC's own log lines (a bind that failed, a bad peer) go through the same
// logger, so they too carry a priority and the daemon's format.
void ForwardGrpcLog(gpr_log_func_args* args) {
  const absl::string_view message = args->message;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    // ssl_transport_security.cc's line for a handshake that failed (a peer
    // that is not a TLS client, a certificate refused), whatever the level.
    if (absl::StartsWith(message, "Handshake failed")) {
      tls_handshake_failures.fetch_add(1, std::memory_order_relaxed);
    }
    if (!GrpcErrorLimiter().Admit(absl::StrCat(args->file, ":", args->line))) {
      return;
    }
  }
  // Info and debug lines only come when GRPC_VERBOSITY asks for them: whole.
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

uint64_t TlsHandshakeFailures() {
  return tls_handshake_failures.load(std::memory_order_relaxed);
}

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

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", byte);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

absl::Status ConfigureLogging(const std::string& level,
                              const std::string& format) {
  const auto parsed = spdlog::level::from_str(level);
  // from_str answers `off` for anything it does not know.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level,
                     "' (trace, debug, info, warn, error, critical or off)"));
  }
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log format '", format, "' (text or json)"));
  }
  static std::once_flag installed;
  std::call_once(installed, [] {
    auto logger = spdlog::stderr_logger_mt("aggregatord");
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
    gpr_set_log_function(ForwardGrpcLog);
  });
  // Set on every call: a reload may change it (and the sink's lock keeps
  // lines being written whole meanwhile).
  spdlog::default_logger()->set_formatter(
      format == "json" ? std::unique_ptr<spdlog::formatter>(
                             std::make_unique<JsonFormatter>())
                       : TextFormatter());
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace aggregator
