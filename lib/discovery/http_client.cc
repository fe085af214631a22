#include "lib/discovery/http_client.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/mutex.h"
#include "lib/discovery/dns_lookup.h"
#include "lib/discovery/http_stream.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxReplyBytes = size_t{4} << 20;
// How often the guard looks at RequestLimits::stop, and shuts the sockets
// down again once it has cut the call.
constexpr milliseconds kGuardPoll{50};

// cpp-httplib's client (plain, or TLS) reading its replies through an
// HttpStream, which bounds their heads (cpp-httplib's own stream does not).
// cpp-httplib makes the connection, and the TLS handshake, as it would.
template <typename Base>
class BoundedClient final : public Base {
 public:
  BoundedClient(const std::string& host, int port, ReplyHead* head)
      : Base(host, port), head_(head) {}

 private:
  using Socket = typename Base::Socket;

  static milliseconds Timeout(time_t sec, time_t usec) {
    return milliseconds(sec * 1000 + usec / 1000);
  }
  bool process_socket(const Socket& socket,
                      std::function<bool(httplib::Stream&)> callback) override {
    head_->Restart();
    HttpStream stream(
        socket.sock, socket.ssl,
        Timeout(this->read_timeout_sec_, this->read_timeout_usec_),
        Timeout(this->write_timeout_sec_, this->write_timeout_usec_), head_);
    return callback(stream);
  }

  ReplyHead* const head_;
};

struct Origin {
  bool tls = false;
  std::string host;  // "[v6]" without its brackets
  int port = 0;
};

// "http(s)://host[:port]" taken apart as cpp-httplib's Client does (no
// scheme: http), or nullopt.
std::optional<Origin> ParseOrigin(const std::string& origin) {
  static const std::regex re(
      R"((?:([a-z]+):\/\/)?(?:\[([\d:]+)\]|([^:/?#]+))(?::(\d+))?)");
  std::smatch m;
  if (!std::regex_match(origin, m, re)) return std::nullopt;
  const std::string scheme = m[1].matched ? m[1].str() : "http";
  if (scheme != "http" && scheme != "https") return std::nullopt;
  Origin out;
  out.tls = scheme == "https";
  out.host = m[2].matched ? m[2].str() : m[3].str();
  const std::string port = m[4].str();
  if (port.size() > 5) return std::nullopt;
  out.port = port.empty() ? (out.tls ? 443 : 80) : std::stoi(port);
  return out;
}

// The sockets of one call, and the cut that ends them whatever cpp-httplib is
// doing with them: shutdown(2) on a duplicate of each, taken as cpp-httplib
// makes it (before it connects). A shutdown wakes a connect in progress as it
// does a read or a write, and takes none of cpp-httplib's locks: its stop()
// waits for a connect to end, since it connects holding the lock stop() takes.
// The duplicates keep the sockets' numbers from being reused until the call is
// over, so a late cut never hits another socket.
class SocketCutter {
 public:
  SocketCutter() = default;
  SocketCutter(const SocketCutter&) = delete;
  SocketCutter& operator=(const SocketCutter&) = delete;
  ~SocketCutter() {
    MutexLock lock(&mu_);
    for (const int socket : sockets_) close(socket);
  }

  // cpp-httplib's socket_options hook: each socket it makes, before connect.
  void Adopt(int socket) {
    const int copy = fcntl(socket, F_DUPFD_CLOEXEC, 0);
    const int error = errno;
    MutexLock lock(&mu_);
    if (copy < 0) {
      // It could not be cut later: it fails now (by its first write at the
      // latest; its connect ends by the connection timeout, the time left).
      shutdown(socket, SHUT_RDWR);
      unguarded_ =
          absl::StrCat("cannot guard the connection: ", strerror(error));
      return;
    }
    sockets_.push_back(copy);
    if (cut_) shutdown(copy, SHUT_RDWR);
  }

  // Shuts every socket down, and each one made from now on. A socket shut down
  // between its creation and its connect still connects, so the guard cuts
  // again until the call returns.
  void Cut() {
    MutexLock lock(&mu_);
    cut_ = true;
    for (const int socket : sockets_) shutdown(socket, SHUT_RDWR);
  }

  bool cut() const {
    MutexLock lock(&mu_);
    return cut_;
  }
  // Why a socket went out unguarded (and was failed), or "".
  std::string unguarded() const {
    MutexLock lock(&mu_);
    return unguarded_;
  }

 private:
  mutable Mutex mu_;
  std::vector<int> sockets_ ABSL_GUARDED_BY(mu_);
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  std::string unguarded_ ABSL_GUARDED_BY(mu_);
};

