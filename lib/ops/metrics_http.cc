#include "lib/ops/metrics_http.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr std::chrono::milliseconds kStartTimeout(5000);

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const HostPort& listen, const MetricsRegistry* registry) {
  if (listen.is_unix()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.listen '", listen.ToString(),
                     "': unix sockets are not served"));
  }
  const std::string& host = listen.host;
  const int port = listen.port;
  std::unique_ptr<MetricsHttpServer> self(new MetricsHttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  self->server_->Get("/metrics", [registry](const httplib::Request&,
                                            httplib::Response& response) {
    response.set_content(registry->Render(),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
  self->server_->Get("/", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("aggregatord metrics: GET /metrics\n", "text/plain");
  });
  if (port == 0) {
    self->port_ = self->server_->bind_to_any_port(host);
  } else {
    self->port_ = self->server_->bind_to_port(host, port) ? port : -1;
  }
  if (self->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on '",
                                               listen.ToString(),
                                               "': address invalid or in use"));
  }
  httplib::Server* server = self->server_.get();
  self->thread_ = std::thread([server] { server->listen_after_bind(); });
  // httplib's stop() does nothing until the listen loop runs, and the loop
  // would then block in accept() forever: return only once it runs. httplib
  // has no notification for that, so poll its flag, with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!server->is_running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      self->server_->stop();
      return absl::DeadlineExceededError(
          absl::StrCat("the metrics server on '", listen.ToString(),
                       "' did not start within ", kStartTimeout.count(), "ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace aggregator
