// ReadBoundedFile on real files in a temporary directory: a regular file
// appended whole; a missing path, a FIFO (without waiting for a writer), a
// directory, a device, a unix socket and a file over 16 MiB refused with
// "<path>: cannot read <what>: ..." and the code from errno.
#include "lib/config/file_reader.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <string>

#include "absl/strings/match.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

// A sparse file of `size` bytes at `path`.
void SparseFile(const std::string& path, off_t size) {
  std::ofstream(path).close();
  REQUIRE(truncate(path.c_str(), size) == 0);
}

TEST_CASE("A regular file is appended whole to what was there") {
  const std::string path = testing::TempDir() + "/aggregator.yaml";
  const std::string text =
      "listen: 127.0.0.1:22272\n" + std::string(200000, '#');
  std::ofstream(path, std::ios::binary) << text;
  std::string out = "before:";
  REQUIRE(ReadBoundedFile(path, "the configuration", &out).ok());
  CHECK(out == "before:" + text);
  // Exactly the bound is still within it.
  const std::string big = testing::TempDir() + "/big";
  SparseFile(big, kMaxConfigFileBytes);
  std::string all;
  CHECK(ReadBoundedFile(big, "the configuration", &all).ok());
  CHECK(all.size() == kMaxConfigFileBytes);
}

TEST_CASE("A missing file: NOT_FOUND with errno's text") {
  const std::string path = testing::TempDir() + "/none.yaml";
  std::string out;
  const absl::Status status = ReadBoundedFile(path, "the configuration", &out);
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(status.message() ==
        path + ": cannot read the configuration: " + std::strerror(ENOENT));
}

TEST_CASE(
    "A FIFO is refused at once, without waiting for a writer; a directory, a "
    "device and a socket are refused by kind") {
  const std::string dir = testing::TempDir();
  const std::string fifo = dir + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto reading = std::async(std::launch::async, [&fifo] {
    std::string out;
    return ReadBoundedFile(fifo, "the tls.cert file", &out);
  });
  REQUIRE(reading.wait_for(std::chrono::seconds(15)) ==
          std::future_status::ready);
  const absl::Status status = reading.get();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == fifo +
                                ": cannot read the tls.cert file: it is a "
                                "FIFO, not a regular file");

  std::string out;
  CHECK(ReadBoundedFile(dir, "the configuration", &out).message() ==
        dir +
            ": cannot read the configuration: it is a directory, not a "
            "regular file");
  CHECK(ReadBoundedFile("/dev/zero", "the configuration", &out).message() ==
        "/dev/zero: cannot read the configuration: it is a device, not a "
        "regular file");
  CHECK(out.empty());

  // A unix socket cannot even be opened (ENXIO).
  std::string short_dir = "/tmp/freadXXXXXX";
  REQUIRE(mkdtemp(short_dir.data()) != nullptr);
  const std::string socket_path = short_dir + "/s";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0);
  const absl::Status socket_status =
      ReadBoundedFile(socket_path, "the configuration", &out);
  CHECK_FALSE(socket_status.ok());
  CHECK(absl::StartsWith(socket_status.message(),
                         socket_path + ": cannot read the configuration: "));
  close(fd);
  unlink(socket_path.c_str());
  rmdir(short_dir.c_str());
}

TEST_CASE("A file over 16 MiB is refused, naming what it should have been") {
  const std::string path = testing::TempDir() + "/huge.pem";
  SparseFile(path, kMaxConfigFileBytes + 1);
  std::string out;
  const absl::Status status = ReadBoundedFile(path, "PEM file", &out);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() ==
        path + ": cannot read PEM file: larger than 16MiB, not a PEM file");
}

}  // namespace
}  // namespace aggregator