// Runs on a thread of its own while it exists (a call is in flight): cuts
// the call when limits.stop is set or the deadline passes, then again every
// kGuardPoll.
class CallGuard {
 public:
  CallGuard(SocketCutter* cutter, const RequestLimits& limits)
      : cutter_(cutter), limits_(limits), thread_([this] { Run(); }) {}
  ~CallGuard() {
    {
      MutexLock lock(&mu_);
      done_ = true;
      finished_.Signal();
    }
    thread_.join();
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  void Run() {
    MutexLock lock(&mu_);
    while (!done_) {
      const Steady::duration left = limits_.deadline - Steady::now();
      const bool due = limits_.stopped() || left <= Steady::duration::zero();
      // Short syscalls under mu_, which the caller takes only once its call
      // has returned.
      if (due) cutter_->Cut();
      finished_.WaitWithTimeout(
          &mu_,
          absl::FromChrono(due ? kGuardPoll
                               : std::min<Steady::duration>(left, kGuardPoll)));
    }
  }

  SocketCutter* const cutter_;
  const RequestLimits limits_;
  Mutex mu_;
  CondVar finished_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

absl::StatusOr<HttpReply> HttpCall(const std::string& method,
                                   const std::string& url,
                                   const std::string& json_body,
                                   const RequestLimits& limits) {
  // "http://host:port/path?query": cpp-httplib takes the origin and the
  // target apart.
  const size_t scheme_end = url.find("://");
  const size_t target_start =
      url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  const std::string origin = url.substr(0, target_start);
  const std::string target =
      target_start == std::string::npos ? "/" : url.substr(target_start);
  const auto budget =
      std::chrono::ceil<milliseconds>(limits.deadline - Steady::now());
  if (limits.stopped()) {
    return absl::CancelledError(absl::StrCat(method, " ", url, ": stopped"));
  }
  if (budget <= milliseconds(0)) {
    return absl::DeadlineExceededError(
        absl::StrCat(method, " ", url, ": no time left"));
  }
  const std::optional<Origin> parsed = ParseOrigin(origin);
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " ", url, ": not an http:// or https:// URL"));
  }
  ReplyHead head;
  std::unique_ptr<httplib::ClientImpl> owned;
  if (parsed->tls) {
    owned = std::make_unique<BoundedClient<httplib::SSLClient>>(
        parsed->host, parsed->port, &head);
  } else {
    owned = std::make_unique<BoundedClient<httplib::ClientImpl>>(
        parsed->host, parsed->port, &head);
  }
  httplib::ClientImpl& client = *owned;
  if (!client.is_valid()) {
    return absl::InternalError(
        absl::StrCat(method, " ", url, ": cannot set up TLS"));
  }
  const std::string& host = parsed->host;
  absl::StatusOr<std::vector<std::string>> addresses =
      ResolveHost(host, limits);
  if (!addresses.ok()) {
    return absl::Status(
        addresses.status().code(),
        absl::StrCat(method, " ", url, ": ", addresses.status().message()));
  }
  SocketCutter cutter;
  client.set_socket_options([&cutter](int socket) { cutter.Adopt(socket); });
  client.set_keep_alive(false);

  httplib::Request request;
  request.method = method;
  request.path = target;
  if (!json_body.empty()) {
    request.body = json_body;
    request.set_header("Content-Type", "application/json");
  }
  // The head ends where cpp-httplib hands the reply over.
  request.response_handler = [&head](const httplib::Response&) {
    head.EndHead();
    return true;
  };
  std::string body;
  bool too_large = false;
  request.content_receiver = [&](const char* data, size_t size, uint64_t,
                                 uint64_t) {
    if (body.size() + size > kMaxReplyBytes) {
      too_large = true;
      return false;
    }
    body.append(data, size);
    return true;
  };

  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  bool sent = false;
  std::string address;  // the last one tried
  {
    // cpp-httplib's own timeouts are per step (connect, each read, each
    // write), which a trickling server never trips: the guard ends the whole.
    CallGuard guard(&cutter, limits);
    for (const std::string& next : *addresses) {
      const auto left =
          std::chrono::ceil<milliseconds>(limits.deadline - Steady::now());
      if (cutter.cut() || left <= milliseconds(0)) break;
      address = next;
      client.set_hostname_addr_map({{host, address}});
      client.set_connection_timeout(left);
      client.set_read_timeout(left);
      client.set_write_timeout(left);
      body.clear();
      response = httplib::Response();
      sent = client.send(request, response, error);
      // Only a connection that could not be made tries the next address.
      if (sent || error != httplib::Error::Connection) break;
    }
  }

  if (limits.stopped()) {
    return absl::CancelledError(absl::StrCat(method, " ", url, ": stopped"));
  }
  const std::string at =
      address == host ? "" : absl::StrCat(" (at ", address, ")");
  if (!head.refused().empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(method, " ", url, ": ", head.refused(), at));
  }
  // A cut connection can look like the end of a reply read to the close.
  if (cutter.cut() || (!sent && Steady::now() >= limits.deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        method, " ", url, ": no complete reply within ", budget.count(), "ms"));
  }
  if (too_large) {
    return absl::ResourceExhaustedError(
        absl::StrCat(method, " ", url, ": the reply is larger than ",
                     kMaxReplyBytes >> 20, " MiB"));
  }
  if (!sent) {
    const std::string unguarded = cutter.unguarded();
    return absl::UnavailableError(absl::StrCat(
        method, " ", url, ": ",
        !unguarded.empty()                    ? unguarded
        : error == httplib::Error::Connection ? std::string("cannot connect")
                                              : httplib::to_string(error),
        at));
  }
  return HttpReply{response.status, std::move(body)};
}

}  // namespace aggregator
