// Who is listening on a TCP port of this host: for the error when a bind
// fails, so "already in use" names the process that holds the port. Read from
// /proc (net/tcp, net/tcp6, and each process's fds), so it finds processes
// this user may look into; a container's or another user's show as unknown.
#ifndef LIB_BASE_PORT_HOLDER_H_
#define LIB_BASE_PORT_HOLDER_H_

#include <string>

namespace aggregator {

// "pid 1234 (aggregatord)" for the process listening on `port` (any local
// address), "" when none is found.
std::string DescribePortHolder(int port);

}  // namespace aggregator

#endif  // LIB_BASE_PORT_HOLDER_H_
