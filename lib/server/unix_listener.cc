#include "lib/server/unix_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aggregator {
namespace {

std::string Describe(const std::string& path, const std::string& what) {
  return absl::StrCat(what, " \"unix:", path, "\"");
}

}  // namespace

UnixListenerPath::UnixListenerPath(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {}

UnixListenerPath::~UnixListenerPath() {
  if (pinned_ < 0) return;
  struct stat now {};
  // Another daemon may have replaced it since (after we stopped listening):
  // that one is not ours to remove.
  if (lstat(path_.c_str(), &now) == 0 && now.st_dev == device_ &&
      now.st_ino == inode_) {
    unlink(path_.c_str());
  }
  close(pinned_);
}

absl::Status UnixListenerPath::Claim() {
  struct stat found {};
  if (lstat(path_.c_str(), &found) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(path_, what_), ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(found.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(path_, what_),
        ": the path exists and is not a socket; remove it or choose another"));
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(path_, what_), ": the path is longer than ",
                     sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(
        Describe(path_, what_), ": socket(): ", std::strerror(errno)));
  }
  // A unix socket's connect() answers at once: accepted (someone listens) or
  // refused (a stale file left by a process that died).
  const int connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (connected == 0 || error == EAGAIN) {
    return absl::UnavailableError(absl::StrCat(
        Describe(path_, what_),
        ": another process is listening on it (a second aggregatord?); stop it "
        "or choose another path"));
  }
  if (error != ECONNREFUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(path_, what_),
                     ": cannot tell whether it is in "
                     "use: connect(): ",
                     std::strerror(error)));
  }
  if (unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(path_, what_),
        ": cannot remove the stale socket: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status UnixListenerPath::Restrict(mode_t mode) {
  // Pinned first, so the identity kept is that of the file the descriptor
  // holds.
  const int pinned = open(path_.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat bound {};
  if (pinned < 0 || fstat(pinned, &bound) != 0 || !S_ISSOCK(bound.st_mode)) {
    if (pinned >= 0) close(pinned);
    return absl::InternalError(
        absl::StrCat(Describe(path_, what_), ": no socket after binding"));
  }
  if (chmod(path_.c_str(), mode) != 0) {
    const int error = errno;
    close(pinned);
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(path_, what_), absl::StrFormat(": chmod %04o: ", mode),
        std::strerror(error)));
  }
  if (pinned_ >= 0) close(pinned_);
  pinned_ = pinned;
  device_ = bound.st_dev;
  inode_ = bound.st_ino;
  return absl::OkStatus();
}

}  // namespace aggregator
