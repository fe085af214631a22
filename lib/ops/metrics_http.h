// MetricsHttpServer: serves a MetricsRegistry as Prometheus text on GET
// /metrics (cpp-httplib), on its own thread.
//
// Thread-safety: Start/Stop from one thread; scrapes run on the server's
// threads. Ownership: the registry must outlive the server.
#ifndef LIB_OPS_METRICS_HTTP_H_
#define LIB_OPS_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "lib/base/host_port.h"
#include "lib/ops/metrics.h"

namespace httplib {
class Server;
}

namespace aggregator {

class MetricsHttpServer {
 public:
  // Binds `listen` ("host:port"; port 0 picks one) and serves.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const HostPort& listen, const MetricsRegistry* registry);
  ~MetricsHttpServer();

  int port() const { return port_; }
  void Stop();

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace aggregator

#endif  // LIB_OPS_METRICS_HTTP_H_
