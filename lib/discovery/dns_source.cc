#include "lib/discovery/dns_source.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/discovery/dns_lookup.h"

namespace aggregator {
namespace {

constexpr int kClassIn = 1;  // ns_c_in
constexpr int kTypeA = 1;    // ns_t_a
constexpr int kTypeAaaa = 28;

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

}  // namespace

DnsSource::DnsSource(DnsSourceConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::vector<HostPort>> DnsSource::Fetch(
    const RequestLimits& limits) {
  // Declared before the lookup: destroying its channel calls back into them.
  Lookup a{AF_INET};
  Lookup aaaa{AF_INET6};
  absl::StatusOr<std::unique_ptr<DnsLookup>> lookup =
      DnsLookup::Start(config_.nameserver, limits);
  if (!lookup.ok()) {
    return absl::Status(
        lookup.status().code(),
        absl::StrCat(config_.name, ": ", lookup.status().message()));
  }
  const ares_channel channel = (*lookup)->channel();
  const std::string& server = (*lookup)->server();
  ares_search(channel, config_.name.c_str(), kClassIn, kTypeA, OnAnswer, &a);
  ares_search(channel, config_.name.c_str(), kClassIn, kTypeAaaa, OnAnswer,
              &aaaa);
  if (absl::Status waited =
          (*lookup)->Wait(config_.name, [&] { return a.done && aaaa.done; });
      !waited.ok()) {
    return waited;
  }
  for (const Lookup* answer : {&a, &aaaa}) {
    if (LookupFailed(*answer)) {
      return absl::UnavailableError(absl::StrCat(
          config_.name, " (", answer->family == AF_INET ? "A" : "AAAA",
          "): ", DnsFailure(answer->status, server, config_.name)));
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
