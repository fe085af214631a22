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
#include "lib/base/port_holder.h"

namespace aggregator {
namespace {

// Two scrapes at once are plenty for one daemon.
constexpr char kThreads[] = "2";
// A client that has not sent its request by then is dropped.
constexpr char kRequestTimeoutMs[] = "10000";
// How often Stop knocks on the listener while civetweb stops.
constexpr std::chrono::milliseconds kKnockPeriod(5);
constexpr std::chrono::seconds kDestructorStop(2);

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
    const std::string holder = DescribePortHolder(listen.port);
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", listen.ToString(), "': ",
        holder.empty() ? "the address is invalid or in use"
                       : absl::StrCat("already in use by ", holder),
        " (", e.what(), ")"));
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

MetricsEndpoint::~MetricsEndpoint() {
  Stop(std::chrono::steady_clock::now() + kDestructorStop);
}

bool MetricsEndpoint::Stop(std::chrono::steady_clock::time_point deadline) {
  if (exposer_ == nullptr) return true;
  // civetweb's accept loop looks at its stop flag only between polls of the
  // listener, which wait up to 2 s: knocking on the listener ends the wait.
  // Its workers finish the requests they serve first, so a slow client could
  // hold the stop: the stopping thread owns the server and may outlive us.
  auto stopped = std::make_shared<std::atomic<bool>>(false);
  std::thread stopper([exposer = std::move(exposer_), stopped]() mutable {
    exposer.reset();
    stopped->store(true);
  });
  while (!stopped->load()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      stopper.detach();
      return false;
    }
    Knock(dial_);
    std::this_thread::sleep_for(kKnockPeriod);
  }
  stopper.join();
  return true;
}

}  // namespace aggregator
