#include "lib/supervisor/worker_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr size_t kHeaderBytes = 4;
// Read size when the buffer is empty; also the size the buffer shrinks back to
// after a large frame.
constexpr size_t kReadChunk = 64 << 10;
// Buffers that grew past this for one large frame are released afterwards.
constexpr size_t kKeepCapacity = 4 << 20;

uint32_t DecodeLength(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
}

void EncodeLength(uint32_t length, char* p) {
  p[0] = static_cast<char>(length & 0xff);
  p[1] = static_cast<char>((length >> 8) & 0xff);
  p[2] = static_cast<char>((length >> 16) & 0xff);
  p[3] = static_cast<char>((length >> 24) & 0xff);
}

// Waits for `events` on `fd` until `deadline`. Returns false on timeout.
absl::StatusOr<bool> PollUntil(int fd, short events,
                               WorkerChannel::Deadline deadline) {
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    struct timespec timeout;
    const auto left = deadline - now;
    // ppoll takes nanoseconds; a "forever" deadline is capped at a day and the
    // loop simply waits again.
    const auto capped =
        std::min<std::chrono::nanoseconds>(left, std::chrono::hours(24));
    timeout.tv_sec = capped.count() / 1000000000;
    timeout.tv_nsec = capped.count() % 1000000000;
    struct pollfd pfd = {fd, events, 0};
    const int n = ppoll(&pfd, 1, &timeout, nullptr);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      return absl::ErrnoToStatus(errno, "worker channel: poll");
    }
  }
}

}  // namespace

WorkerChannel::WorkerChannel(int fd, uint32_t max_frame_bytes)
    : fd_(fd), max_frame_bytes_(max_frame_bytes) {
  const int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

WorkerChannel::~WorkerChannel() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::pair<std::unique_ptr<WorkerChannel>, int>>
WorkerChannel::CreatePair(uint32_t max_frame_bytes) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::ErrnoToStatus(errno, "worker channel: socketpair");
  }
  return std::make_pair(
      std::make_unique<WorkerChannel>(fds[0], max_frame_bytes), fds[1]);
}

void WorkerChannel::Shutdown() { shutdown(fd_, SHUT_RDWR); }

absl::Status WorkerChannel::Write(const google::protobuf::MessageLite& message,
                                  Deadline deadline) {
  if (write_broken_) {
    return absl::FailedPreconditionError(
        "worker channel: an earlier write was cut short mid-frame; the stream "
        "cannot be used any more");
  }
  const size_t size = message.ByteSizeLong();
  if (size > max_frame_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker channel: a frame of ", size,
                     " bytes exceeds the limit of ", max_frame_bytes_));
  }
  const size_t total = kHeaderBytes + size;
  write_buffer_.resize(total);
  char* data = write_buffer_.data();
  EncodeLength(static_cast<uint32_t>(size), data);
  message.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(data + kHeaderBytes));

  absl::Status status;
  size_t sent = 0;
  while (sent < total) {
    const ssize_t n =
        send(fd_, data + sent, total - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      absl::StatusOr<bool> ready = PollUntil(fd_, POLLOUT, deadline);
      if (!ready.ok()) {
        status = ready.status();
        break;
      }
      if (!*ready) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "worker channel: the peer did not accept a frame of ", total,
            " bytes before the deadline (", sent, " written)"));
        break;
      }
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      status =
          absl::UnavailableError("worker channel: the peer has closed its end");
    } else {
      status = absl::ErrnoToStatus(errno, "worker channel: send");
    }
    break;
  }
  if (!status.ok() && sent > 0) write_broken_ = true;
  if (write_buffer_.capacity() > kKeepCapacity) {
    std::string().swap(write_buffer_);
  }
  return status;
}

absl::StatusOr<bool> WorkerChannel::ParseBuffered(
    google::protobuf::MessageLite* message) {
  const size_t available = read_end_ - read_begin_;
  if (available < kHeaderBytes) return false;
  const char* frame = read_buffer_.data() + read_begin_;
  const uint32_t length = DecodeLength(frame);
  if (length > max_frame_bytes_) {
    return absl::DataLossError(
        absl::StrCat("worker channel: the peer announced a frame of ", length,
                     " bytes, over the limit of ", max_frame_bytes_));
  }
  if (available < kHeaderBytes + length) return false;
  if (!message->ParseFromArray(frame + kHeaderBytes,
                               static_cast<int>(length))) {
    return absl::DataLossError(absl::StrCat("worker channel: a frame of ",
                                            length, " bytes does not parse as ",
                                            message->GetTypeName()));
  }
  read_begin_ += kHeaderBytes + length;
  if (read_begin_ == read_end_) {
    read_begin_ = read_end_ = 0;
    if (read_buffer_.size() > kKeepCapacity) {
      std::string().swap(read_buffer_);
    }
  }
  return true;
}

absl::StatusOr<bool> WorkerChannel::TryRead(
    google::protobuf::MessageLite* message) {
  for (;;) {
    absl::StatusOr<bool> parsed = ParseBuffered(message);
    if (!parsed.ok() || *parsed) return parsed;
    if (read_eof_) {
      if (partial_bytes() == 0) {
        return absl::OutOfRangeError(
            "worker channel: the peer closed the stream");
      }
      return absl::DataLossError(
          absl::StrCat("worker channel: the stream ended inside a frame (",
                       partial_bytes(), " bytes of it received)"));
    }
    // Room for one chunk, or for a frame's bytes as they arrive: at most
    // twice what has been received, up to the frame's end. Not its declared
    // length at once (a 5-byte header made that a 250 MB allocation).
    size_t want = kReadChunk;
    if (partial_bytes() >= kHeaderBytes) {
      const size_t frame =
          kHeaderBytes + DecodeLength(read_buffer_.data() + read_begin_);
      want = std::max(want, std::min(frame, 2 * partial_bytes()));
    }
    if (read_begin_ > 0 && read_buffer_.size() - read_begin_ < want) {
      std::memmove(read_buffer_.data(), read_buffer_.data() + read_begin_,
                   partial_bytes());
      read_end_ -= read_begin_;
      read_begin_ = 0;
    }
    if (read_buffer_.size() < want) read_buffer_.resize(want);
    const ssize_t n = recv(fd_, read_buffer_.data() + read_end_,
                           read_buffer_.size() - read_end_, MSG_DONTWAIT);
    if (n > 0) {
      read_end_ += n;
      continue;
    }
    if (n == 0) {
      read_eof_ = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    // A peer that exits with requests still unread makes the rest of the
    // stream ECONNRESET instead of a clean end: the same thing here.
    if (errno == ECONNRESET) {
      read_eof_ = true;
      continue;
    }
    return absl::ErrnoToStatus(errno, "worker channel: recv");
  }
}

absl::Status WorkerChannel::Read(google::protobuf::MessageLite* message,
                                 Deadline deadline) {
  for (;;) {
    absl::StatusOr<bool> got = TryRead(message);
    if (!got.ok()) return got.status();
    if (*got) return absl::OkStatus();
    absl::StatusOr<bool> ready = PollUntil(fd_, POLLIN, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) {
      return absl::DeadlineExceededError(
          "worker channel: no whole frame before the deadline");
    }
  }
}

}  // namespace aggregator
