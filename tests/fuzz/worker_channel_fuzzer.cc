// libFuzzer target: the worker-frame decoder (lib/supervisor/worker_channel),
// the framing between the supervisor and its worker runtime.
//
// The input is the byte stream a peer sends (4-byte little-endian lengths,
// then serialized WorkerRequest or WorkerReply), followed by a trailer that
// FuzzedDataProvider reads from the end: the channel's frame limit, which
// message the stream carries, and a seed for how the stream is delivered (in
// chunks of random sizes, each read as it arrives). Then the peer closes.
//
// Checked on every input: TryRead never crashes, reads out of bounds or
// blocks; it yields exactly the frames a plain reference decoder of the whole
// stream yields, in order, then the same end: OUT_OF_RANGE after the last
// whole frame, DATA_LOSS for a frame over the limit, one that does not parse
// or one cut short. Each decoded message written with Write and read back on a
// fresh channel is the same message.
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lib/supervisor/worker_channel.h"
#include "proto/worker.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using aggregator::WorkerChannel;
using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

std::unique_ptr<Message> NewMessage(bool request) {
  if (request) return std::make_unique<aggregator::v1::WorkerRequest>();
  return std::make_unique<aggregator::v1::WorkerReply>();
}

// What the stream decodes to: its messages, then how it ends.
struct Decoded {
  std::vector<std::unique_ptr<Message>> frames;
  absl::StatusCode end = absl::StatusCode::kOutOfRange;
};

Decoded Reference(const std::string& stream, uint32_t limit, bool request) {
  Decoded decoded;
  size_t at = 0;
  while (at < stream.size()) {
    if (stream.size() - at < 4) {
      decoded.end = absl::StatusCode::kDataLoss;  // a cut header
      return decoded;
    }
    const auto* b = reinterpret_cast<const unsigned char*>(stream.data() + at);
    const uint32_t length =
        b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
    if (length > limit || length > stream.size() - at - 4) {
      decoded.end = absl::StatusCode::kDataLoss;  // over the limit or cut
      return decoded;
    }
    std::unique_ptr<Message> message = NewMessage(request);
    if (!message->ParseFromArray(stream.data() + at + 4,
                                 static_cast<int>(length))) {
      decoded.end = absl::StatusCode::kDataLoss;
      return decoded;
    }
    decoded.frames.push_back(std::move(message));
    at += 4 + length;
  }
  return decoded;
}

// Reads every frame the channel has now; false once it failed (`end` set).
bool Drain(WorkerChannel& channel, bool request, Decoded* got) {
  for (;;) {
    std::unique_ptr<Message> message = NewMessage(request);
    absl::StatusOr<bool> read = channel.TryRead(message.get());
    if (!read.ok()) {
      got->end = read.status().code();
      return false;
    }
    if (!*read) return true;
    got->frames.push_back(std::move(message));
  }
}

// Sends all of `bytes` on the non-blocking `fd`, draining `channel` whenever
// the socket is full.
bool SendAll(int fd, const char* bytes, size_t size, WorkerChannel& channel,
             bool request, Decoded* got) {
  while (size > 0) {
    const ssize_t n = send(fd, bytes, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes += n;
      size -= n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    FUZZ_CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    if (!Drain(channel, request, got)) return false;
  }
  return true;
}

// The same message, a NaN equal to a NaN (a Value may hold one).
bool Same(const Message& a, const Message& b) {
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  std::string report;
  differencer.ReportDifferencesToString(&report);
  if (differencer.Compare(a, b)) return true;
  std::fprintf(stderr, "messages differ: %s\n", report.c_str());
  return false;
}

}  // namespace

// Protobuf logs every string field that is not UTF-8: quiet while fuzzing.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  // The trailer, from the end.
  uint32_t limit = input.ConsumeIntegralInRange<uint32_t>(0, 1 << 16);
  if (input.ConsumeIntegralInRange(0, 7) == 0) limit = 1 << 20;
  const bool request = input.ConsumeBool();
  const uint32_t seed = input.ConsumeIntegral<uint32_t>();
  const std::string stream = input.ConsumeRemainingBytesAsString();
  std::mt19937 random(seed);

  auto pair = WorkerChannel::CreatePair(limit);
  FUZZ_CHECK(pair.ok());
  WorkerChannel& channel = *pair->first;
  const int peer = pair->second;

  Decoded got;
  got.end = absl::StatusCode::kOk;
  bool reading = true;
  for (size_t at = 0; at < stream.size() && reading;) {
    const size_t chunk =
        std::min<size_t>(stream.size() - at,
                         random() % 2 ? 1 + random() % 8 : 1 + random() % 4096);
    reading =
        SendAll(peer, stream.data() + at, chunk, channel, request, &got) &&
        Drain(channel, request, &got);
    at += chunk;
  }
  close(peer);
  if (reading) {
    FUZZ_CHECK(!Drain(channel, request, &got));  // never waits for more
  }

  const Decoded expected = Reference(stream, limit, request);
  if (got.frames.size() != expected.frames.size() || got.end != expected.end) {
    std::fprintf(
        stderr, "channel: %zu frames then %s; reference: %zu then %s\n",
        got.frames.size(), absl::StatusCodeToString(got.end).c_str(),
        expected.frames.size(), absl::StatusCodeToString(expected.end).c_str());
  }
  FUZZ_CHECK(got.frames.size() == expected.frames.size());
  FUZZ_CHECK(got.end == expected.end);
  for (size_t i = 0; i < got.frames.size(); ++i) {
    FUZZ_CHECK(Same(*got.frames[i], *expected.frames[i]));
  }

  // Each message round-trips through Write and Read.
  auto loop = WorkerChannel::CreatePair();
  FUZZ_CHECK(loop.ok());
  WorkerChannel reader(loop->second);
  for (const auto& frame : got.frames) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    FUZZ_CHECK(loop->first->Write(*frame, deadline).ok());
    std::unique_ptr<Message> back = NewMessage(request);
    FUZZ_CHECK(reader.Read(back.get(), deadline).ok());
    FUZZ_CHECK(Same(*frame, *back));
  }
  return 0;
}
