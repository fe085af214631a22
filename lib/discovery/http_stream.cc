#include "lib/discovery/http_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr size_t kBufferBytes = 4096;

// The address of `socket`'s `peer` or own end, as cpp-httplib gives it.
void AddressOf(int socket, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  if ((peer ? getpeername(socket, raw, &length)
            : getsockname(socket, raw, &length)) != 0) {
    return;
  }
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

}  // namespace

void ReplyHead::Restart() {
  in_head_ = true;
  bytes_ = 0;
  line_bytes_ = 0;
  lines_ = 0;
  refused_.clear();
}

bool ReplyHead::Count(const char* data, size_t size) {
  if (!refused_.empty()) return false;
  if (!in_head_) return true;
  for (size_t i = 0; i < size; ++i) {
    ++bytes_;
    ++line_bytes_;
    if (data[i] == '\n') {
      ++lines_;
      line_bytes_ = 0;
    }
    // Header lines: all but the status line and the blank line that ends
    // them.
    if (lines_ > kMaxHeadLines + 2) {
      refused_ = absl::StrCat("the reply's header has more than ",
                              kMaxHeadLines, " lines");
    } else if (line_bytes_ > kMaxHeadLineBytes) {
      refused_ = absl::StrCat("a line of the reply's header is longer than ",
                              kMaxHeadLineBytes >> 10, " KiB");
    } else if (bytes_ > kMaxHeadBytes) {
      refused_ = absl::StrCat("the reply's header is larger than ",
                              kMaxHeadBytes >> 10, " KiB");
    }
    if (!refused_.empty()) return false;
  }
  return true;
}

HttpStream::HttpStream(int socket, SSL* ssl,
                       std::chrono::milliseconds read_timeout,
                       std::chrono::milliseconds write_timeout, ReplyHead* head)
    : socket_(socket),
      ssl_(ssl),
      read_timeout_(read_timeout),
      write_timeout_(write_timeout),
      head_(head),
      buffer_(kBufferBytes) {
  // Reads wait in poll(2), with their timeout, not in SSL_read.
  if (ssl_ != nullptr) SSL_clear_mode(ssl_, SSL_MODE_AUTO_RETRY);
}

bool HttpStream::Wait(short events, std::chrono::milliseconds timeout) const {
  pollfd fd{socket_, events, 0};
  int ready;
  do {
    ready = poll(&fd, 1,
                 static_cast<int>(std::min<int64_t>(timeout.count(), INT_MAX)));
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

bool HttpStream::is_readable() const {
  return (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
         buffer_start_ < buffer_end_ || Wait(POLLIN, read_timeout_);
}

bool HttpStream::is_writable() const { return Wait(POLLOUT, write_timeout_); }

ssize_t HttpStream::ReadSome(char* ptr, size_t size) {
  size = std::min<size_t>(size, INT_MAX);
  if (ssl_ == nullptr) {
    if (buffer_start_ == buffer_end_) {
      if (!Wait(POLLIN, read_timeout_)) return -1;
      ssize_t n;
      do {
        n = recv(socket_, buffer_.data(), buffer_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      buffer_start_ = 0;
      buffer_end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, buffer_end_ - buffer_start_);
    std::copy_n(buffer_.data() + buffer_start_, n, ptr);
    buffer_start_ += n;
    return static_cast<ssize_t>(n);
  }
  // TLS: a record may be half read, or the peer may want a renegotiation
  // write; each wait has the read timeout.
  for (;;) {
    if (SSL_pending(ssl_) <= 0 && !Wait(POLLIN, read_timeout_)) return -1;
    const int n = SSL_read(ssl_, ptr, static_cast<int>(size));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_ZERO_RETURN) return 0;
    if (error == SSL_ERROR_WANT_READ) continue;
    if (error == SSL_ERROR_WANT_WRITE) {
      if (!Wait(POLLOUT, write_timeout_)) return -1;
      continue;
    }
    return n == 0 ? 0 : -1;
  }
}

ssize_t HttpStream::read(char* ptr, size_t size) {
  const ssize_t n = ReadSome(ptr, size);
  if (n > 0 && !head_->Count(ptr, static_cast<size_t>(n))) return -1;
  return n;
}

ssize_t HttpStream::write(const char* ptr, size_t size) {
  size = std::min<size_t>(size, INT_MAX);
  for (;;) {
    if (!Wait(POLLOUT, write_timeout_)) return -1;
    if (ssl_ == nullptr) {
      const ssize_t n = send(socket_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return n;
    }
    const int n = SSL_write(ssl_, ptr, static_cast<int>(size));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_WANT_WRITE) continue;
    if (error == SSL_ERROR_WANT_READ) {
      if (!Wait(POLLIN, read_timeout_)) return -1;
      continue;
    }
    return -1;
  }
}

void HttpStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  AddressOf(socket_, /*peer=*/true, ip, port);
}

void HttpStream::get_local_ip_and_port(std::string& ip, int& port) const {
  AddressOf(socket_, /*peer=*/false, ip, port);
}

}  // namespace aggregator
