// The reply head's bounds (ReplyHead) and HttpStream over real sockets: reads
// in blocks, the end of the stream, timeouts, a shutdown from another thread,
// a head that crosses a bound failing the reads and saying which, the body
// unbounded once the head ended, writes, the peer's and own addresses, and
// the same over TLS (OpenSSL on both ends, certificates made by openssl).
#include "lib/discovery/http_stream.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "tests/testing/loopback_listener.h"
#include "tests/testing/tls_certificates.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLong(15000);

// Feeds `text` to `head` in one call; true if it stays within the bounds.
bool CountAll(ReplyHead& head, const std::string& text) {
  return head.Count(text.data(), text.size());
}

std::string HeaderLines(int count) {
  std::string lines;
  for (int i = 0; i < count; ++i) lines += "X-H: v\r\n";
  return lines;
}

TEST_CASE(
    "ReplyHead: up to kMaxHeadLines header lines, one more is refused, "
    "whether read at once or a byte at a time") {
  {
    ReplyHead head;
    CHECK(CountAll(
        head, "HTTP/1.1 200 OK\r\n" + HeaderLines(kMaxHeadLines) + "\r\n"));
    CHECK(head.refused().empty());
  }
  {
    ReplyHead head;
    const std::string text =
        "HTTP/1.1 200 OK\r\n" + HeaderLines(kMaxHeadLines + 1) + "\r\n";
    bool within = true;
    for (char c : text) within = within && head.Count(&c, 1);
    CHECK_FALSE(within);
    CHECK(head.refused() == "the reply's header has more than 200 lines");
    // Refused stays refused.
    CHECK_FALSE(CountAll(head, "x"));
  }
}

TEST_CASE("ReplyHead: a line of kMaxHeadLineBytes with its CR, not one more") {
  ReplyHead head;
  CHECK(CountAll(head, "HTTP/1.1 200 OK\r\nX: " +
                           std::string(kMaxHeadLineBytes - 4, 'v') + "\r\n"));
  CHECK(CountAll(head, "X: " + std::string(kMaxHeadLineBytes - 3, 'v') + "\n"));
  CHECK_FALSE(
      CountAll(head, "X: " + std::string(kMaxHeadLineBytes - 3, 'v') + "\r"));
  CHECK(head.refused() == "a line of the reply's header is longer than 8 KiB");
  // The status line is bounded too.
  ReplyHead status;
  CHECK_FALSE(CountAll(status, "HTTP/1.1 200 " + std::string(64 << 10, 'O')));
  CHECK(status.refused() ==
        "a line of the reply's header is longer than 8 KiB");
}

TEST_CASE(
    "ReplyHead: the whole head within kMaxHeadBytes; the body is not "
    "counted; Restart starts a new reply") {
  ReplyHead head;
  // 9 lines of 8000 bytes: each line within its bound, the head over 64 KiB.
  std::string lines;
  for (int i = 0; i < 9; ++i) lines += "X: " + std::string(8000, 'v') + "\r\n";
  CHECK_FALSE(CountAll(head, "HTTP/1.1 200 OK\r\n" + lines));
  CHECK(head.refused() == "the reply's header is larger than 64 KiB");
  head.Restart();
  CHECK(head.refused().empty());
  CHECK(CountAll(head, "HTTP/1.1 200 OK\r\n\r\n"));
  head.EndHead();
  CHECK(CountAll(head, std::string(1 << 20, 'b')));
  CHECK(CountAll(head, HeaderLines(1000)));
}

