// MetricsEndpoint: serves metrics as Prometheus text on GET /metrics, with
// prometheus-cpp's Exposer (civetweb) on threads of its own, and optionally a
// read-only HTML page on GET / (the status page; scripts refused by its
// Content-Security-Policy).
//
// Thread-safety: Start and Stop from one thread; scrapes run on the server's
// threads.
#ifndef LIB_OPS_METRICS_ENDPOINT_H_
#define LIB_OPS_METRICS_ENDPOINT_H_

#include <prometheus/collectable.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/host_port.h"

namespace prometheus {
class Exposer;
}

namespace aggregator {

class MetricsEndpoint {
 public:
  // An HTML document, rendered for each GET /.
  using Page = std::function<std::string()>;

  // Binds `listen` (TCP; port 0 picks one) and serves `metrics`, and `page`
  // (unless empty) on GET /. UNAVAILABLE naming the address when it cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const HostPort& listen, std::shared_ptr<prometheus::Collectable> metrics,
      Page page = nullptr);
  ~MetricsEndpoint();

  // The bound port.
  int port() const { return port_; }
  // Stops serving: returns once the server's threads have ended, or at
  // `deadline` (a client that holds a request open cannot hold the caller; the
  // server then finishes stopping on a thread of its own, which owns it).
  // The page is never rendered once Stop has begun. Returns whether it stopped
  // in time. The destructor stops with a 2 s bound.
  bool Stop(std::chrono::steady_clock::time_point deadline);

 private:
  MetricsEndpoint() = default;
  std::shared_ptr<prometheus::Exposer> exposer_;
  HostPort dial_;  // where a client on this host reaches the listener
  int port_ = 0;
  bool page_registered_ = false;
};

}  // namespace aggregator

#endif  // LIB_OPS_METRICS_ENDPOINT_H_
