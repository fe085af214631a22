// WorkerChannel (lib/supervisor/worker_channel) against a peer that writes raw
// bytes on the other end of the socket pair.
#include "lib/supervisor/worker_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#include "proto/worker.pb.h"

namespace aggregator {
namespace {

// This process's resident set, in MiB (VmRSS of /proc/self/status).
double RssMiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  FAIL("no VmRSS in /proc/self/status");
  return 0;
}

std::string Header(uint32_t length) {
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) {
    header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return header;
}

// Blocking; false if the peer is gone.
bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

TEST_CASE(
    "A frame's buffer grows with the bytes received, not to the length its "
    "header announces (issue 26 item 10: 5 bytes made 250 MB)") {
  auto pair = WorkerChannel::CreatePair();  // the 256 MiB default limit
  REQUIRE(pair.ok());
  WorkerChannel& channel = *pair->first;
  const int peer = pair->second;
  const double before = RssMiB();
  REQUIRE(SendAll(peer, Header(250u << 20) + "x"));
  v1::WorkerReply reply;
  auto read = channel.TryRead(&reply);
  REQUIRE(read.ok());
  CHECK_FALSE(*read);
  CHECK(channel.partial_bytes() == 5);
  const double grown = RssMiB() - before;
  INFO("RSS grew by " << grown << " MiB for a 5-byte frame header");
  CHECK(grown < 16);
  close(peer);
  CHECK(channel.TryRead(&reply).status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("A large frame sent in pieces still reads whole") {
  auto pair = WorkerChannel::CreatePair();
  REQUIRE(pair.ok());
  WorkerChannel& channel = *pair->first;
  const int peer = pair->second;
  v1::WorkerRequest sent;
  sent.set_req_id("r1");
  sent.set_method(std::string(12 << 20, 'm'));  // 12 MiB
  const std::string frame = Header(static_cast<uint32_t>(sent.ByteSizeLong())) +
                            sent.SerializeAsString();
  std::thread writer([&] {
    // In uneven pieces, so the reader sees every partial size.
    for (size_t at = 0, piece = 1; at < frame.size(); piece = piece * 3 + 1) {
      const size_t n = std::min(piece % (1 << 20) + 1, frame.size() - at);
      if (!SendAll(peer, frame.substr(at, n))) return;
      at += n;
    }
  });
  v1::WorkerRequest got;
  const absl::Status status = channel.Read(
      &got, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  writer.join();
  REQUIRE(status.ok());
  CHECK(got.req_id() == "r1");
  CHECK(got.method() == sent.method());
  CHECK(channel.partial_bytes() == 0);
  close(peer);
}

}  // namespace
}  // namespace aggregator
