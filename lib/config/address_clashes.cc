#include "lib/config/address_clashes.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

bool IsLocalhostName(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1";
}

// Whether sockets bound at `a` and at `b` would share an address: the same
// unix path, or one TCP port on hosts that overlap (equal, either a wildcard,
// or "localhost" beside 127.0.0.1 or ::1).
bool SameSocket(const HostPort& a, const HostPort& b) {
  if (a.is_unix() || b.is_unix()) return a.path == b.path;
  if (a.port == 0 || a.port != b.port) return false;
  return a.host == b.host || a.IsWildcard() || b.IsWildcard() ||
         (IsLocalhostName(a.host) && IsLocalhostName(b.host) &&
          (a.host == "localhost" || b.host == "localhost"));
}

std::string Quoted(const HostPort& address) {
  return absl::StrCat("\"", address.ToString(), "\"");
}

struct Listener {
  AddressUser user;
  const char* name;
  HostPort address;
};

std::string WorkerKey(size_t index) {
  return absl::StrCat("workers[", index, "].port_base");
}

std::string LearnerKey(size_t index) {
  return absl::StrCat("learners[", index, "].address");
}

}  // namespace

std::vector<AddressClash> FindAddressClashes(const AggregatorConfig& config) {
  std::vector<Listener> listeners = {
      {{AddressUser::kListen}, "listen", config.listen}};
  if (config.metrics.listen) {
    listeners.push_back({{AddressUser::kMetricsListen},
                         "metrics.listen",
                         *config.metrics.listen});
  }
  if (config.admin.listen) {
    listeners.push_back(
        {{AddressUser::kAdminListen}, "admin.listen", *config.admin.listen});
  }
  std::vector<AddressClash> clashes;
  for (size_t i = 0; i < listeners.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (SameSocket(listeners[i].address, listeners[j].address)) {
        clashes.push_back(
            {listeners[i].user, listeners[j].user, listeners[i].name,
             absl::StrCat("the same socket as ", listeners[j].name, " (",
                          Quoted(listeners[j].address),
                          "): each listener needs its own")});
      }
    }
  }
  // A worker's ports are taken on this host, whatever address it binds.
  for (size_t w = 0; w < config.workers.size(); ++w) {
    const WorkerSpec& worker = config.workers[w];
    if (worker.port_base == 0 || worker.replicas == 0) continue;
    const int64_t last = int64_t{worker.port_base} + worker.replicas - 1;
    for (const Listener& listener : listeners) {
      const HostPort& address = listener.address;
      if (address.is_unix() || address.port < worker.port_base ||
          address.port > last) {
        continue;
      }
      clashes.push_back(
          {{AddressUser::kWorker, w},
           listener.user,
           WorkerKey(w),
           absl::StrCat("ports ", worker.port_base, "-", last, " of worker \"",
                        worker.name, "\" include the port of ", listener.name,
                        " (", Quoted(address), ")")});
    }
  }
  for (size_t l = 0; l < config.learners.size(); ++l) {
    const HostPort& address = config.learners[l].address;
    for (const Listener& listener : listeners) {
      // A learner on this host: loopback, the same path, or the listener's
      // own host; a wildcard listener answers on every loopback address.
      const bool here =
          address.is_unix() || address.host == listener.address.host ||
          (address.IsLoopback() &&
           (listener.address.IsWildcard() || listener.address.IsLoopback()));
      HostPort bound = listener.address;
      if (bound.IsWildcard() && !address.is_unix()) bound.host = address.host;
      if (!here || !SameSocket(address, bound)) continue;
      clashes.push_back(
          {{AddressUser::kLearner, l},
           listener.user,
           LearnerKey(l),
           absl::StrCat(Quoted(address), " is this aggregator's own ",
                        listener.name,
                        ": its calls would come back here; remove it")});
    }
    if (address.is_unix() || !IsLocalhostName(address.host)) continue;
    for (size_t w = 0; w < config.workers.size(); ++w) {
      const WorkerSpec& worker = config.workers[w];
      if (!worker.learner || worker.port_base == 0) continue;
      const int index = address.port - worker.port_base;
      if (index < 0 || index >= worker.replicas) continue;
      clashes.push_back(
          {{AddressUser::kLearner, l},
           {AddressUser::kWorker, w},
           LearnerKey(l),
           absl::StrCat(Quoted(address), " is replica ", index,
                        " of learner worker \"", worker.name,
                        "\", which joins the learners by itself as \"",
                        worker.name, "-", index, "\"")});
    }
  }
  return clashes;
}

std::string PlaintextRefusal(const AggregatorConfig& config,
                             const HostPort& address) {
  if (config.tls || config.allow_insecure || address.IsLoopback()) return "";
  return absl::StrCat("plaintext on \"", address.ToString(),
                      "\", which other hosts can reach: set tls (cert and "
                      "key), or allow_insecure: true to accept it");
}

}  // namespace aggregator
