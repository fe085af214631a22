// A TCP socket listening on 127.0.0.1 at a port the kernel picks: for tests
// whose peer is a hand-written server (raw bytes, a full accept queue).
#ifndef TESTS_TESTING_LOOPBACK_LISTENER_H_
#define TESTS_TESTING_LOOPBACK_LISTENER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

namespace aggregator::testing {

// The listening socket's fd; its port in `*port`.
inline int ListenOnLoopback(int backlog, int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, backlog) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_LOOPBACK_LISTENER_H_
