#include "lib/ops/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

// Two scrapes at once are plenty for one daemon.
constexpr char kThreads[] = "2";
// A client that has not sent its request by then is dropped.
constexpr char kRequestTimeoutMs[] = "10000";
// How often Stop knocks on the listener while civetweb stops.
constexpr std::chrono::milliseconds kKnockPeriod(5);

// Opens and closes one connection to `address` (a numeric host), so a server
// blocked in poll() on its listener wakes up.
void Knock(const HostPort& address) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.host.c_str(), std::to_string(address.port).c_str(),
                  &hints, &found) != 0) {
    return;
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    (void)connect(fd, found->ai_addr, found->ai_addrlen);
    close(fd);
  }
  freeaddrinfo(found);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const HostPort& listen, std::shared_ptr<prometheus::Collectable> metrics) {
  if (listen.is_unix()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.listen '", listen.ToString(),
                     "': the metrics endpoint serves TCP only"));
  }
  std::unique_ptr<MetricsEndpoint> self(new MetricsEndpoint());
  try {
    self->exposer_ =
        std::make_unique<prometheus::Exposer>(std::vector<std::string>{
            "listening_ports", listen.ToString(), "num_threads", kThreads,
            "request_timeout_ms", kRequestTimeoutMs});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on '", listen.ToString(),
                     "': the address is invalid or in use (", e.what(), ")"));
  }
  self->exposer_->RegisterCollectable(metrics);
  const std::vector<int> ports = self->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", listen.ToString(), "': nothing bound"));
  }
  self->port_ = ports.front();
  self->dial_ = listen.WithPort(self->port_).Dialable();
  return self;
}

MetricsEndpoint::~MetricsEndpoint() { Stop(); }

void MetricsEndpoint::Stop() {
  if (exposer_ == nullptr) return;
  // civetweb's accept loop looks at its stop flag only between polls of the
  // listener, which wait up to 2 s: knocking on the listener ends the wait.
  std::atomic<bool> stopped{false};
  std::thread stopper([this, &stopped] {
    exposer_.reset();
    stopped = true;
  });
  while (!stopped) {
    Knock(dial_);
    std::this_thread::sleep_for(kKnockPeriod);
  }
  stopper.join();
}

}  // namespace aggregator
