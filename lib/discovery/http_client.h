// HttpCall: one HTTP request to a server that may be slow, hang, or answer
// with anything, through cpp-httplib's client. The host is looked up with
// c-ares within the deadline (ResolveHost, lib/discovery/dns_lookup.h) and
// cpp-httplib is handed the address, so no getaddrinfo, which nothing bounds,
// runs. The whole call ends by limits.deadline (DEADLINE_EXCEEDED) or within
// about 50 ms of limits.stop (CANCELLED), whatever the other side does: a
// guard thread then shuts the connection down, in the connect (a server that
// never accepts), the request or the reply (a silent server, or one that
// trickles its answer byte by byte). The host's addresses are tried in turn
// while a connection cannot be made. At most 4 MiB of the answer's body is
// read, and of its head 64 KiB, 200 header lines and 8 KiB a line
// (lib/discovery/http_stream.h): RESOURCE_EXHAUSTED past that. Proxy variables
// of the environment are not used.
//
// Thread-safety: calls are independent; any thread.
#ifndef LIB_DISCOVERY_HTTP_CLIENT_H_
#define LIB_DISCOVERY_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/discovery/learner_source.h"

namespace aggregator {

struct HttpReply {
  int status = 0;
  std::string body;
};

// `method` "GET" or "POST"; `url` "http(s)://host[:port]/path?query"; a
// non-empty `json_body` is sent as application/json. Any reply the server
// completes is returned, whatever its status: the caller judges it.
absl::StatusOr<HttpReply> HttpCall(const std::string& method,
                                   const std::string& url,
                                   const std::string& json_body,
                                   const RequestLimits& limits);

// `text` percent-encoded for a URL's query (RFC 3986 unreserved kept).
std::string UrlEncode(absl::string_view text);

}  // namespace aggregator

#endif  // LIB_DISCOVERY_HTTP_CLIENT_H_
