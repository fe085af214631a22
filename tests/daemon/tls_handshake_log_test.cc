// Junk on aggregatord's TLS listener (issue 26 item 8): every connection
// fails its handshake and gRPC logs an error line for each. The daemon writes
// the first few, then one line counting the rest, and counts every failure in
// aggregator_tls_handshake_failures_total.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process_helpers.h"
#include "tests/testing/tls_certificates.h"

using namespace aggregator::testing;

namespace {

constexpr char kDaemon[] = "daemon/aggregatord";

// The daemon's stderr lines, read on a thread of their own so a flood never
// fills the pipe while the test connects.
class StderrLines {
 public:
  explicit StderrLines(aggregator::Subprocess& process)
      : reader_([this, &process] {
          while (true) {
            auto line = process.ReadLine(
                std::chrono::steady_clock::now() + std::chrono::minutes(2),
                /*from_stderr=*/true);
            std::lock_guard<std::mutex> lock(mu_);
            if (!line.ok()) {
              ended_ = true;
              changed_.notify_all();
              return;
            }
            lines_.push_back(*line);
            changed_.notify_all();
          }
        }) {}
  ~StderrLines() { reader_.join(); }  // the process has exited: EOF

  // The first line holding `needle` ("" at the deadline or EOF).
  std::string WaitFor(const std::string& needle,
                      std::chrono::steady_clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::string found;
    changed_.wait_for(lock, timeout, [&] {
      for (const std::string& line : lines_) {
        if (line.find(needle) != std::string::npos) {
          found = line;
          return true;
        }
      }
      return ended_;
    });
    return found;
  }

  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
  bool ended_ = false;
  std::thread reader_;  // last: starts once the rest is built
};

// aggregator_tls_handshake_failures_total, or -1 when it is not served.
double HandshakeFailures(int metrics_port) {
  httplib::Client client("127.0.0.1", metrics_port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto response = client.Get("/metrics");
  if (!response) return -1;
  std::smatch match;
  static const std::regex kSeries(
      "\\naggregator_tls_handshake_failures_total ([0-9.e+]+)\\n");
  if (!std::regex_search(response->body, match, kSeries)) return -1;
  return std::stod(match[1]);
}

// Connects to 127.0.0.1:`port`, writes what a scanner or a plaintext client
// would, and closes.
void SendJunk(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  const std::string junk = "GET / HTTP/1.0\r\n\r\n" + std::string(64, '\x17');
  REQUIRE(write(fd, junk.data(), junk.size()) ==
          static_cast<ssize_t>(junk.size()));
  close(fd);
}

}  // namespace

TEST_CASE(
    "500 junk connections on the TLS listener: at most a burst of log lines "
    "and a summary, and every failed handshake counted") {
  constexpr int kConnections = 500;
  const std::string dir = TempDir();
  const std::string config =
      WriteFile(dir + "/aggregator.yaml",
                "listen: \"127.0.0.1:0\"\n"
                "min_learners: 0\n"
                "admin: {listen: \"\"}\n"
                "metrics: {listen: \"127.0.0.1:0\"}\n"
                "tls: {cert: " +
                    Certs().Path("server.crt") +
                    ", key: " + Certs().Path("server.key") + "}\n");
  auto daemon = Spawn({kDaemon, "--config", config});
  StderrLines stderr_lines(*daemon);
  const std::string listening =
      stderr_lines.WaitFor("aggregatord listening on ", kLongWait);
  const std::string metrics = stderr_lines.WaitFor("metrics on ", kLongWait);
  REQUIRE(!listening.empty());
  REQUIRE(!metrics.empty());
  const std::string address = WordAfter(listening, "aggregatord listening on ");
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  const std::string url = WordAfter(metrics, "metrics on http://");
  const int metrics_port = std::stoi(url.substr(url.find(':') + 1));
  CHECK(HandshakeFailures(metrics_port) == 0);  // served before the first

  for (int i = 0; i < kConnections; ++i) SendJunk(port);

  // Every connection's handshake failed and is counted.
  double failures = -1;
  CHECK(Eventually(
      [&] {
        failures = HandshakeFailures(metrics_port);
        return failures >= kConnections;
      },
      kLongWait));
  CHECK(failures == kConnections);

  // The log: a burst of lines, then (once its 10 s are over) one summary of
  // the rest; a flood crossing a window's end may have two of each.
  const std::regex summary(
      "grpc: suppressed ([0-9]+) similar messages from "
      "\\S+ssl_transport_security\\.cc:[0-9]+ in the last 10s");
  int written = 0;
  int suppressed = 0;
  int summaries = 0;
  REQUIRE(!stderr_lines.WaitFor("grpc: suppressed ", std::chrono::seconds(30))
               .empty());
  Eventually(
      [&] {
        written = suppressed = summaries = 0;
        for (const std::string& line : stderr_lines.Lines()) {
          std::smatch match;
          if (std::regex_search(line, match, summary)) {
            suppressed += std::stoi(match[1]);
            ++summaries;
          } else if (line.find("grpc: Handshake failed") != std::string::npos) {
            ++written;
          }
        }
        return written + suppressed >= kConnections;
      },
      std::chrono::seconds(25));
  INFO("lines:\n"
       << [&] {
            std::string all;
            for (const std::string& line : stderr_lines.Lines())
              all += line + "\n";
            return all.substr(0, 20000);
          }());
  CHECK(summaries >= 1);
  CHECK(written >= 5);
  CHECK(written <= 5 * summaries);
  CHECK(written + suppressed == kConnections);

  REQUIRE(daemon->Signal(SIGTERM).ok());
  auto exit = daemon->Wait(std::chrono::steady_clock::now() + kLongWait);
  REQUIRE(exit.ok());
  CHECK(exit->ok());
}
