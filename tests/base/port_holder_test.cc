// DescribePortHolder on real listening sockets: this process's, a child
// process's (the fd passed by fork), IPv6, and a port nobody listens on.
#include "lib/base/port_holder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/testing/loopback_listener.h"

namespace aggregator {
namespace {

// "pid N (comm)" as DescribePortHolder says it.
std::string Holder(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  REQUIRE_FALSE(name.empty());
  return "pid " + std::to_string(pid) + " (" + name + ")";
}

// A TCP socket on ::1 at a port the kernel picks, listening; its fd.
int ListenOnIpv6Loopback(int* port) {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  REQUIRE(listen(fd, 4) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  *port = ntohs(address.sin6_port);
  return fd;
}

TEST_CASE("The holder of a listening IPv4 or IPv6 port is this process") {
  int port = 0;
  const int fd = testing::ListenOnLoopback(4, &port);
  CHECK(DescribePortHolder(port) == Holder(getpid()));
  close(fd);
  // Closed: nobody listens there now.
  CHECK(DescribePortHolder(port) == "");

  int port6 = 0;
  const int fd6 = ListenOnIpv6Loopback(&port6);
  CHECK(DescribePortHolder(port6) == Holder(getpid()));
  close(fd6);
}

TEST_CASE("A port bound but not listening has no holder") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  CHECK(DescribePortHolder(ntohs(address.sin_port)) == "");
  close(fd);
}

TEST_CASE("The holder is the process that has the socket: a child") {
  int port = 0;
  const int fd = testing::ListenOnLoopback(4, &port);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Holds the listening socket until the parent closes the pipe (or the
    // parent dies), at most 30 s.
    close(pipe_fds[1]);
    pollfd wait_for = {pipe_fds[0], POLLIN, 0};
    poll(&wait_for, 1, 30000);
    _exit(0);
  }
  close(pipe_fds[0]);
  close(fd);
  CHECK(DescribePortHolder(port) == Holder(child));
  close(pipe_fds[1]);
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(DescribePortHolder(port) == "");
}

}  // namespace
}  // namespace aggregator
