#include "lib/base/host_port.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace aggregator {
namespace {

constexpr char kUnixPrefix[] = "unix:";

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", text, "\"");
}

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_';
}

absl::Status Invalid(absl::string_view why) {
  return absl::InvalidArgumentError(why);
}

// Splits "host:port" / "[v6]:port" into its host and port text.
absl::Status SplitTcp(absl::string_view address, absl::string_view* host,
                      absl::string_view* port) {
  if (address[0] == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) {
      return Invalid("missing \"]\" after the IPv6 host");
    }
    *host = address.substr(1, close - 1);
    absl::string_view rest = address.substr(close + 1);
    if (!absl::ConsumePrefix(&rest, ":")) {
      return Invalid("missing \":port\" after \"]\"");
    }
    if (host->empty())
      return Invalid("the host between \"[\" and \"]\" is empty");
    // A zone ("%eth0") may follow a link-local address.
    const size_t percent = host->find('%');
    for (char c : host->substr(0, percent)) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' &&
          c != '.') {
        return Invalid(absl::StrCat(Quote(*host), " is not an IPv6 address"));
      }
    }
    // The zone is an interface name or number: host characters only (one
    // with a newline and "<0>" forged journald lines when logged).
    if (percent != absl::string_view::npos) {
      const absl::string_view zone = host->substr(percent + 1);
      if (zone.empty()) {
        return Invalid(absl::StrCat("the zone after \"%\" in ",
                                    Quote(absl::CHexEscape(*host)),
                                    " is empty"));
      }
      for (char c : zone) {
        if (!IsHostChar(c)) {
          return Invalid(absl::StrCat(
              "the zone of ", Quote(absl::CHexEscape(*host)), " contains ",
              Quote(absl::CHexEscape(absl::string_view(&c, 1)))));
        }
      }
    }
    *port = rest;
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return Invalid("missing \":port\"");
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->empty()) return Invalid("the host is empty");
  if (absl::StrContains(*host, ':')) {
    return Invalid("an IPv6 host needs brackets, e.g. \"[::1]:22300\"");
  }
  for (char c : *host) {
    if (!IsHostChar(c)) {
      return Invalid(absl::StrCat("the host ", Quote(*host), " contains ",
                                  Quote(absl::string_view(&c, 1))));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ParsePort(absl::string_view port, bool allow_port_zero) {
  const int min_port = allow_port_zero ? 0 : 1;
  int value = -1;
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      });
  if (!digits || !absl::SimpleAtoi(port, &value) || value < min_port ||
      value > 65535) {
    return Invalid(absl::StrCat("the port must be a number from ", min_port,
                                " to 65535, got ", Quote(port)));
  }
  return value;
}

}  // namespace

absl::StatusOr<HostPort> HostPort::Parse(std::string_view text,
                                         bool allow_port_zero) {
  absl::string_view address(text.data(), text.size());
  if (address.empty()) {
    return Invalid(
        "expected \"host:port\", \"[v6]:port\" or \"unix:/path\", got an "
        "empty string");
  }
  if (absl::ConsumePrefix(&address, kUnixPrefix)) {
    if (address.size() < 2 || address[0] != '/') {
      return Invalid(
          "a unix socket address is \"unix:\" and an absolute path, e.g. "
          "\"unix:/run/aggregator.sock\"");
    }
    return Unix(std::string(address));
  }
  if (absl::StrContains(address, "://")) {
    return Invalid("expected \"host:port\" without a URL scheme");
  }
  absl::string_view host;
  absl::string_view port_text;
  if (absl::Status split = SplitTcp(address, &host, &port_text); !split.ok()) {
    return split;
  }
  absl::StatusOr<int> port = ParsePort(port_text, allow_port_zero);
  if (!port.ok()) return port.status();
  return Tcp(std::string(host), *port);
}

HostPort HostPort::Tcp(std::string host, int port) {
  HostPort address;
  address.host = std::move(host);
  address.port = port;
  return address;
}

HostPort HostPort::Unix(std::string path) {
  HostPort address;
  address.path = std::move(path);
  return address;
}

bool HostPort::IsWildcard() const {
  return !is_unix() && (host.empty() || host == "0.0.0.0" || host == "::");
}

bool IsIpAddress(const std::string& text) {
  in6_addr address;
  return inet_pton(AF_INET, text.c_str(), &address) == 1 ||
         inet_pton(AF_INET6, text.c_str(), &address) == 1;
}

bool HostPort::IsLoopback() const {
  if (is_unix() || host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

std::string HostPort::ToString() const {
  if (is_unix()) return absl::StrCat(kUnixPrefix, path);
  if (absl::StrContains(host, ':')) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

HostPort HostPort::WithPort(int bound_port) const {
  HostPort copy = *this;
  if (!is_unix()) copy.port = bound_port;
  return copy;
}

HostPort HostPort::Dialable() const {
  if (!IsWildcard()) return *this;
  return Tcp(host == "::" ? "::1" : "127.0.0.1", port);
}

}  // namespace aggregator
