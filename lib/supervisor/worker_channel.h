// WorkerChannel: one end of a supervised child's private channel, a connected
// stream socket carrying length-delimited protobuf frames (worker.proto): a
// 4-byte little-endian length, then that many bytes of a serialized
// WorkerRequest (supervisor to child) or WorkerReply (child to supervisor).
//
// Every blocking call takes a deadline and is built on poll(), so a peer that
// stops reading or writing never blocks the caller forever. Partial reads and
// writes are handled; a frame cut short by the peer's exit is reported as
// DATA_LOSS and discarded, never waited for.
//
// Thread-safety: one reader and one writer may use a channel at the same time
// (they share only the fd); two readers or two writers must be serialized by
// the caller. Ownership: the channel owns its fd and closes it on destruction.
#ifndef LIB_SUPERVISOR_WORKER_CHANNEL_H_
#define LIB_SUPERVISOR_WORKER_CHANNEL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"
#include "proto/worker_names.h"

namespace aggregator {

// kWorkerFdEnv, kWorkerChildFd and kDefaultMaxFrameBytes: proto/worker_names.h.

class WorkerChannel {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Takes ownership of `fd`, a connected stream socket, and makes it
  // non-blocking. `max_frame_bytes` bounds frames in both directions.
  explicit WorkerChannel(int fd,
                         uint32_t max_frame_bytes = kDefaultMaxFrameBytes);
  ~WorkerChannel();
  WorkerChannel(const WorkerChannel&) = delete;
  WorkerChannel& operator=(const WorkerChannel&) = delete;

  // A connected pair of close-on-exec stream sockets: {channel, peer fd}. The
  // caller owns the peer fd (typically handed to a child).
  static absl::StatusOr<std::pair<std::unique_ptr<WorkerChannel>, int>>
  CreatePair(uint32_t max_frame_bytes = kDefaultMaxFrameBytes);

  int fd() const { return fd_; }

  // Writes one frame, waiting for buffer space until `deadline`.
  // DEADLINE_EXCEEDED if nothing could be written in time (the stream is
  // intact); UNAVAILABLE when the peer has closed its end; after a frame was
  // cut short (a deadline or error mid-frame) the stream is unusable and every
  // later write fails with FAILED_PRECONDITION (see broken()).
  absl::Status Write(const google::protobuf::MessageLite& message,
                     Deadline deadline);

  // Reads one frame into `message`, waiting until `deadline`. OUT_OF_RANGE at
  // a clean end of stream, DATA_LOSS at an end of stream inside a frame or for
  // a frame that does not parse or exceeds the limit, DEADLINE_EXCEEDED on
  // timeout (bytes of a partial frame stay buffered for the next call).
  absl::Status Read(google::protobuf::MessageLite* message, Deadline deadline);

  // Never blocks: true with `message` filled if a whole frame is buffered or
  // arrives with one recv(); false if the caller should poll fd() for POLLIN
  // first. Errors as Read(), except that there is no deadline.
  absl::StatusOr<bool> TryRead(google::protobuf::MessageLite* message);

  // Bytes of an incomplete frame held in the read buffer.
  size_t partial_bytes() const { return read_end_ - read_begin_; }
  // The peer's end of stream has been read (TryRead/Read fail from then on).
  bool peer_closed() const { return read_eof_; }
  // A write was cut short mid-frame: the peer would misread anything more.
  bool broken() const { return write_broken_; }

  // shutdown(2) both directions: the peer sees end of stream, and a poll() on
  // fd() in another thread returns. The fd stays open until destruction.
  void Shutdown();

 private:
  // Parses the next buffered frame, if whole. Returns false when more bytes
  // are needed.
  absl::StatusOr<bool> ParseBuffered(google::protobuf::MessageLite* message);

  const int fd_;
  const uint32_t max_frame_bytes_;
  // Reader state: bytes [read_begin_, read_end_) of read_buffer_ are unparsed.
  std::string read_buffer_;
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
  bool read_eof_ = false;
  // Writer state: reused so the steady state allocates nothing.
  std::string write_buffer_;
  bool write_broken_ = false;
};

}  // namespace aggregator

#endif  // LIB_SUPERVISOR_WORKER_CHANNEL_H_
