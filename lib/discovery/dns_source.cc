#include "lib/discovery/dns_source.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a lookup in progress looks at RequestLimits::stop.
constexpr milliseconds kStopPoll{50};
constexpr int kClassIn = 1;  // ns_c_in
constexpr int kTypeA = 1;    // ns_t_a
constexpr int kTypeAaaa = 28;

// c-ares' process-wide set-up (nothing to do on Linux, but its contract).
void InitAres() {
  static const int status = ares_library_init(ARES_LIB_INIT_ALL);
  (void)status;
}

// One of the two lookups and what it found: each address as its family and
// its bytes, which sort in numeric order.
struct Lookup {
  int family;
  bool done = false;
  int status = ARES_SUCCESS;
  std::vector<std::pair<int, std::string>> addresses;
};

void OnAnswer(void* arg, int status, int /*timeouts*/, unsigned char* answer,
              int length) {
  auto* lookup = static_cast<Lookup*>(arg);
  lookup->done = true;
  lookup->status = status;
  if (status != ARES_SUCCESS) return;
  hostent* host = nullptr;
  const int parsed =
      lookup->family == AF_INET
          ? ares_parse_a_reply(answer, length, &host, nullptr, nullptr)
          : ares_parse_aaaa_reply(answer, length, &host, nullptr, nullptr);
  if (parsed != ARES_SUCCESS) {
    lookup->status = parsed;
    return;
  }
  for (char** address = host->h_addr_list;
       address != nullptr && *address != nullptr; ++address) {
    lookup->addresses.emplace_back(lookup->family,
                                   std::string(*address, host->h_length));
  }
  ares_free_hostent(host);
}

// Neither an answer nor "no such records": the lookup itself failed.
bool LookupFailed(const Lookup& lookup) {
  return lookup.status != ARES_SUCCESS && lookup.status != ARES_ENODATA &&
         lookup.status != ARES_ENOTFOUND;
}

std::string Numeric(int family, const std::string& bytes) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, bytes.data(), text, sizeof(text));
  return text;
}

// Waits for c-ares' sockets (or its next timeout, or the next look at the stop
// flag) and lets it process what happened. False with `error` set when poll
// itself fails.
bool Step(ares_channel channel, Steady::time_point deadline,
          std::string* error) {
  ares_socket_t sockets[ARES_GETSOCK_MAXNUM];
  const int bits = ares_getsock(channel, sockets, ARES_GETSOCK_MAXNUM);
  pollfd fds[ARES_GETSOCK_MAXNUM];
  int count = 0;
  for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
    const bool read = ARES_GETSOCK_READABLE(bits, i);
    const bool write = ARES_GETSOCK_WRITABLE(bits, i);
    if (!read && !write) continue;
    fds[count++] = pollfd{
        sockets[i],
        static_cast<short>((read ? POLLIN : 0) | (write ? POLLOUT : 0)), 0};
  }
  milliseconds wait = std::min(
      kStopPoll, std::chrono::ceil<milliseconds>(deadline - Steady::now()));
  timeval longest{0, static_cast<suseconds_t>(wait.count() * 1000)};
  timeval next{};
  if (const timeval* due = ares_timeout(channel, &longest, &next)) {
    wait = std::min(
        wait, milliseconds(due->tv_sec * 1000 + (due->tv_usec + 999) / 1000));
  }
  const int ready =
      poll(fds, count, static_cast<int>(std::max<int64_t>(0, wait.count())));
  if (ready < 0 && errno != EINTR) {
    *error = absl::StrCat("poll: ", strerror(errno));
    return false;
  }
  if (ready <= 0) {
    // Only timeouts to process.
    ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    return true;
  }
  for (int i = 0; i < count; ++i) {
    const short events = fds[i].revents;
    if (events == 0) continue;
    ares_process_fd(channel,
                    (events & (POLLIN | POLLERR | POLLHUP)) != 0
                        ? fds[i].fd
                        : ARES_SOCKET_BAD,
                    (events & POLLOUT) != 0 ? fds[i].fd : ARES_SOCKET_BAD);
  }
  return true;
}

}  // namespace

DnsSource::DnsSource(DnsSourceConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::vector<HostPort>> DnsSource::Fetch(
    const RequestLimits& limits) {
  InitAres();
  const std::string server =
      config_.nameserver
          ? absl::StrCat("DNS server ", config_.nameserver->ToString())
          : "the system's DNS servers";
  // Declared before the channel: destroying the channel calls back into them.
  Lookup a{AF_INET};
  Lookup aaaa{AF_INET6};
  ares_options options{};
  // A try each quarter of the time the lookup has (c-ares doubles it for each
  // round of tries); the deadline below ends it in any case.
  const auto budget =
      std::chrono::duration_cast<milliseconds>(limits.deadline - Steady::now());
  options.timeout =
      static_cast<int>(std::clamp<int64_t>(budget.count() / 4, 100, 5000));
  options.tries = 3;
  ares_channel raw = nullptr;
  if (const int status = ares_init_options(&raw, &options,
                                           ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
      status != ARES_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("cannot start a DNS lookup of ",
                                               config_.name, ": ",
                                               ares_strerror(status)));
  }
  std::unique_ptr<ares_channeldata, void (*)(ares_channel)> channel(
      raw, ares_destroy);
  if (config_.nameserver) {
    const int status =
        ares_set_servers_ports_csv(raw, config_.nameserver->ToString().c_str());
    if (status != ARES_SUCCESS) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot use ", server, ": ", ares_strerror(status)));
    }
  }
  ares_search(raw, config_.name.c_str(), kClassIn, kTypeA, OnAnswer, &a);
  ares_search(raw, config_.name.c_str(), kClassIn, kTypeAaaa, OnAnswer, &aaaa);
  while (!a.done || !aaaa.done) {
    if (limits.stopped()) {
      ares_cancel(raw);
      return absl::CancelledError(
          absl::StrCat("lookup of ", config_.name, " stopped"));
    }
    if (Steady::now() >= limits.deadline) {
      ares_cancel(raw);
      return absl::DeadlineExceededError(
          absl::StrCat(config_.name, ": no answer from ", server, " within ",
                       budget.count(), "ms"));
    }
    std::string error;
    if (!Step(raw, limits.deadline, &error)) {
      ares_cancel(raw);
      return absl::InternalError(
          absl::StrCat("lookup of ", config_.name, ": ", error));
    }
  }
  for (const Lookup* lookup : {&a, &aaaa}) {
    if (LookupFailed(*lookup)) {
      return absl::UnavailableError(absl::StrCat(
          config_.name, " (", lookup->family == AF_INET ? "A" : "AAAA",
          "): ", server, ": ", ares_strerror(lookup->status)));
    }
  }
  std::vector<std::pair<int, std::string>> found = a.addresses;
  found.insert(found.end(), aaaa.addresses.begin(), aaaa.addresses.end());
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat(config_.name, ": no A or AAAA records at ", server));
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  std::vector<HostPort> learners;
  learners.reserve(found.size());
  for (const auto& [family, bytes] : found) {
    learners.push_back(HostPort::Tcp(Numeric(family, bytes), config_.port));
  }
  return learners;
}

}  // namespace aggregator
