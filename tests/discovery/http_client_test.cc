// HttpCall (the orchestrator source's HTTP client) against a server in the
// test whose reply head never ends, over HTTP and HTTPS: the call fails at the
// head's bounds, at once, naming them (issue 26 item 2), and a learner source
// failing so keeps its learners.
#include "lib/discovery/http_client.h"

#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "lib/discovery/discovery_loop.h"
#include "lib/discovery/orchestrator_source.h"
#include "tests/testing/loopback_listener.h"
#include "tests/testing/process_helpers.h"
#include "tests/testing/tls_certificates.h"

namespace aggregator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

constexpr char kReplicas[] = "/v1alpha1/replicas?namespace=ns&aggregator=agg-0";

// A server on 127.0.0.1 (port 0), one connection at a time. It answers with
// the orchestrator's reply listing learner-0.ns:22300, or, once endless, with
// a status line and then `line` again and again, until the client goes (or
// 30 s). With `tls`, over TLS with the test certificate for localhost.
class EndlessHead {
 public:
  explicit EndlessHead(bool tls) {
    // The client's close fails our next write: EPIPE, not SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    if (tls) {
      ctx_ = SSL_CTX_new(TLS_server_method());
      REQUIRE(ctx_ != nullptr);
      REQUIRE(SSL_CTX_use_certificate_chain_file(
                  ctx_, Certs().Path("server.crt").c_str()) == 1);
      REQUIRE(SSL_CTX_use_PrivateKey_file(ctx_,
                                          Certs().Path("server.key").c_str(),
                                          SSL_FILETYPE_PEM) == 1);
    }
    listener_ = testing::ListenOnLoopback(16, &port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~EndlessHead() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);  // wakes accept
    thread_.join();
    close(listener_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  }

  std::string url() const {
    return std::string(ctx_ != nullptr ? "https://localhost:"
                                       : "http://127.0.0.1:") +
           std::to_string(port_);
  }
  void SetEndless(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    endless_ = true;
    line_ = std::move(line);
  }

 private:
  void Run() {
    while (!stop_) {
      const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;  // the listener shut down, or EINTR
      SSL* ssl = nullptr;
      if (ctx_ != nullptr) {
        ssl = SSL_new(ctx_);
        SSL_set_fd(ssl, client);
        if (SSL_accept(ssl) != 1) {
          SSL_free(ssl);
          close(client);
          continue;
        }
      }
      Serve(client, ssl);
      if (ssl != nullptr) SSL_free(ssl);
      close(client);
    }
  }

  // Writes all of `data`; false once the client has gone.
  bool Write(int client, SSL* ssl, const std::string& data) {
    const int n =
        ssl != nullptr
            ? SSL_write(ssl, data.data(), static_cast<int>(data.size()))
            : static_cast<int>(
                  send(client, data.data(), data.size(), MSG_NOSIGNAL));
    return n == static_cast<int>(data.size());
  }

  void Serve(int client, SSL* ssl) {
    // The request: its head, in one read (enough for HttpCall's GET).
    char request[4096];
    if ((ssl != nullptr ? SSL_read(ssl, request, sizeof(request))
                        : recv(client, request, sizeof(request), 0)) <= 0) {
      return;
    }
    bool endless;
    std::string line;
    {
      std::lock_guard<std::mutex> lock(mu_);
      endless = endless_;
      line = line_;
    }
    if (!endless) {
      const std::string body =
          R"({"success": true, "code": 0, "message": "", "data": )"
          R"({"learners": ["learner-0.ns:22300"]}})";
      Write(client, ssl,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Connection: close\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
      return;
    }
    // 64 lines to a write.
    std::string lines;
    for (int i = 0; i < 64; ++i) lines += line;
    if (!Write(client, ssl, "HTTP/1.1 200 OK\r\n")) return;
    const auto until = Clock::now() + seconds(30);
    while (!stop_ && Clock::now() < until && Write(client, ssl, lines)) {
    }
  }

  SSL_CTX* ctx_ = nullptr;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  bool endless_ = false;
  std::string line_;
};

// The most memory this process has held (VmHWM), in MB.
double PeakMegabytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      status >> kb;
      return kb / 1024;
    }
    status.ignore(1 << 20, '\n');
  }
  return -1;
}

TEST_CASE(
    "A reply whose head never ends fails at once at the head's bounds "
    "(64 KiB, 200 lines, 8 KiB a line), over HTTP and HTTPS, naming the "
    "bound and the URL (issue 26 item 2: it ran to the timeout, growing)") {
  // HttpCall's TLS client trusts OpenSSL's default verify paths: the test CA.
  REQUIRE(setenv("SSL_CERT_FILE", Certs().Path("ca.crt").c_str(), 1) == 0);
  for (const bool tls : {false, true}) {
    EndlessHead server(tls);
    const std::string url = server.url() + kReplicas;
    auto ok = HttpCall("GET", url, "", {Clock::now() + seconds(10)});
    INFO(url << ": " << ok.status().ToString());
    REQUIRE(ok.ok());
    CHECK(ok->status == 200);
    struct Case {
      std::string line;
      std::string refused;
    };
    for (const Case& c : {
             Case{"X-Filler: 1\r\n",
                  "the reply's header has more than 200 lines"},
             Case{"X-Filler: " + std::string(1000, 'x') + "\r\n",
                  "the reply's header is larger than 64 KiB"},
             // No line end: cpp-httplib would buffer it whole first.
             Case{std::string(1000, 'x'),
                  "a line of the reply's header is longer than 8 KiB"},
         }) {
      server.SetEndless(c.line);
      const double peak = PeakMegabytes();
      const auto start = Clock::now();
      auto failed = HttpCall("GET", url, "", {Clock::now() + seconds(10)});
      const double took = Seconds(Clock::now() - start);
      INFO(url << " " << c.refused << ": " << failed.status().ToString());
      CHECK(took < 3.0);
      CHECK(failed.status().code() == absl::StatusCode::kResourceExhausted);
      CHECK_THAT(std::string(failed.status().message()),
                 Catch::StartsWith("GET " + url + ": " + c.refused));
      std::printf(
          "%s, endless head of %zu-byte lines: failed after %.3f s, peak "
          "RSS %.0f MB -> %.0f MB: %s\n",
          tls ? "HTTPS" : "HTTP", c.line.size(), took, peak, PeakMegabytes(),
          std::string(failed.status().message()).c_str());
    }
  }
}

TEST_CASE(
    "An orchestrator whose reply head never ends fails the refresh, naming "
    "the bound, and the source keeps its learners") {
  EndlessHead server(/*tls=*/false);
  OrchestratorSourceConfig config;
  config.url = server.url();
  config.pod_namespace = "ns";
  config.name = "agg-0";
  config.refresh = milliseconds(100);
  config.timeout = seconds(10);
  DiscoveryLoop loop;
  loop.Apply({config});
  const std::vector<std::vector<HostPort>> members = {
      {HostPort::Tcp("learner-0.ns", 22300)}};
  REQUIRE(Eventually([&] { return loop.Members() == members; }));
  server.SetEndless("X-Filler: 1\r\n");
  const auto start = Clock::now();
  const int64_t errors = loop.Status().at(0).errors;
  REQUIRE(Eventually([&] { return loop.Status().at(0).errors > errors; }));
  CHECK(Seconds(Clock::now() - start) < 3.0);
  CHECK_THAT(loop.Status().at(0).last_error,
             Catch::Contains("GET " + server.url() + kReplicas +
                             ": the reply's header has more than 200 lines"));
  CHECK(loop.Members() == members);  // kept
}

}  // namespace
}  // namespace aggregator::testing
