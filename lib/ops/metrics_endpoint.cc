#include "lib/ops/metrics_endpoint.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "lib/base/mutex.h"
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

// The pages served, by listening port. civetweb's begin_request callback has
// no context of ours (prometheus-cpp passes none), but knows the port.
struct PageRegistry {
  Mutex mu;
  std::map<int, MetricsEndpoint::Page> pages ABSL_GUARDED_BY(mu);
};
PageRegistry& Pages() {
  static auto* registry = new PageRegistry();
  return *registry;
}

// Scripts, frames, forms and every fetch refused: the page shows text from
// peers (learner ids, error texts), which it escapes; this is the second
// line. Inline styles are its own.
constexpr char kPageHeaders[] =
    "Content-Type: text/html; charset=utf-8\r\n"
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Cache-Control: no-store\r\n";

// GET / (or HEAD /): the page of the endpoint on this port; 0 leaves the
// request to the Exposer (which serves /metrics, and 404 elsewhere).
int ServePage(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || request->local_uri == nullptr ||
      std::strcmp(request->local_uri, "/") != 0) {
    return 0;
  }
  const bool head = std::strcmp(request->request_method, "HEAD") == 0;
  if (!head && std::strcmp(request->request_method, "GET") != 0) {
    mg_printf(connection,
              "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n"
              "Content-Length: 0\r\nConnection: close\r\n\r\n");
    return 405;
  }
  std::string body;
  {
    // Rendered under the lock, so Stop's unregistering waits for it; written
    // after, so a slow client holds no lock.
    PageRegistry& registry = Pages();
    MutexLock lock(&registry.mu);
    auto page = registry.pages.find(request->server_port);
    if (page == registry.pages.end()) return 0;
    body = page->second();
  }
  const std::string head_lines = absl::StrCat(
      "HTTP/1.1 200 OK\r\n", kPageHeaders, "Content-Length: ", body.size(),
      "\r\nConnection: close\r\n\r\n");
  mg_write(connection, head_lines.data(), head_lines.size());
  if (!head) mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const HostPort& listen, std::shared_ptr<prometheus::Collectable> metrics,
    Page page) {
  if (listen.is_unix()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.listen '", listen.ToString(),
                     "': the metrics endpoint serves TCP only"));
  }
  std::unique_ptr<MetricsEndpoint> self(new MetricsEndpoint());
  CivetCallbacks callbacks;
  callbacks.begin_request = ServePage;
  try {
    self->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", listen.ToString(),
                                 "num_threads", kThreads, "request_timeout_ms",
                                 kRequestTimeoutMs},
        &callbacks);
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
  if (page) {
    PageRegistry& registry = Pages();
    MutexLock lock(&registry.mu);
    registry.pages[self->port_] = std::move(page);
    self->page_registered_ = true;
  }
  return self;
}

MetricsEndpoint::~MetricsEndpoint() {
  Stop(std::chrono::steady_clock::now() + kDestructorStop);
}

bool MetricsEndpoint::Stop(std::chrono::steady_clock::time_point deadline) {
  if (page_registered_) {
    PageRegistry& registry = Pages();
    MutexLock lock(&registry.mu);
    registry.pages.erase(port_);
    page_registered_ = false;
  }
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
