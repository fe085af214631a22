#include "lib/discovery/dns_lookup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a lookup in progress looks at RequestLimits::stop.
constexpr milliseconds kStopPoll{50};

// c-ares' process-wide set-up (nothing to do on Linux, but its contract).
void InitAres() {
  static const int status = ares_library_init(ARES_LIB_INIT_ALL);
  (void)status;
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
  timeval longest{
      0, static_cast<suseconds_t>(std::max<int64_t>(0, wait.count()) * 1000)};
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

// What ares_getaddrinfo found: numeric addresses, in its order, each once.
struct Addresses {
  bool done = false;
  int status = ARES_SUCCESS;
  std::vector<std::string> found;
};

void OnAddresses(void* arg, int status, int /*timeouts*/,
                 ares_addrinfo* result) {
  auto* addresses = static_cast<Addresses*>(arg);
  addresses->done = true;
  addresses->status = status;
  if (result == nullptr) return;
  for (const ares_addrinfo_node* node = result->nodes; node != nullptr;
       node = node->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* bytes =
        node->ai_family == AF_INET
            ? static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in*>(node->ai_addr)
                       ->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(node->ai_addr)
                       ->sin6_addr);
    if (inet_ntop(node->ai_family, bytes, text, sizeof(text)) == nullptr) {
      continue;
    }
    if (std::find(addresses->found.begin(), addresses->found.end(), text) ==
        addresses->found.end()) {
      addresses->found.emplace_back(text);
    }
  }
  ares_freeaddrinfo(result);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DnsLookup>> DnsLookup::Start(
    const std::optional<HostPort>& nameserver, const RequestLimits& limits) {
  InitAres();
  std::string server = nameserver
                           ? absl::StrCat("DNS server ", nameserver->ToString())
                           : "the system's DNS servers";
  // A try each quarter of the time the lookup has (c-ares doubles it for each
  // round of tries); Wait's deadline ends it in any case.
  const auto budget =
      std::chrono::ceil<milliseconds>(limits.deadline - Steady::now());
  ares_options options{};
  options.timeout =
      static_cast<int>(std::clamp<int64_t>(budget.count() / 4, 100, 5000));
  options.tries = 3;
  int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  char dns_only[] = "b";
  if (nameserver) {
    // No search list: ares_search obeys the flag, ares_getaddrinfo only an
    // empty list (c-ares 1.18).
    options.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES;
    options.domains = nullptr;
    options.ndomains = 0;
    options.lookups = dns_only;
    mask |= ARES_OPT_FLAGS | ARES_OPT_DOMAINS | ARES_OPT_LOOKUPS;
  }
  ares_channel channel = nullptr;
  if (const int status = ares_init_options(&channel, &options, mask);
      status != ARES_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("cannot start a DNS lookup: ", ares_strerror(status)));
  }
  if (nameserver) {
    const int status =
        ares_set_servers_ports_csv(channel, nameserver->ToString().c_str());
    if (status != ARES_SUCCESS) {
      ares_destroy(channel);
      return absl::InvalidArgumentError(
          absl::StrCat("cannot use ", server, ": ", ares_strerror(status)));
    }
  }
  return std::unique_ptr<DnsLookup>(
      new DnsLookup(channel, std::move(server), limits, budget));
}

DnsLookup::DnsLookup(ares_channel channel, std::string server,
                     RequestLimits limits, milliseconds budget)
    : channel_(channel),
      server_(std::move(server)),
      limits_(limits),
      budget_(budget) {}

DnsLookup::~DnsLookup() { ares_destroy(channel_); }

absl::Status DnsLookup::Wait(const std::string& name,
                             const std::function<bool()>& done) {
  while (!done()) {
    if (limits_.stopped()) {
      ares_cancel(channel_);
      return absl::CancelledError(absl::StrCat("lookup of ", name, " stopped"));
    }
    if (Steady::now() >= limits_.deadline) {
      ares_cancel(channel_);
      return absl::DeadlineExceededError(absl::StrCat(name, ": no answer from ",
                                                      server_, " within ",
                                                      budget_.count(), "ms"));
    }
    std::string error;
    if (!Step(channel_, limits_.deadline, &error)) {
      ares_cancel(channel_);
      return absl::InternalError(absl::StrCat("lookup of ", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::string DnsFailure(int status, const std::string& server,
                       const std::string& name) {
  if (status == ARES_ECONNREFUSED) {
    return absl::StrCat(server, " refused or failed the query for ", name,
                        " (SERVFAIL, REFUSED or NOTIMP), or could not be "
                        "reached");
  }
  return absl::StrCat(server, ": ", ares_strerror(status));
}

absl::StatusOr<std::vector<std::string>> ResolveHost(
    const std::string& host, const RequestLimits& limits,
    const std::optional<HostPort>& nameserver) {
  if (IsIpAddress(host)) return std::vector<std::string>{host};
  // Before the lookup: destroying its channel calls back into it.
  Addresses addresses;
  absl::StatusOr<std::unique_ptr<DnsLookup>> lookup =
      DnsLookup::Start(nameserver, limits);
  if (!lookup.ok()) {
    return absl::Status(lookup.status().code(),
                        absl::StrCat(host, ": ", lookup.status().message()));
  }
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  ares_getaddrinfo((*lookup)->channel(), host.c_str(), nullptr, &hints,
                   OnAddresses, &addresses);
  if (absl::Status waited =
          (*lookup)->Wait(host, [&] { return addresses.done; });
      !waited.ok()) {
    return waited;
  }
  if (addresses.status == ARES_ENOTFOUND || addresses.status == ARES_ENODATA ||
      (addresses.status == ARES_SUCCESS && addresses.found.empty())) {
    return absl::NotFoundError(
        absl::StrCat(host, ": no such host at ", (*lookup)->server()));
  }
  if (addresses.status != ARES_SUCCESS) {
    return absl::UnavailableError(absl::StrCat(
        host, ": ", DnsFailure(addresses.status, (*lookup)->server(), host)));
  }
  return addresses.found;
}

}  // namespace aggregator
