#include "lib/discovery/http_client.h"

#include <httplib.h>

#include <algorithm>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/mutex.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxReplyBytes = size_t{4} << 20;
// How often the guard looks at RequestLimits::stop.
constexpr milliseconds kStopPoll{50};

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
  if (budget <= milliseconds(0)) {
    return absl::DeadlineExceededError(
        absl::StrCat(method, " ", url, ": no time left"));
  }
  httplib::Client client(origin);
  if (!client.is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " ", url, ": not an http:// or https:// URL"));
  }
  client.set_connection_timeout(budget);
  client.set_read_timeout(budget);
  client.set_write_timeout(budget);
  client.set_keep_alive(false);

  httplib::Request request;
  request.method = method;
  request.path = target;
  if (!json_body.empty()) {
    request.body = json_body;
    request.set_header("Content-Type", "application/json");
  }
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

  // The guard: cuts the connection at the deadline or on stop. cpp-httplib's
  // own timeouts are per read, which a trickling server never trips.
  Mutex mu;
  CondVar finished;
  bool done = false;
  bool cut = false;
  std::thread guard([&] {
    MutexLock lock(&mu);
    while (!done) {
      const auto left = limits.deadline - Steady::now();
      if (limits.stopped() || left <= Steady::duration::zero()) {
        cut = true;
        client.stop();
        return;
      }
      finished.WaitWithTimeout(
          &mu, absl::FromChrono(std::min<Steady::duration>(left, kStopPoll)));
    }
  });
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(request, response, error);
  {
    MutexLock lock(&mu);
    done = true;
    finished.Signal();
  }
  guard.join();

  if (limits.stopped()) {
    return absl::CancelledError(absl::StrCat(method, " ", url, ": stopped"));
  }
  if (too_large) {
    return absl::ResourceExhaustedError(
        absl::StrCat(method, " ", url, ": the reply is larger than ",
                     kMaxReplyBytes >> 20, " MiB"));
  }
  if (cut || (!sent && Steady::now() >= limits.deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        method, " ", url, ": no complete reply within ", budget.count(), "ms"));
  }
  if (!sent) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", url, ": ", httplib::to_string(error)));
  }
  return HttpReply{response.status, std::move(body)};
}

}  // namespace aggregator
