// The addresses of one configuration that would collide on this host: two of
// the daemon's listeners on one socket (with exclusive binds the second fails;
// with metrics.listen equal to listen every gRPC call reached the HTTP
// server), a listener inside a worker's ports, a listed learner that is one of
// the daemon's own listeners (its calls would come back) or a replica of a
// learner worker (counted twice). The loader reports each as a configuration
// error; the daemon checks again after --listen. Also: which listeners may
// not be served in plaintext.
#ifndef LIB_CONFIG_ADDRESS_CLASHES_H_
#define LIB_CONFIG_ADDRESS_CLASHES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "lib/config/config.h"

namespace aggregator {

// One party to a clash: a listener, a worker's ports or a listed learner.
struct AddressUser {
  enum Kind { kListen, kMetricsListen, kAdminListen, kWorker, kLearner };
  Kind kind = kListen;
  size_t index = 0;  // kWorker: workers[index]; kLearner: learners[index]
};

struct AddressClash {
  AddressUser user;   // the one the error is reported at
  AddressUser other;  // what it collides with
  // The user's key: "metrics.listen", "workers[0].port_base",
  // "learners[2].address".
  std::string user_key;
  // "the same socket as listen (\"127.0.0.1:22272\")": what `user` collides
  // with, to follow "<user's field>: ".
  std::string message;
};

// Every clash, each reported once (at the later of the two in the order
// listen, metrics.listen, admin.listen, workers, learners).
std::vector<AddressClash> FindAddressClashes(const AggregatorConfig& config);

// Why `address` may not be served in plaintext under `config` (no tls, no
// allow_insecure, and other hosts can reach it), or "" when it may. The
// loader reports it at listen and admin.listen; the daemon for --listen.
std::string PlaintextRefusal(const AggregatorConfig& config,
                             const HostPort& address);

}  // namespace aggregator

#endif  // LIB_CONFIG_ADDRESS_CLASHES_H_
