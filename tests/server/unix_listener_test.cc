// UnixListenerPath on real socket paths in a temporary directory: a free path,
// a stale socket (removed), a path a live server listens on (refused, left in
// place), something that is not a socket, the bound socket's mode, and its
// removal at the end only while it is still the one bound here.
#include "lib/server/unix_listener.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

namespace aggregator {
namespace {

// A fresh directory under /tmp, removed at the end: a socket path must fit
// sockaddr_un (108 bytes), and $TEST_TMPDIR is too deep.
struct ShortDir {
  ShortDir() {
    std::string pattern = "/tmp/unixlXXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ShortDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

bool Exists(const std::string& path) {
  struct stat found {};
  return lstat(path.c_str(), &found) == 0;
}

bool IsSocket(const std::string& path) {
  struct stat found {};
  return lstat(path.c_str(), &found) == 0 && S_ISSOCK(found.st_mode);
}

mode_t Mode(const std::string& path) {
  struct stat found {};
  REQUIRE(lstat(path.c_str(), &found) == 0);
  return found.st_mode & 07777;
}

ino_t Inode(const std::string& path) {
  struct stat found {};
  REQUIRE(lstat(path.c_str(), &found) == 0);
  return found.st_ino;
}

// A unix socket bound at `path`, listening when `listen` is set; its fd.
int BindAt(const std::string& path, bool listening) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(bind(fd, reinterpret_cast<const sockaddr*>(&address),
               sizeof(address)) == 0);
  if (listening) REQUIRE(listen(fd, 4) == 0);
  return fd;
}

std::string Quoted(const std::string& what, const std::string& path) {
  return what + " \"unix:" + path + "\"";
}

TEST_CASE("A free path is claimed as it is; nothing is created") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  UnixListenerPath listener(path, "listen");
  CHECK(listener.Claim().ok());
  CHECK_FALSE(Exists(path));
}

TEST_CASE("A stale socket nobody listens on is removed by Claim") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  // Bound, then closed without unlinking: what a killed daemon leaves.
  close(BindAt(path, true));
  REQUIRE(IsSocket(path));
  UnixListenerPath listener(path, "listen");
  CHECK(listener.Claim().ok());
  CHECK_FALSE(Exists(path));
}

TEST_CASE(
    "A path a live server listens on is refused UNAVAILABLE, naming the "
    "listener, and left in place") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  const int fd = BindAt(path, true);
  const ino_t inode = Inode(path);
  UnixListenerPath listener(path, "admin.listen");
  const absl::Status claimed = listener.Claim();
  CHECK(claimed.code() == absl::StatusCode::kUnavailable);
  CHECK(claimed.message() ==
        Quoted("admin.listen", path) +
            ": another process is listening on it (a second aggregatord?); "
            "stop it or choose another path");
  CHECK(Inode(path) == inode);
  close(fd);
}

TEST_CASE(
    "A gRPC server's socket: claimed, bound, given its mode, refused to a "
    "second claimant while it serves, removed at the end") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  auto listener = std::make_unique<UnixListenerPath>(path, "listen");
  REQUIRE(listener->Claim().ok());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  grpc::CallbackGenericService service;  // a server needs one
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  REQUIRE(IsSocket(path));
  CHECK(listener->Restrict(0640).ok());
  CHECK(Mode(path) == 0640);
  CHECK(listener->Restrict(0600).ok());
  CHECK(Mode(path) == 0600);

  // A second daemon on the same path is refused; the first's socket stays.
  UnixListenerPath second(path, "listen");
  CHECK(second.Claim().code() == absl::StatusCode::kUnavailable);
  CHECK(IsSocket(path));

  listener.reset();
  CHECK_FALSE(Exists(path));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

TEST_CASE(
    "At the end a socket that replaced ours at the path is left alone, even "
    "when the filesystem gives it our socket's inode number") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  {
    UnixListenerPath listener(path, "listen");
    REQUIRE(listener.Claim().ok());
    // Bound here and given its mode; then this server stops listening.
    close(BindAt(path, true));
    REQUIRE(listener.Restrict(0660).ok());
    // Another daemon claims the stale socket (removing it) and binds its own
    // there before this one's listener path is destroyed. ext4 hands a freed
    // inode's number out again at once.
    UnixListenerPath other(path, "listen");
    REQUIRE(other.Claim().ok());
    REQUIRE_FALSE(Exists(path));
    close(BindAt(path, true));
  }
  CHECK(IsSocket(path));
}

TEST_CASE("A path claimed but never restricted is left at the end") {
  const ShortDir dir;
  const std::string path = dir.path + "/agg.sock";
  {
    UnixListenerPath listener(path, "listen");
    REQUIRE(listener.Claim().ok());
    close(BindAt(path, false));
  }
  CHECK(IsSocket(path));
}

TEST_CASE("Paths that are not sockets, or cannot be, are refused by name") {
  const ShortDir short_dir;
  const std::string& dir = short_dir.path;
  const std::string file = dir + "/agg.sock";
  std::ofstream(file) << "not a socket";
  UnixListenerPath listener(file, "listen");
  const absl::Status claimed = listener.Claim();
  CHECK(claimed.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(claimed.message() ==
        Quoted("listen", file) +
            ": the path exists and is not a socket; remove it or choose "
            "another");
  CHECK(Exists(file));

  // Under a file: lstat's error, named.
  const std::string under = file + "/x.sock";
  const absl::Status not_dir = UnixListenerPath(under, "listen").Claim();
  CHECK(not_dir.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(not_dir.message() ==
        Quoted("listen", under) + ": " + std::strerror(ENOTDIR));

  // A socket file too long for sockaddr_un (made with mknod: no bind can).
  const std::string long_path = dir + "/" + std::string(120, 'a') + ".sock";
  REQUIRE(mknod(long_path.c_str(), S_IFSOCK | 0600, 0) == 0);
  const absl::Status too_long = UnixListenerPath(long_path, "listen").Claim();
  CHECK(too_long.code() == absl::StatusCode::kInvalidArgument);
  CHECK(too_long.message() ==
        Quoted("listen", long_path) + ": the path is longer than " +
            std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");

  // Restrict with no socket bound.
  UnixListenerPath unbound(dir + "/none.sock", "listen");
  const absl::Status restricted = unbound.Restrict(0600);
  CHECK(restricted.code() == absl::StatusCode::kInternal);
  CHECK(restricted.message() ==
        Quoted("listen", dir + "/none.sock") + ": no socket after binding");
}

}  // namespace
}  // namespace aggregator
