// HttpStream: the stream HttpCall (lib/discovery/http_client.h) hands
// cpp-httplib for one connection, plain or TLS, in place of cpp-httplib's own,
// so that the reply's head (status line and header lines) is bounded.
// cpp-httplib 0.11 (Debian 12) bounds neither the number of header lines nor,
// before it has read a whole line, a line's length: a server sending endless
// short header lines grew the daemon by ~155 MB/s until the call's timeout.
// Past kMaxHeadBytes, kMaxHeadLines header lines or a line of
// kMaxHeadLineBytes the stream fails its reads, and says which bound was
// crossed. (cpp-httplib checks a header line's length, 8 KiB, only once it
// is read, and never the status line's, which it matches with std::regex:
// ~230 bytes of stack per character, a 64 KiB status line overflowed 8 MiB.)
//
// Thread-safety: one call's; the socket may be shut down from another thread
// (HttpCall's guard), which ends a read or write in progress.
#ifndef LIB_DISCOVERY_HTTP_STREAM_H_
#define LIB_DISCOVERY_HTTP_STREAM_H_

#include <httplib.h>

#include <chrono>
#include <string>
#include <vector>

namespace aggregator {

inline constexpr size_t kMaxHeadBytes = size_t{64} << 10;
inline constexpr int kMaxHeadLines = 200;
inline constexpr size_t kMaxHeadLineBytes = size_t{8} << 10;

// What one call's reply head may take, across its connections (a call tries
// each address of the host in turn); the head ends when cpp-httplib has read
// it (its response_handler calls EndHead).
class ReplyHead {
 public:
  // A new connection, a new reply.
  void Restart();
  void EndHead() { in_head_ = false; }
  // Counts bytes read; false once a bound is crossed (then refused() says
  // which).
  bool Count(const char* data, size_t size);
  // "" or e.g. "the reply's header is longer than 200 lines".
  const std::string& refused() const { return refused_; }

 private:
  bool in_head_ = true;
  size_t bytes_ = 0;
  size_t line_bytes_ = 0;
  int lines_ = 0;  // ended by '\n', the status line's too
  std::string refused_;
};

class HttpStream : public httplib::Stream {
 public:
  // `ssl` is null for plain HTTP; else it is connected (handshake done) over
  // `socket`. Each read and write waits at most its timeout.
  HttpStream(int socket, SSL* ssl, std::chrono::milliseconds read_timeout,
             std::chrono::milliseconds write_timeout, ReplyHead* head);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return socket_; }

 private:
  // Reads at most `size` bytes from the connection: > 0, 0 at its end, -1.
  ssize_t ReadSome(char* ptr, size_t size);
  bool Wait(short events, std::chrono::milliseconds timeout) const;

  const int socket_;
  SSL* const ssl_;
  const std::chrono::milliseconds read_timeout_;
  const std::chrono::milliseconds write_timeout_;
  ReplyHead* const head_;
  // cpp-httplib reads the head a byte at a time: a plain connection is read
  // in blocks.
  std::vector<char> buffer_;
  size_t buffer_start_ = 0;
  size_t buffer_end_ = 0;
};

}  // namespace aggregator

#endif  // LIB_DISCOVERY_HTTP_STREAM_H_