// A connected pair of stream sockets: [0] for the HttpStream, [1] the peer.
struct Pair {
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0); }
  ~Pair() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void Send(const std::string& text) { REQUIRE(SendFromThread(text)); }
  // The same without Catch's macros, which only the test's thread may use.
  bool SendFromThread(const std::string& text) {
    return ::send(fds[1], text.data(), text.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(text.size());
  }
  void ClosePeer() {
    close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST_CASE(
    "A plain stream reads what the peer sent, a byte at a time from its "
    "block, then 0 at the end") {
  Pair pair;
  ReplyHead head;
  HttpStream stream(pair.fds[0], nullptr, kLong, kLong, &head);
  pair.Send("HTTP/1.1 200 OK\r\n\r\nbody");
  pair.ClosePeer();
  CHECK(stream.is_readable());
  std::string got;
  char c;
  while (stream.read(&c, 1) == 1) got += c;
  CHECK(got == "HTTP/1.1 200 OK\r\n\r\nbody");
  CHECK(stream.read(&c, 1) == 0);
  CHECK(head.refused().empty());
}

TEST_CASE("A read with nothing to read fails at its timeout") {
  Pair pair;
  ReplyHead head;
  HttpStream stream(pair.fds[0], nullptr, milliseconds(50), kLong, &head);
  const auto start = std::chrono::steady_clock::now();
  char c;
  CHECK(stream.read(&c, 1) == -1);
  CHECK(std::chrono::steady_clock::now() - start >= milliseconds(50));
  CHECK_FALSE(stream.is_readable());
}

TEST_CASE("A shutdown from another thread ends a read in progress") {
  Pair pair;
  ReplyHead head;
  HttpStream stream(pair.fds[0], nullptr, kLong, kLong, &head);
  auto reading = std::async(std::launch::async, [&stream] {
    char c;
    return stream.read(&c, 1);
  });
  // Not yet answered: the read waits (checked for a moment only).
  CHECK(reading.wait_for(milliseconds(20)) == std::future_status::timeout);
  REQUIRE(shutdown(pair.fds[0], SHUT_RDWR) == 0);
  REQUIRE(reading.wait_for(kLong) == std::future_status::ready);
  CHECK(reading.get() <= 0);
}

TEST_CASE(
    "A head with endless header lines fails the reads, saying which bound; "
    "once the head ended the body is read whole") {
  {
    Pair pair;
    ReplyHead head;
    HttpStream stream(pair.fds[0], nullptr, kLong, kLong, &head);
    auto sending = std::async(std::launch::async, [&pair] {
      return pair.SendFromThread("HTTP/1.1 200 OK\r\n" +
                                 HeaderLines(kMaxHeadLines + 5));
    });
    char c;
    ssize_t n;
    int bytes = 0;
    while ((n = stream.read(&c, 1)) == 1) ++bytes;
    CHECK(n == -1);
    CHECK(head.refused() == "the reply's header has more than 200 lines");
    CHECK(bytes < 17 + 8 * (kMaxHeadLines + 5));
    REQUIRE(sending.wait_for(kLong) == std::future_status::ready);
    CHECK(sending.get());
  }
  {
    Pair pair;
    ReplyHead head;
    HttpStream stream(pair.fds[0], nullptr, kLong, kLong, &head);
    const std::string reply_head = "HTTP/1.1 200 OK\r\n\r\n";
    auto sending = std::async(std::launch::async, [&] {
      const bool sent =
          pair.SendFromThread(reply_head + std::string(200 << 10, 'b'));
      pair.ClosePeer();
      return sent;
    });
    std::string got(reply_head.size(), '\0');
    for (char& c : got) REQUIRE(stream.read(&c, 1) == 1);
    CHECK(got == reply_head);
    head.EndHead();
    size_t body = 0;
    char block[4096];
    ssize_t n;
    while ((n = stream.read(block, sizeof(block))) > 0) body += n;
    CHECK(n == 0);
    CHECK(body == (200 << 10));
    REQUIRE(sending.wait_for(kLong) == std::future_status::ready);
    CHECK(sending.get());
  }
}

TEST_CASE("Writes reach the peer; a write to a closed peer fails") {
  Pair pair;
  ReplyHead head;
  HttpStream stream(pair.fds[0], nullptr, kLong, kLong, &head);
  CHECK(stream.is_writable());
  const std::string request = "GET /learners HTTP/1.1\r\n\r\n";
  CHECK(stream.write(request.data(), request.size()) ==
        static_cast<ssize_t>(request.size()));
  std::string got(request.size(), '\0');
  REQUIRE(recv(pair.fds[1], got.data(), got.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(got.size()));
  CHECK(got == request);
  pair.ClosePeer();
  // No SIGPIPE: the write fails.
  CHECK(stream.write(request.data(), request.size()) == -1);
}

TEST_CASE("The addresses are the TCP connection's two ends") {
  int port = 0;
  const int listener = testing::ListenOnLoopback(4, &port);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  REQUIRE(connect(client, reinterpret_cast<sockaddr*>(&address),
                  sizeof(address)) == 0);
  const int accepted = accept(listener, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  ReplyHead head;
  HttpStream stream(client, nullptr, kLong, kLong, &head);
  std::string ip;
  int remote_port = 0;
  stream.get_remote_ip_and_port(ip, remote_port);
  CHECK(ip == "127.0.0.1");
  CHECK(remote_port == port);
  std::string local_ip;
  int local_port = 0;
  stream.get_local_ip_and_port(local_ip, local_port);
  CHECK(local_ip == "127.0.0.1");
  sockaddr_in own{};
  socklen_t length = sizeof(own);
  REQUIRE(getsockname(client, reinterpret_cast<sockaddr*>(&own), &length) == 0);
  CHECK(local_port == ntohs(own.sin_port));
  CHECK(stream.socket() == client);
  close(accepted);
  close(client);
  close(listener);
}

// A TLS connection over a socket pair: the server's end (a thread of the
// test) and the client's, handshake done.
struct TlsPair {
  TlsPair() {
    const auto& certs = testing::Certs();
    server_ctx = SSL_CTX_new(TLS_server_method());
    client_ctx = SSL_CTX_new(TLS_client_method());
    REQUIRE(SSL_CTX_use_certificate_chain_file(
                server_ctx, certs.Path("server.crt").c_str()) == 1);
    REQUIRE(SSL_CTX_use_PrivateKey_file(server_ctx,
                                        certs.Path("server.key").c_str(),
                                        SSL_FILETYPE_PEM) == 1);
    server = SSL_new(server_ctx);
    client = SSL_new(client_ctx);
    SSL_set_fd(server, pair.fds[1]);
    SSL_set_fd(client, pair.fds[0]);
    auto accepting =
        std::async(std::launch::async, [this] { return SSL_accept(server); });
    REQUIRE(SSL_connect(client) == 1);
    REQUIRE(accepting.wait_for(kLong) == std::future_status::ready);
    REQUIRE(accepting.get() == 1);
  }
  ~TlsPair() {
    SSL_free(client);
    SSL_free(server);
    SSL_CTX_free(client_ctx);
    SSL_CTX_free(server_ctx);
  }
  Pair pair;
  SSL_CTX* server_ctx = nullptr;
  SSL_CTX* client_ctx = nullptr;
  SSL* server = nullptr;
  SSL* client = nullptr;
};

TEST_CASE(
    "Over TLS: reads and writes, the head's bounds, and a close_notify as "
    "the end") {
  TlsPair tls;
  ReplyHead head;
  HttpStream stream(tls.pair.fds[0], tls.client, kLong, kLong, &head);
  const std::string request = "GET / HTTP/1.1\r\n\r\n";
  REQUIRE(stream.write(request.data(), request.size()) ==
          static_cast<ssize_t>(request.size()));
  std::string got(request.size(), '\0');
  REQUIRE(SSL_read(tls.server, got.data(), static_cast<int>(got.size())) ==
          static_cast<int>(got.size()));
  CHECK(got == request);

  const std::string reply = "HTTP/1.1 200 OK\r\nA: b\r\n\r\n";
  REQUIRE(SSL_write(tls.server, reply.data(), static_cast<int>(reply.size())) ==
          static_cast<int>(reply.size()));
  SSL_shutdown(tls.server);
  std::string read;
  char block[7];
  ssize_t n;
  while ((n = stream.read(block, sizeof(block))) > 0) read.append(block, n);
  CHECK(n == 0);
  CHECK(read == reply);

  // A fresh reply whose status line is too long fails the read.
  TlsPair again;
  ReplyHead bounded;
  HttpStream long_status(again.pair.fds[0], again.client, kLong, kLong,
                         &bounded);
  const std::string status_line = "HTTP/1.1 200 " + std::string(9000, 'O');
  auto sending = std::async(std::launch::async, [&] {
    return SSL_write(again.server, status_line.data(),
                     static_cast<int>(status_line.size()));
  });
  while ((n = long_status.read(block, sizeof(block))) > 0) {
  }
  CHECK(n == -1);
  CHECK(bounded.refused() ==
        "a line of the reply's header is longer than 8 KiB");
  REQUIRE(sending.wait_for(kLong) == std::future_status::ready);
}

}  // namespace
}  // namespace aggregator
